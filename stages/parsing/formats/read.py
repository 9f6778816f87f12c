"""The reader for each format beyond PDF (PDF stays with :mod:`stages.parsing.formats.pdf`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from runtime.api import InvalidDocument, one_line
from stages.parsing.formats.detect import Format
from stages.parsing.formats.text import Section
from stages.parsing.formats.unit import Unit

__all__ = ["Unit", "read_units"]


def read_units(path: Path, fmt: Format, name: str, limits: tuple[int, int, int]) -> Iterator[Unit]:
    """The pages (or sections) of a non-PDF document, in order, as they are read.

    ``limits`` are the image limits (min px, min bytes, max pixels).

    :raises InvalidDocument: damaged or empty (one line naming ``name``).
    """
    if fmt.reader == "mupdf":
        from stages.parsing.formats.mupdf import read_mupdf

        yield from read_mupdf(path, fmt, name, limits)
        return
    anything = False
    for unit in _units(path, fmt, name, limits):
        anything = True
        yield unit
    if not anything:
        raise InvalidDocument(one_line(f"{name}: no text found in this {fmt.name} file"))


def _units(path: Path, fmt: Format, name: str, limits: tuple[int, int, int]) -> Iterator[Unit]:
    if fmt.reader == "docx":
        from stages.parsing.formats.docx import docx_sections

        for n, part in enumerate(docx_sections(path, name, limits), 1):
            yield Unit(n, part.section.text, part.section.label, part.images)
        return
    for n, section in enumerate(_sections(path, fmt, name), 1):
        yield Unit(n, section.text, section.label, [])


def _sections(path: Path, fmt: Format, name: str) -> Iterator[Section]:
    """Plain text is read a block at a time; HTML and Markdown need the whole text (their
    parsers do), then no section of theirs is longer than ``SECTION_MAX_CHARS``."""
    from stages.parsing.formats.text import bounded, decode_text, markdown_sections, read_text

    if fmt.reader == "text":
        return read_text(path, name)
    data = path.read_bytes()
    if fmt.reader == "html":
        from stages.parsing.formats.html import decode_html, html_sections

        return bounded(html_sections(decode_html(data, name), name))
    return bounded(markdown_sections(decode_text(data, name)))
