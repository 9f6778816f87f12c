"""DOCX into sections with python-docx: paragraphs and tables in body order, a section per
heading (the built-in "Title" and "Heading N" styles, or any paragraph with an outline
level), and the pictures in each section for vision.

python-docx reads only a paragraph's own runs and the body's own paragraphs and tables, so
the XML is walked here: what Word keeps deeper (``w:ins``, ``w:sdt``, smart tags, fields,
text boxes, nested tables, notes) is read once; ``w:del``, ``w:moveFrom``, a drawing's VML
fallback, headers, footers and comments are not. The details, and why: docs/formats.md.
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
from docx.exceptions import PythonDocxError
from docx.opc.constants import RELATIONSHIP_TYPE as RT
from docx.opc.exceptions import OpcError
from docx.oxml.ns import qn
from docx.oxml.parser import parse_xml
from docx.table import Table
from docx.text.paragraph import Paragraph
from PIL import Image as PILImage
from PIL import UnidentifiedImageError

from runtime.api import InvalidDocument, one_line
from stages.parsing.formats.text import Section, heading_path
from stages.parsing.formats.unit import Image

__all__ = ["DocxSection", "docx_sections"]

_HEADING = re.compile(r"^(?:Heading|heading)\s*(\d)$")
_BLIP = ".//a:blip/@r:embed"  # the picture's relationship id inside a run's drawing
_KEEP = {"PNG": ("image/png", "png"), "JPEG": ("image/jpeg", "jpeg")}


class DocxSection(msgspec.Struct, frozen=True):
    section: Section
    images: list[Image]


def docx_sections(path: Path, name: str, limits: tuple[int, int, int]) -> list[DocxSection]:
    """:raises InvalidDocument: not a readable DOCX (one line). (lxml's XML syntax errors
    are SyntaxErrors; python-docx raises its own for a table whose merged cells do not
    fit its grid.)"""
    try:
        document = docx.Document(str(path))
        return _Reader(document, limits).read()
    except (
        zipfile.BadZipFile,
        OpcError,
        PythonDocxError,
        KeyError,
        ValueError,
        SyntaxError,
    ) as exc:
        reason = str(exc).replace(str(path), name)  # not the stored file's path
        raise InvalidDocument(
            one_line(
                f"{name}: damaged DOCX that cannot be read ({reason}); re-save it from its source"
            )
        ) from exc


_MC = "http://schemas.openxmlformats.org/markup-compatibility/2006"
_P, _TBL, _TR, _TC, _R = qn("w:p"), qn("w:tbl"), qn("w:tr"), qn("w:tc"), qn("w:r")
_SDT, _SDT_CONTENT = qn("w:sdt"), qn("w:sdtContent")
_ALTERNATE, _CHOICE, _FALLBACK = (
    f"{{{_MC}}}AlternateContent",
    f"{{{_MC}}}Choice",
    f"{{{_MC}}}Fallback",
)
#: Elements whose children are read as if they stood in their place (as are a content
#: control's w:sdtContent and an mc:AlternateContent's first choice: _children).
_WRAPPERS = {
    qn(t)
    for t in ("w:hyperlink", "w:ins", "w:moveTo", "w:smartTag", "w:fldSimple", "w:customXml",
              "w:dir", "w:bdo")
}  # fmt: skip
_TXBX = qn("w:txbxContent")
_DRAWINGS = {qn("w:drawing"), qn("w:pict")}
_NOTES = (
    (RT.FOOTNOTES, qn("w:footnote"), "Footnotes"),
    (RT.ENDNOTES, qn("w:endnote"), "Endnotes"),
)
#: Word's separator "notes" (the rules above the notes), not text.
_NOT_NOTES = {"separator", "continuationSeparator", "continuationNotice"}


def _chosen(alternate: Any) -> Any:
    """An mc:AlternateContent's first choice (its fallback repeats it in an older form)."""
    choice = alternate.find(_CHOICE)
    return choice if choice is not None else alternate.find(_FALLBACK)


def _boxes(run: Any) -> list[Any]:
    """The text boxes a run's drawings hold (DrawingML or VML), each once: not those of an
    mc:AlternateContent's fallback, nor a box inside a box (read with its box)."""
    found: list[Any] = []

    def search(element: Any) -> None:
        for child in element.iterchildren():
            if child.tag == _TXBX:
                found.append(child)
            elif child.tag == _ALTERNATE:
                chosen = _chosen(child)
                if chosen is not None:
                    search(chosen)
            else:
                search(child)

    for child in run.iterchildren():
        if child.tag in _DRAWINGS:
            search(child)
        elif child.tag == _ALTERNATE and (chosen := _chosen(child)) is not None:
            search(chosen)
    return found


