"""DOCX into sections: paragraphs and tables in body order, a section per heading (the
built-in "Title" and "Heading N" styles), and the pictures in each section for vision.

The package is read with :mod:`zipfile` and its main part is streamed through lxml's pull
parser (with python-docx's element classes), one child of the body at a time, each
cleared once read: python-docx would read the whole part into memory and build its whole
tree (~22 times the XML: a 900 MB ``document.xml`` that zips to 3 MB took over 6 GB), so
memory now stays flat in the part's size. A section longer than
:data:`~stages.parsing.formats.text.SECTION_MAX_CHARS` continues in another with the same
label, so no section grows without bound either.

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
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
from docx.enum.style import WD_STYLE_TYPE
from docx.exceptions import PythonDocxError
from docx.opc.constants import CONTENT_TYPE as CT
from docx.opc.constants import RELATIONSHIP_TYPE as RT
from docx.opc.exceptions import OpcError
from docx.opc.packuri import PackURI
from docx.oxml.ns import nsmap, qn
from docx.oxml.parser import element_class_lookup, parse_xml
from docx.parts.styles import StylesPart
from docx.styles.styles import Styles
from docx.table import Table
from lxml import etree  # type: ignore[import-untyped]
from PIL import Image as PILImage
from PIL import UnidentifiedImageError

from runtime.api import InvalidDocument, one_line
from stages.parsing.formats.text import SECTION_MAX_CHARS, Section, heading_path
from stages.parsing.formats.unit import Image
from stages.parsing.limits import ParseLimitExceeded

__all__ = ["DocxSection", "docx_sections"]

_HEADING = re.compile(r"^(?:Heading|heading)\s*(\d)$")
#: The pictures' relationship ids inside a paragraph's drawings (compiled once: python-docx's
#: ``xpath`` compiles its expression on every call, most of the time of a long document).
_BLIPS = etree.XPath(".//a:blip/@r:embed", namespaces=nsmap)
_BLIP = qn("a:blip")
_PPR, _PSTYLE, _VAL = qn("w:pPr"), qn("w:pStyle"), qn("w:val")
_KEEP = {"PNG": ("image/png", "png"), "JPEG": ("image/jpeg", "jpeg")}
#: Bytes of a part fed to the pull parser at a time.
_FEED_BYTES = 1 << 20
#: A part that unpacks to more is refused before it is read: on the development machine
#: the reader takes about 1 s for 3 MB of the densest XML (one-letter paragraphs), so this
#: is already most of the parser's CPU limit; Word's own documents stop far below it.
MAX_PART_BYTES = 256 << 20


class DocxSection(msgspec.Struct, frozen=True):
    section: Section
    images: list[Image]


def docx_sections(path: Path, name: str, limits: tuple[int, int, int]) -> Iterator[DocxSection]:
    """The document's sections, in order, as they are read.

    :raises InvalidDocument: not a readable DOCX (one line). (lxml's XML syntax errors
    are SyntaxErrors; python-docx raises its own for a table whose merged cells do not
    fit its grid.)"""
    try:
        with zipfile.ZipFile(path) as archive:
            yield from _Reader(_Package(archive, name), limits).read()
    except (
        zipfile.BadZipFile,
        OpcError,
        PythonDocxError,
        KeyError,
        ValueError,
        SyntaxError,
        EOFError,
        zlib.error,
    ) as exc:
        reason = str(exc).replace(str(path), name)  # not the stored file's path
        raise InvalidDocument(
            one_line(
                f"{name}: damaged DOCX that cannot be read ({reason}); re-save it from its source"
            )
        ) from exc


_RELS = "{http://schemas.openxmlformats.org/package/2006/relationships}Relationship"
_TYPES = "{http://schemas.openxmlformats.org/package/2006/content-types}"


class _Package:
    """The parts of a DOCX that the reader needs, read from the zip as they are asked for."""

    def __init__(self, archive: zipfile.ZipFile, name: str) -> None:
        self.archive = archive
        self.name = name
        main = self._rels(PackURI("/_rels/.rels"), "/").get_type(RT.OFFICE_DOCUMENT)
        if main is None:
            raise KeyError("no main document part")
        self.main = main
        content_type = self._content_type(main)
        if content_type != CT.WML_DOCUMENT_MAIN:
            raise ValueError(f"not a Word file, content type is '{content_type}'")
        rels_uri = PackURI(f"{main.baseURI.rstrip('/')}/_rels/{main.filename}.rels")
        self.rels = self._rels(rels_uri, main.baseURI)

    def _rels(self, uri: PackURI, base: str) -> _Relationships:
        try:
            blob = self.read(uri.membername)
        except KeyError:
            return _Relationships({})
        targets: dict[str, tuple[str, PackURI]] = {}
        for rel in parse_xml(blob).iterchildren(_RELS):
            if rel.get("TargetMode") == "External":
                continue
            target = PackURI.from_rel_ref(base, rel.get("Target", ""))
            targets[rel.get("Id", "")] = (rel.get("Type", ""), target)
        return _Relationships(targets)

    def _content_type(self, part: PackURI) -> str | None:
        types = parse_xml(self.read("[Content_Types].xml"))
        for override in types.iterchildren(f"{_TYPES}Override"):
            if override.get("PartName", "").lower() == part.lower():
                return str(override.get("ContentType"))
        for default in types.iterchildren(f"{_TYPES}Default"):
            if default.get("Extension", "").lower() == part.ext.lower():
                return str(default.get("ContentType"))
        return None

    def blob(self, part: PackURI) -> bytes:
        return self.read(part.membername)

    def read(self, member: str) -> bytes:
        return self.archive.read(self._checked(member))

    def _checked(self, member: str) -> zipfile.ZipInfo:
        """The member, if it unpacks to at most :data:`MAX_PART_BYTES` (the size its
        header declares: zipfile yields no more than that, and a shorter part fails its
        CRC check).

        :raises KeyError: no such member.
        :raises ParseLimitExceeded: it unpacks to more.
        """
        info = self.archive.getinfo(member)
        if info.file_size > MAX_PART_BYTES:
            raise ParseLimitExceeded(
                one_line(
                    f"{self.name}: its part {member} unpacks to {info.file_size / 2**20:.1f} MB, "
                    f"more than the {MAX_PART_BYTES >> 20} MB a DOCX part may have "
                    "(reading it would take minutes); refused as a possible zip bomb"
                )
            )
        return info

    def styles(self) -> Styles:
        """The document's styles (python-docx's default set when it has none, as
        python-docx itself does)."""
        part = self.rels.get_type(RT.STYLES)
        if part is None:
            return Styles(StylesPart.default(None).element)  # type: ignore[arg-type]
        return Styles(parse_xml(self.blob(part)))

    def stream(self, part: PackURI, tags: tuple[str, ...]) -> Iterator[Any]:
        """Each element of ``part`` named ``tags``, whole, as its end tag is read (the
        part is fed to the parser a megabyte at a time; the caller clears what it read)."""
        parser = etree.XMLPullParser(
            events=("end",), tag=tags, remove_blank_text=True, resolve_entities=False
        )
        parser.set_element_class_lookup(element_class_lookup)
        with self.archive.open(self._checked(part.membername)) as source:
            while block := source.read(_FEED_BYTES):
                parser.feed(block)
                yield from (element for _, element in parser.read_events())
        parser.close()
        yield from (element for _, element in parser.read_events())


class _Relationships:
    def __init__(self, targets: dict[str, tuple[str, PackURI]]) -> None:
        self.targets = targets

    def get(self, rid: str) -> PackURI | None:
        found = self.targets.get(rid)
        return None if found is None else found[1]

    def get_type(self, reltype: str) -> PackURI | None:
        """The first part related by ``reltype`` (in the relationships' order)."""
        return next((uri for kind, uri in self.targets.values() if kind == reltype), None)


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
#: A run's children that are text (``CT_R.text``'s "w:br | w:cr | ... | w:tab").
_RUN_TEXT = frozenset(qn(f"w:{t}") for t in ("br", "cr", "noBreakHyphen", "ptab", "t", "tab"))
_BODY = qn("w:body")
#: What may stand in the body: paragraphs, tables and what wraps them.
_BLOCK_TAGS = (_P, _TBL, _SDT, _ALTERNATE, *sorted(_WRAPPERS))
_NOTES_ROOT = {qn("w:footnote"): qn("w:footnotes"), qn("w:endnote"): qn("w:endnotes")}
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
        out.extend(_expand(child))
    return out


def _expand(child: Any) -> list[Any]:
    """``child`` itself, or what stands in its place if it is a content control, alternate
    content or another wrapper."""
    tag = child.tag
    if tag == _SDT:
        content = child.find(_SDT_CONTENT)
        return _children(content) if content is not None else []
    if tag == _ALTERNATE:
        chosen = _chosen(child)
        return _children(chosen) if chosen is not None else []
    if tag in _WRAPPERS:
        return _children(child)
    return [child]


def _run_text(run: Any) -> str:
    """python-docx's ``CT_R.text`` (each text-bearing child as its ``str``), without its
    XPath query, compiled again on every call."""
    return "".join(str(child) for child in run.iterchildren() if child.tag in _RUN_TEXT)


def _runs_text(paragraph: Any) -> tuple[str, list[Any]]:
    """A paragraph's text (python-docx's ``CT_R.text`` of each run it shows) and the text
    boxes anchored in it."""
    parts: list[str] = []
    boxes: list[Any] = []
    for child in _children(paragraph):
        if child.tag == _R:
            parts.append(_run_text(child))
            boxes.extend(_boxes(child))
    return "".join(parts), boxes


class _Reader:
    def __init__(self, package: _Package, limits: tuple[int, int, int]) -> None:
        self.package = package
        self.styles = package.styles()
        self.levels: dict[str | None, int | None] = {}
        self.limits = limits
        self.emitted = 0
        self.path: list[tuple[int, str]] = []
        self.label: str | None = None
        self.paragraphs: list[str] = []
        self.size = 0
        self.images: list[Image] = []
        self.seen: set[str] = set()
        self.pictures: dict[str, Image | None] = {}

    def read(self) -> Iterator[DocxSection]:
        for element in self._top(self.package.main, _BODY, _BLOCK_TAGS):
            for child in _expand(element):
                yield from self._block(child)
        yield from self._flush()
        for reltype, tag, label in _NOTES:
            yield from self._notes(reltype, tag, label)

    def _top(self, part: PackURI, parent_tag: str, tags: tuple[str, ...]) -> Iterator[Any]:
        """The children of ``part``'s ``parent_tag`` element named ``tags``, in order, each
        whole; once the caller is done with one it is cleared and dropped from the tree
        with its earlier siblings, so the tree never holds more than one."""
        for element in self.package.stream(part, tags):
            parent = element.getparent()
            if parent is None or parent.tag != parent_tag:
                continue
            yield element
            element.clear(keep_tail=False)
            while element.getprevious() is not None:
                del parent[0]
            parent.remove(element)

    def _block(self, child: Any) -> Iterator[DocxSection]:
        if child.tag == _P:
            yield from self._paragraph(child)
        elif child.tag == _TBL:
            self._table(child)
        if self.size >= SECTION_MAX_CHARS:
            # A long section continues in another with the same label.
            yield from self._flush()

    def _blocks(self, parent: Any) -> Iterator[DocxSection]:
        for child in _children(parent):
            yield from self._block(child)

    def _paragraph(self, p: Any) -> Iterator[DocxSection]:
        text, boxes = _runs_text(p)
        text = text.strip()
        level = self._heading_level(_style_id(p)) if text else None
        if level is not None:
            yield from self._flush()
            self.path = [(lv, t) for lv, t in self.path if lv < level] + [(level, text)]
            self.label = heading_path([t for _, t in self.path])
        if text:
            self._add(text)
        self._pictures(p)
        for box in boxes:
            yield from self._blocks(box)

    def _add(self, text: str) -> None:
        self.paragraphs.append(text)
        self.size += len(text) + 2

    def _heading_level(self, style_id: str | None) -> int | None:
        """The heading level of a paragraph style (python-docx's rules for which style a
        paragraph has: its own when the document defines it, else the default)."""
        if style_id not in self.levels:
            style = self.styles.get_by_id(style_id, WD_STYLE_TYPE.PARAGRAPH)
            self.levels[style_id] = _heading_level(style.name if style is not None else "")
        return self.levels[style_id]

    def _table(self, tbl: Any) -> None:
        """A row a line, cells separated by " | ". python-docx lays out the merged cells: a
        cell merged down a column is repeated in each row it spans (so each row reads
        whole), one merged across is written once."""
        rows = []
        for row in Table(tbl, None).rows:  # type: ignore[arg-type]  # no part needed
            cells, last = [], None
            for cell in row.cells:
                if cell._tc is not last:
                    cells.append(_cell_text(cell._tc))
                last = cell._tc
            if any(cells):
                rows.append(" | ".join(cells))
        if rows:
            self._add("\n".join(rows))

    def _pictures(self, p: Any) -> None:
        if next(p.iter(_BLIP), None) is None:
            return  # most paragraphs: the tree walk in C, not the XPath query
        for rid in _BLIPS(p):
            if rid not in self.pictures:
                self.pictures[rid] = self._picture(rid)
            image = self.pictures[rid]
            if image is not None and image.sha256 not in self.seen:
                self.seen.add(image.sha256)
                self.images.append(msgspec.structs.replace(image, page=self.emitted + 1))

    def _picture(self, rid: str) -> Image | None:
        part = self.package.rels.get(rid)
        if part is None:
            return None
        try:
            blob = self.package.blob(part)
        except KeyError:
            return None  # a picture the package does not hold: left out
        return _image(blob, self.emitted + 1, self.limits)

    def _notes(self, reltype: str, tag: str, label: str) -> Iterator[DocxSection]:
        """The footnotes or endnotes, a section of their own (pictures in them left out)."""
        part = self.package.rels.get_type(reltype)
        if part is None:
            return
        self.label = label
        for note in self._top(part, _NOTES_ROOT[tag], (tag,)):
            if note.get(qn("w:type")) in _NOT_NOTES:
                continue
            if text := _cell_text(note):  # one line already
                self._add(text)
            if self.size >= SECTION_MAX_CHARS:
                yield from self._flush()
        yield from self._flush()

    def _flush(self) -> Iterator[DocxSection]:
        if self.paragraphs or self.images:
            text = "\n\n".join(self.paragraphs)
            self.emitted += 1
            yield DocxSection(Section(text, self.label), self.images)
        self.paragraphs, self.images, self.size = [], [], 0


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


def _style_id(p: Any) -> str | None:
    """python-docx's ``CT_P.style`` (``w:pPr/w:pStyle/@w:val``), without its property
    lookups on every paragraph."""
    ppr = p.find(_PPR)
    style = ppr.find(_PSTYLE) if ppr is not None else None
    return None if style is None else style.get(_VAL)


def _heading_level(name: str | None) -> int | None:
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
