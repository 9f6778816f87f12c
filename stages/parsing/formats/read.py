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
    """The pages (or sections) of a non-PDF document, in order.

    ``limits`` are the image limits (min px, min bytes, max pixels).

    :raises InvalidDocument: damaged or empty (one line naming ``name``).
    """
    if fmt.reader == "mupdf":
        from stages.parsing.formats.mupdf import read_mupdf

        yield from read_mupdf(path, fmt, name, limits)
        return
    if fmt.reader == "docx":
        from stages.parsing.formats.docx import docx_sections

        parts = docx_sections(path, name, limits)
        units = [Unit(n, p.section.text, p.section.label, p.images) for n, p in enumerate(parts, 1)]
    else:
        units = [Unit(n, s.text, s.label, []) for n, s in enumerate(_sections(path, fmt, name), 1)]
    if not units:
        raise InvalidDocument(one_line(f"{name}: no text found in this {fmt.name} file"))
    yield from units


def _sections(path: Path, fmt: Format, name: str) -> list[Section]:
    data = path.read_bytes()
    if fmt.reader == "html":
        from stages.parsing.formats.html import decode_html, html_sections

        return html_sections(decode_html(data, name))
    from stages.parsing.formats.text import decode_text, markdown_sections, text_sections

    text = decode_text(data, name)
    return markdown_sections(text) if fmt.reader == "markdown" else text_sections(text)
