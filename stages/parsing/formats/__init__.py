"""Formats beyond PDF: detection from content (:mod:`.detect`) and one reader per family.

=========================  ===========================================================
format                     reader
=========================  ===========================================================
PDF                        :mod:`stages.parsing.formats.pdf` (unchanged)
XPS, EPUB, MOBI, FB2, CBZ, :mod:`.mupdf` (PyMuPDF opens them; converted to PDF pages)
SVG, PNG, JPEG, TIFF,
GIF, BMP, JPEG 2000
plain text, Markdown       :mod:`.text` (charset-normalizer, markdown-it-py)
HTML                       :mod:`.html` (selectolax / Lexbor)
DOCX                       :mod:`.docx` (python-docx)
=========================  ===========================================================

Why these libraries: docs/formats.md. Importing this package loads only detection (no
PyMuPDF): ``serve`` and the CLI check uploads with it. The readers are in :mod:`.read`.
"""

from __future__ import annotations

from stages.parsing.formats.detect import (
    FORMATS,
    SUFFIXES,
    Format,
    by_media_type,
    detect,
    named_as_document,
)

__all__ = ["FORMATS", "SUFFIXES", "Format", "by_media_type", "detect", "named_as_document"]
