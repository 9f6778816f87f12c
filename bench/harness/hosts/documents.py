"""The documents of a multi-host run: small PDFs of distinct made-up prose, made with
PyMuPDF, so every chunk's text (and so every embed call) is a document's own."""

# mypy: disallow-untyped-calls=False

from __future__ import annotations

import random
from pathlib import Path

import pymupdf

_WORDS = [
    "harbour",
    "tide",
    "ledger",
    "lantern",
    "granite",
    "orchard",
    "meadow",
    "copper",
    "signal",
    "vessel",
    "quarry",
    "beacon",
    "timber",
    "furnace",
    "compass",
    "glacier",
    "canal",
    "thicket",
    "ember",
    "saddle",
    "falcon",
    "tunnel",
    "willow",
    "anchor",
    "basalt",
    "harvest",
    "cinder",
    "prairie",
    "mortar",
    "spindle",
    "forge",
    "garnet",
    "hollow",
    "juniper",
    "keel",
    "lattice",
]


def _paragraph(rng: random.Random, words: int) -> str:
    text = " ".join(rng.choice(_WORDS) for _ in range(words))
    return text[0].upper() + text[1:] + "."


def make_pdfs(folder: Path, count: int, pages: int = 3, seed: int = 1) -> list[Path]:
    """``count`` PDFs of ``pages`` pages each, distinct in every paragraph."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    made = []
    for n in range(count):
        doc = pymupdf.open()
        for p in range(pages):
            page = doc.new_page()
            body = "\n\n".join(_paragraph(rng, 60) for _ in range(4))
            page.insert_textbox(
                pymupdf.Rect(60, 60, 535, 780), f"Report {n} page {p + 1}\n\n{body}", fontsize=10
            )
        path = folder / f"report-{n:03d}.pdf"
        doc.save(str(path))
        doc.close()
        made.append(path)
    return made