def _children(element: Any) -> list[Any]:
    """``element``'s children, with those of content controls and alternate content in
    their place."""
    out: list[Any] = []
    for child in element.iterchildren():
        tag = child.tag
        if tag == _SDT:
            content = child.find(_SDT_CONTENT)
            if content is not None:
                out.extend(_children(content))
        elif tag == _ALTERNATE:
            chosen = _chosen(child)
            if chosen is not None:
                out.extend(_children(chosen))
        elif tag in _WRAPPERS:
            out.extend(_children(child))
        else:
            out.append(child)
    return out


def _runs_text(paragraph: Any) -> tuple[str, list[Any]]:
    """A paragraph's text (python-docx's ``CT_R.text`` of each run it shows) and the text
    boxes anchored in it."""
    parts: list[str] = []
    boxes: list[Any] = []
    for child in _children(paragraph):
        if child.tag == _R:
            parts.append(child.text)
            boxes.extend(_boxes(child))
    return "".join(parts), boxes


class _Reader:
    def __init__(self, document: Any, limits: tuple[int, int, int]) -> None:
        self.document = document
        self.body = document._body
        self.limits = limits
        self.out: list[DocxSection] = []
        self.path: list[tuple[int, str]] = []
        self.label: str | None = None
        self.paragraphs: list[str] = []
        self.images: list[Image] = []
        self.seen: set[str] = set()

    def read(self) -> list[DocxSection]:
        self._blocks(self.document.element.body)
        self._flush()
        for reltype, tag, label in _NOTES:
            self._notes(reltype, tag, label)
        return self.out

    def _blocks(self, parent: Any) -> None:
        for child in _children(parent):
            if child.tag == _P:
                self._paragraph(child)
            elif child.tag == _TBL:
                self._table(child)

    def _paragraph(self, p: Any) -> None:
        text, boxes = _runs_text(p)
        text = text.strip()
        level = _heading_level(Paragraph(p, self.body)) if text else None
        if level is not None:
            self._flush()
            self.path = [(lv, t) for lv, t in self.path if lv < level] + [(level, text)]
            self.label = heading_path([t for _, t in self.path])
        if text:
            self.paragraphs.append(text)
        self._pictures(p)
        for box in boxes:
            self._blocks(box)

    def _table(self, tbl: Any) -> None:
        """A row a line, cells separated by " | ". python-docx lays out the merged cells: a
        cell merged down a column is repeated in each row it spans (so each row reads
        whole), one merged across is written once."""
        rows = []
        for row in Table(tbl, self.body).rows:
            cells, last = [], None
            for cell in row.cells:
                if cell._tc is not last:
                    cells.append(_cell_text(cell._tc))
                last = cell._tc
            if any(cells):
                rows.append(" | ".join(cells))
        if rows:
            self.paragraphs.append("\n".join(rows))

    def _pictures(self, p: Any) -> None:
        for rid in p.xpath(_BLIP):
            part = self.document.part.related_parts.get(rid)
            blob = getattr(part, "blob", None)
            if blob is None:
                continue
            image = _image(blob, len(self.out) + 1, self.limits)
            if image is not None and image.sha256 not in self.seen:
                self.seen.add(image.sha256)
                self.images.append(image)

    def _notes(self, reltype: str, tag: str, label: str) -> None:
        """The footnotes or endnotes, a section of their own (pictures in them left out)."""
        part = next(
            (r.target_part for r in self.document.part.rels.values() if r.reltype == reltype
             and not r.is_external),
            None,
        )  # fmt: skip
        if part is None:
            return
        notes = parse_xml(part.blob)
        texts = []
        for note in notes.iterchildren(tag):
            if note.get(qn("w:type")) in _NOT_NOTES:
                continue
            if text := _cell_text(note):  # one line already
                texts.append(text)
        if texts:
            self.out.append(DocxSection(Section("\n\n".join(texts), label), []))

    def _flush(self) -> None:
        if self.paragraphs or self.images:
            text = "\n\n".join(self.paragraphs)
            self.out.append(DocxSection(Section(text, self.label), self.images))
        self.paragraphs, self.images = [], []


def _cell_text(container: Any) -> str:
    """All the text in a table cell (or a note), nested tables and text boxes included,
    on one line."""
    parts: list[str] = []
    for child in _children(container):
        if child.tag == _P:
            text, boxes = _runs_text(child)
            parts.append(text)
            parts.extend(_cell_text(box) for box in boxes)
        elif child.tag == _TBL:
            for row in _children(child):
                if row.tag == _TR:
                    parts.extend(_cell_text(c) for c in _children(row) if c.tag == _TC)
    return " ".join(" ".join(parts).split())


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
