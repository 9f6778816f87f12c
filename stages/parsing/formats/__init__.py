"""Formats beyond PDF: detection from content (:mod:`.detect`) and one reader per family.

Readers: PDF :mod:`stages.parsing.formats.pdf`; what PyMuPDF opens (XPS, EPUB, MOBI, FB2,
CBZ, SVG, pictures; converted to PDF pages) :mod:`.mupdf`; plain text and Markdown
:mod:`.text`; HTML :mod:`.html`; DOCX :mod:`.docx`. The table, and why these libraries:
docs/formats.md. Importing this package loads only detection (no PyMuPDF): ``serve`` and
the CLI check uploads with it. The readers are in :mod:`.read`.
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
