"""DOCX into sections with python-docx: paragraphs and tables in body order, a section per
heading (the built-in "Title" and "Heading N" styles, or any paragraph with an outline
level), and the pictures in each section for vision.
"""

from __future__ import annotations

import hashlib
import io
import re
import zipfile
from pathlib import Path
from typing import Any

import docx
import msgspec
from docx.opc.exceptions import OpcError
from docx.table import Table
from docx.text.paragraph import Paragraph
from PIL import Image as PILImage
from PIL import UnidentifiedImageError

from runtime.api import InvalidDocument, one_line
from stages.formats.text import Section, heading_path
from stages.pdf import Image

__all__ = ["DocxSection", "docx_sections"]

_HEADING = re.compile(r"^(?:Heading|heading)\s*(\d)$")
_BLIP = ".//a:blip/@r:embed"  # the picture's relationship id inside a run's drawing
_KEEP = {"PNG": ("image/png", "png"), "JPEG": ("image/jpeg", "jpeg")}


class DocxSection(msgspec.Struct, frozen=True):
    section: Section
    images: list[Image]


def docx_sections(path: Path, name: str, limits: tuple[int, int, int]) -> list[DocxSection]:
    """:raises InvalidDocument: not a readable DOCX (one line). (lxml's XML syntax errors
    are SyntaxErrors.)"""
    try:
        document = docx.Document(str(path))
        return _Reader(document, limits).read()
    except (zipfile.BadZipFile, OpcError, KeyError, ValueError, SyntaxError) as exc:
        reason = str(exc).replace(str(path), name)  # not the stored file's path
        raise InvalidDocument(
            one_line(
                f"{name}: damaged DOCX that cannot be read ({reason}); re-save it from its source"
            )
        ) from exc


class _Reader:
    def __init__(self, document: Any, limits: tuple[int, int, int]) -> None:
        self.document = document
        self.limits = limits
        self.out: list[DocxSection] = []
        self.path: list[tuple[int, str]] = []
        self.label: str | None = None
        self.paragraphs: list[str] = []
        self.images: list[Image] = []
        self.seen: set[str] = set()

    def read(self) -> list[DocxSection]:
        for block in self.document.iter_inner_content():
            if isinstance(block, Paragraph):
                self._paragraph(block)
            elif isinstance(block, Table):
                self._table(block)
        self._flush()
        return self.out

    def _paragraph(self, paragraph: Paragraph) -> None:
        level = _heading_level(paragraph)
        text = paragraph.text.strip()
        if level is not None and text:
            self._flush()
            self.path = [(lv, t) for lv, t in self.path if lv < level] + [(level, text)]
            self.label = heading_path([t for _, t in self.path])
        if text:
            self.paragraphs.append(text)
        self._pictures(paragraph)

    def _table(self, table: Table) -> None:
        rows = []
        for row in table.rows:
            cells = [" ".join(c.text.split()) for c in row.cells]
            if any(cells):
                rows.append(" | ".join(cells))
        if rows:
            self.paragraphs.append("\n".join(rows))

    def _pictures(self, paragraph: Paragraph) -> None:
        for rid in paragraph._p.xpath(_BLIP):
            part = self.document.part.related_parts.get(rid)
            blob = getattr(part, "blob", None)
            if blob is None:
                continue
            image = _image(blob, len(self.out) + 1, self.limits)
            if image is not None and image.sha256 not in self.seen:
                self.seen.add(image.sha256)
                self.images.append(image)

    def _flush(self) -> None:
        if self.paragraphs or self.images:
            text = "\n\n".join(self.paragraphs)
            self.out.append(DocxSection(Section(text, self.label), self.images))
        self.paragraphs, self.images = [], []


def _heading_level(paragraph: Paragraph) -> int | None:
    style = paragraph.style
    name = style.name if style is not None else ""
    if name == "Title":
        return 1
    if m := _HEADING.match(name or ""):
        return int(m.group(1))
    return None


def _image(blob: bytes, section: int, limits: tuple[int, int, int]) -> Image | None:
    """A picture for vision as PNG or JPEG, or None when it is decoration or unreadable."""
    min_px, min_bytes, max_pixels = limits
    try:
        with PILImage.open(io.BytesIO(blob)) as img:
            width, height = img.size
            if width < min_px or height < min_px or width * height > max_pixels:
                return None
            if img.format in _KEEP and img.mode in ("RGB", "L"):
                data = blob
                media_type, ext = _KEEP[img.format]
            else:
                out = io.BytesIO()
                img.convert("RGBA" if "A" in img.mode else "RGB").save(out, "PNG")
                data, media_type, ext = out.getvalue(), "image/png", "png"
    except (UnidentifiedImageError, PILImage.DecompressionBombError, OSError, ValueError):
        return None  # EMF/WMF and other formats Pillow cannot read: left out
    if len(data) < min_bytes:
        return None
    return Image(
        page=section,
        sha256=hashlib.sha256(data).hexdigest(),
        data=data,
        media_type=media_type,
        ext=ext,
        width=width,
        height=height,
    )
