"""Picking the chaos run's PDFs from the corpus."""

# PyMuPDF's API is only partly typed.
# mypy: disallow-untyped-calls=False

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pymupdf


def small_pdfs(candidates: Iterable[Path], count: int, max_pages: int) -> list[Path]:
    """The ``count`` shortest PDFs with 2..max_pages pages and some text, distinct bytes."""
    ranked: list[tuple[int, str, Path]] = []
    for path in candidates:
        pages = _text_pages(path, max_pages)
        if pages:
            ranked.append((pages, path.name, path))
    ranked.sort()
    return [p for _, _, p in ranked[:count]]


def _text_pages(path: Path, max_pages: int) -> int:
    """Page count if the PDF opens, has 2..max_pages pages and text; else 0."""
    try:
        with pymupdf.open(path) as doc:
            pages = doc.page_count
            if not 2 <= pages <= max_pages:
                return 0
            text = "".join(str(page.get_text()) for page in doc)
    except (pymupdf.FileDataError, RuntimeError, ValueError):
        return 0
    # Text holding NUL trips a product bug (parse cannot store it; see has_nul_text and
    # test_chaos.py's xfail): left out here so the chaos run measures chaos, not that.
    if has_nul_text(text):
        return 0
    return pages if len(text.strip()) > 200 else 0


def has_nul_text(text: str) -> bool:
    return "\x00" in text


def nul_text_pdfs(candidates: Iterable[Path], max_pages: int) -> list[Path]:
    """PDFs of at most ``max_pages`` pages whose extracted text contains NUL characters."""
    found = []
    for path in candidates:
        try:
            with pymupdf.open(path) as doc:
                if doc.page_count <= max_pages and any(
                    has_nul_text(str(page.get_text())) for page in doc
                ):
                    found.append(path)
        except (pymupdf.FileDataError, RuntimeError, ValueError):
            continue
    return found
