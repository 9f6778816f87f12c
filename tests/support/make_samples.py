"""Generate ragline's three sample PDFs (run from anywhere; writes them into ``samples/``,
which holds only documents, so ``ingest samples/`` takes all of it).

    python tests/support/make_samples.py

Each sample has headings and paragraphs flowing over several pages, one figure (a PNG
drawn here, with large text that OCR can read) and a small logo repeated in every page's
corner (one image, used on every page: the parser must extract it once). The topics are
far apart (lighthouses, sourdough baking, the Rust borrow checker) so a search finds the
right document. Their texts are data, in ``samples.toml``. Output is deterministic apart
from PDF metadata dates, which are blanked.
"""

# mypy: disallow-untyped-calls=False

from __future__ import annotations

import html
import io
import tomllib
from pathlib import Path

import pymupdf

HERE = Path(__file__).resolve().parent
#: Where the PDFs go: the repository's samples folder.
OUT_DIR = HERE.parents[1] / "samples"
A4 = pymupdf.paper_rect("a4")
MARGIN = 60

# (file stem, title, figure caption, figure lines, logo color, sections)
# Each section: (heading, [paragraphs]).
Section = tuple[str, list[str]]
Sample = tuple[str, str, str, list[str], tuple[float, float, float], list[Section]]


def load_samples(path: Path = HERE / "samples.toml") -> list[Sample]:
    """The samples' texts, figures and colours (kept as data in ``samples.toml``)."""
    with path.open("rb") as f:
        samples = tomllib.load(f)["samples"]
    return [
        (
            s["stem"],
            s["title"],
            s["caption"],
            s["figure"],
            (s["logo"][0], s["logo"][1], s["logo"][2]),
            [(section["heading"], section["paragraphs"]) for section in s["sections"]],
        )
        for s in samples
    ]


def figure_png(lines: list[str], color: tuple[float, float, float]) -> bytes:
    """A bar chart with large labels, drawn with PyMuPDF and rendered to PNG."""
    width, height = 480, 300
    doc = pymupdf.open()
    page = doc.new_page(width=width, height=height)
    page.draw_rect(page.rect, color=(0, 0, 0), fill=(1, 1, 1), width=2)
    for i, line in enumerate(lines):
        size = 30 if i == 0 else 22
        page.insert_text((24, 48 + i * 44), line, fontsize=size, fontname="helv")
    for i, bar_height in enumerate((40, 70, 110, 150)):
        x = 40 + i * 100
        page.draw_rect(pymupdf.Rect(x, 280 - bar_height, x + 60, 280), color=color, fill=color)
    pix = page.get_pixmap(dpi=110, colorspace=pymupdf.csGRAY)
    return bytes(pix.tobytes("png"))


def logo_png(color: tuple[float, float, float]) -> bytes:
    doc = pymupdf.open()
    page = doc.new_page(width=48, height=48)
    page.draw_circle((24, 24), 20, color=color, fill=color)
    page.draw_circle((24, 24), 9, color=(1, 1, 1), fill=(1, 1, 1))
    return bytes(page.get_pixmap(dpi=144).tobytes("png"))


def story_html(title: str, sections: list[Section], caption: str) -> str:
    parts = [f"<h1>{html.escape(title)}</h1>"]
    for i, (heading, paragraphs) in enumerate(sections):
        parts.append(f"<h2>{html.escape(heading)}</h2>")
        parts.extend(f"<p>{html.escape(p)}</p>" for p in paragraphs)
        if i == 1:
            parts.append('<p><img src="figure.png" width="320"/></p>')
            parts.append(f"<p><i>{html.escape(caption)}</i></p>")
    return "\n".join(parts)


CSS = (
    "body {font-family: sans-serif;} h1 {font-size: 22pt;} "
    "h2 {font-size: 16pt; margin-top: 14pt;} p {font-size: 15pt;}"
)


def render(title: str, caption: str, figure: bytes, sections: list[Section]) -> bytes:
    archive = pymupdf.Archive()
    archive.add(figure, "figure.png")
    story = pymupdf.Story(html=story_html(title, sections, caption), user_css=CSS, archive=archive)
    out = io.BytesIO()
    writer = pymupdf.DocumentWriter(out)
    where = pymupdf.Rect(MARGIN, MARGIN, A4.width - MARGIN, A4.height - MARGIN)
    more = True
    while more:
        device = writer.begin_page(A4)
        more, _ = story.place(where)
        story.draw(device)
        writer.end_page()
    writer.close()
    return out.getvalue()


def add_logo(pdf: bytes, logo: bytes) -> pymupdf.Document:
    doc = pymupdf.open(stream=pdf, filetype="pdf")
    xref = 0
    for page in doc.pages():
        corner = pymupdf.Rect(A4.width - 50, 14, A4.width - 14, 50)
        xref = page.insert_image(corner, stream=logo, xref=xref)
    return doc


def main() -> None:
    for stem, title, caption, lines, color, sections in load_samples():
        pdf = render(title, caption, figure_png(lines, color), sections)
        doc = add_logo(pdf, logo_png(color))
        doc.subset_fonts()
        doc.set_metadata({"title": title, "author": "ragline samples", "producer": "PyMuPDF"})
        out = OUT_DIR / f"{stem}.pdf"
        doc.save(out, garbage=3, deflate=True, no_new_id=True)
        print(f"{out.name}: {doc.page_count} pages, {out.stat().st_size} bytes")


if __name__ == "__main__":
    main()
