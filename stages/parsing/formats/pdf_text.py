"""A PDF page's text, as the chunker wants it: MuPDF's text blocks in content-stream order,
separated by blank lines, with ligatures expanded ("ﬁ" → "fi", so search finds the words).

Blocks give the chunker paragraphs; content-stream order is nearly every producer's reading
order (sorting by position would interleave two columns; a page that reads across two
columns is put in order by :mod:`stages.parsing.formats.pdf_layout`, which also keeps the
blocks' boxes). Only characters are read, never where each sits: PyMuPDF's box correction,
MuPDF's text-color ICC conversion and its mediabox clip are off (``extractBLOCKS`` drops
off-page characters itself). Costs: docs/architecture.md, "Throughput and latency".
"""

# mypy: disallow-untyped-calls=False

from __future__ import annotations

import ctypes
import functools
import sys
from typing import Any

import pymupdf
from pymupdf import mupdf

__all__ = ["blocks_at", "page_text", "text_at", "text_blocks"]

_TEXT_FLAGS = (
    pymupdf.TEXTFLAGS_TEXT & ~pymupdf.TEXT_PRESERVE_LIGATURES & ~pymupdf.TEXT_MEDIABOX_CLIP
)

# Process-wide; nothing in ragline reads character boxes.
pymupdf.TOOLS.unset_quad_corrections(True)


# PyMuPDF's own helpers under its Page and TextPage methods (src/extra.i), present since
# the rebased implementation; without them every page takes the public path.
_EXTRA: Any = getattr(pymupdf, "extra", None)
_LOW_LEVEL = all(
    hasattr(m, n)
    for m, n in (
        (_EXTRA, "page_get_textpage"),
        (_EXTRA, "extractBLOCKS"),
        (pymupdf, "JM_page_rotation"),
    )
)


def text_at(doc: pymupdf.Document, number: int) -> str:
    """The text of page ``number`` (0-based), as :func:`page_text` of
    ``doc.load_page(number)`` gives it, without PyMuPDF's Python ``Page`` and ``TextPage``
    objects: 6% of the CPU of reading the text, 11% with the page's image list read the
    same way (interleaved page by page over bench.ingest's corpus; the same text on every
    page). A rotated page takes the public path, which reads it as if unrotated."""
    return _joined(blocks_at(doc, number)[0])


def blocks_at(doc: pymupdf.Document, number: int) -> tuple[list[tuple[Any, ...]], Any]:
    """Page ``number``'s blocks (``extractBLOCKS``: x0, y0, x1, y1, text, number, type)
    and MuPDF's text page they were read from (a ``mupdf.FzStextPage``, whose text blocks
    are these blocks' text blocks in the same order)."""
    if not _LOW_LEVEL:
        return _public_blocks(doc.load_page(number))
    fz_page = mupdf.fz_load_page(doc.this, number)
    pdf_page = mupdf.pdf_page_from_fz_page(fz_page)
    if pdf_page.m_internal and pymupdf.JM_page_rotation(pdf_page):
        return _public_blocks(doc.load_page(number))
    pymupdf.TOOLS.set_icc(False)
    try:
        textpage = mupdf.FzStextPage(_EXTRA.page_get_textpage(fz_page, None, _TEXT_FLAGS, None))
    finally:
        pymupdf.TOOLS.set_icc(True)
    return _given_back(_EXTRA.extractBLOCKS(textpage)), textpage


def _public_blocks(page: Any) -> tuple[list[tuple[Any, ...]], Any]:
    pymupdf.TOOLS.set_icc(False)
    try:
        textpage = page.get_textpage(flags=_TEXT_FLAGS)
    finally:
        pymupdf.TOOLS.set_icc(True)
    return _given_back(textpage.extractBLOCKS()), textpage.this


def page_text(page: Any) -> str:
    return _joined(text_blocks(page))


def _joined(blocks: list[tuple[Any, ...]]) -> str:
    text = "\n\n".join(t for b in blocks if b[6] == 0 and (t := b[4].strip()))
    # Some fonts map glyphs to U+0000; PostgreSQL text cannot hold it, and it means nothing.
    return text.replace("\x00", "") if "\x00" in text else text


_decref = ctypes.pythonapi.Py_DecRef
_decref.argtypes = [ctypes.py_object]
_decref.restype = None


def text_blocks(page: Any) -> list[tuple[Any, ...]]:
    """``page.get_text("blocks")`` without PyMuPDF 2.0's leak: its C helper (``_as_blocks``
    in src/extra.i) appends each block tuple with ``LIST_APPEND``, which keeps a reference,
    so every block of every page stayed in memory with its text (~10 kB a page, 130 MB
    over bench.ingest's corpus). That reference is given back, on tuples only this list
    holds, and only where :func:`_leaks_blocks` found the leak."""
    # ICC off for the text only: decoding images without it turned a CMYK JPEG into one
    # flat color. (A process parses in one thread at a time: ParseStage's limiter.)
    pymupdf.TOOLS.set_icc(False)
    try:
        textpage = page.get_textpage(flags=_TEXT_FLAGS)
    finally:
        pymupdf.TOOLS.set_icc(True)
    return _given_back(textpage.extractBLOCKS())


def _given_back(blocks: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    if _leaks_blocks():
        for block in blocks:
            # The list's reference, ``block``'s and the argument's; a fourth is the leak.
            if sys.getrefcount(block) > 3:
                _decref(block)
    return blocks


@functools.cache
def _leaks_blocks() -> bool:
    """Whether ``extractBLOCKS`` leaks a reference on each block, probed on a made page."""
    doc = pymupdf.open()
    page = doc.new_page()
    page.insert_text((72, 72), "probe")
    blocks = page.get_textpage(flags=_TEXT_FLAGS).extractBLOCKS()
    # A tuple only the list holds has two references: the list's and the argument's.
    if leaks := sys.getrefcount(blocks[0]) > 2:
        _decref(blocks[0])
    return leaks
