"""Formats PyMuPDF opens natively (XPS, EPUB, MOBI, FB2, CBZ, SVG, PNG, JPEG, TIFF, GIF, BMP,
JPEG 2000): each is converted to PDF a batch of pages at a time and read by the PDF reader
(:func:`stages.parsing.formats.pdf.iter_pages`), so text, images and their limits behave exactly as
for
PDFs. Images (and CBZ pages) become one page each whose picture goes to vision/OCR; an
SVG without text is rendered to a picture. Pages of reflowable formats (EPUB, MOBI, FB2)
are MuPDF's layout; their chapter from the table of contents is kept as the section.
"""

# PyMuPDF ships type hints for only part of its API.
# mypy: disallow-untyped-calls=False

from __future__ import annotations

import hashlib
import logging
import re
import warnings
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pymupdf
from PIL import Image as PILImage
from PIL import UnidentifiedImageError
from pymupdf import mupdf

from runtime.api import InvalidDocument, one_line
from stages.parsing.formats.detect import Format
from stages.parsing.formats.pdf import iter_pages, release_document_memory
from stages.parsing.formats.unit import Image, Unit
from stages.parsing.limits import ParseLimitExceeded

__all__ = ["read_mupdf"]

log = logging.getLogger(__name__)

#: Pages converted to PDF at once: memory stays flat in the length of a long book.
BATCH_PAGES = 32
_ERRORS = (RuntimeError, ValueError, pymupdf.FileDataError, pymupdf.mupdf.FzErrorBase)
#: Formats that are one picture (a TIFF: one a frame), checked for size before decoding.
_IMAGES = frozenset({"PNG", "JPEG", "TIFF", "GIF", "BMP", "JPEG 2000"})
_PICTURES = _IMAGES | {"CBZ"}
#: An SVG without text is rendered at this scale (then capped by max_image_pixels).
SVG_SCALE = 2.0
#: A markup part of an EPUB or XPS (a chapter, a page) that unpacks to more is refused
#: before MuPDF reads it: MuPDF holds a part's whole tree and layout, tens of times its
#: size (32 MB of one-letter paragraphs is over the parser's 1 GB), and a page of more
#: takes it minutes before it runs out. A book's chapter is a few MB at most.
MAX_MARKUP_PART_BYTES = 32 << 20
_ZIPPED_MARKUP = frozenset({"EPUB", "XPS"})
_MARKUP = re.compile(r"\.(?:x?html?|xml|fpage|fdoc|fdseq|opf|ncx|svg|rels)$", re.IGNORECASE)


def read_mupdf(path: Path, fmt: Format, name: str, limits: tuple[int, int, int]) -> Iterator[Unit]:
    """The document's pages; ``limits`` are (min px, min bytes, max pixels) for images.

    :raises InvalidDocument: damaged, encrypted, no pages, or nothing readable (one line).
    """
    if fmt.name in _IMAGES:
        _check_pixels(path, fmt, name, limits[2])
    if fmt.name in _ZIPPED_MARKUP:
        _check_parts(path, fmt, name)
    if fmt.name in _PICTURES:
        # The picture is the document: no size makes it decoration.
        limits = (1, 0, limits[2])
    doc = _open(path, fmt, name)
    try:
        anything = False
        for unit in _units(doc, fmt, name, limits):
            anything = anything or bool(unit.text.strip() or unit.images)
            yield unit
        if not anything:
            raise InvalidDocument(
                one_line(f"{name}: no text or pictures found in this {fmt.name}; damaged or empty")
            )
    finally:
        doc.close()
        release_document_memory()


def _check_pixels(path: Path, fmt: Format, name: str, max_pixels: int) -> None:
    """Refuse a picture too large to decode before decoding it (a decompression bomb)."""
    try:
        width, height = _declared_size(path)
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError):
        return  # MuPDF's own error, on open, names what is wrong
    if width * height > max_pixels:
        raise InvalidDocument(
            one_line(
                f"{name}: {fmt.name} of {width}x{height} px is over max_image_pixels="
                f"{max_pixels}; scale it down"
            )
        )


def _check_parts(path: Path, fmt: Format, name: str) -> None:
    """Refuse a container with a markup part over :data:`MAX_MARKUP_PART_BYTES` (by the
    size the zip declares: what MuPDF unpacks stops there)."""
    try:
        with zipfile.ZipFile(path) as archive:
            members = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError, EOFError):
        return  # MuPDF's own error, on open, names what is wrong
    for member in members:
        if member.file_size > MAX_MARKUP_PART_BYTES and _MARKUP.search(member.filename):
            raise ParseLimitExceeded(
                one_line(
                    f"{name}: its part {member.filename} unpacks to "
                    f"{member.file_size / 2**20:.1f} MB, more than the "
                    f"{MAX_MARKUP_PART_BYTES >> 20} MB an {fmt.name} part may have; refused "
                    "as a possible zip bomb"
                )
            )


def _declared_size(path: Path) -> tuple[int, int]:
    """The picture's width and height as its header declares them. Only the header is
    read, so Pillow's own decompression-bomb check (which would refuse before saying the
    size) is off meanwhile: the limit is ragline's own."""
    bomb_pixels = PILImage.MAX_IMAGE_PIXELS
    PILImage.MAX_IMAGE_PIXELS = None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PILImage.DecompressionBombWarning)
            with PILImage.open(path) as img:
                width, height = img.size
    finally:
        PILImage.MAX_IMAGE_PIXELS = bomb_pixels
    return width, height


def _open(path: Path, fmt: Format, name: str) -> Any:
    doc = None
    try:
        doc = pymupdf.open(str(path), filetype=fmt.mupdf_type)
        # MuPDF reads some formats lazily: damage may show only when pages are counted.
        locked, pages = doc.needs_pass or doc.is_encrypted, doc.page_count
    except _ERRORS as exc:
        if doc is not None:
            doc.close()
        # Not the stored file's path: a name the user knows.
        reason = str(exc).replace(str(path), name)
        raise InvalidDocument(
            one_line(
                f"{name}: damaged {fmt.name} that cannot be opened ({reason}); "
                "submit an intact copy"
            )
        ) from exc
    if locked or pages < 1:
        doc.close()
        what = f"encrypted {fmt.name}; remove the protection" if locked else "no pages"
        raise InvalidDocument(one_line(f"{name}: {what}"))
    return doc


def _units(doc: Any, fmt: Format, name: str, limits: tuple[int, int, int]) -> Iterator[Unit]:
    chapters = _chapters(doc)
    seen: set[str] = set()
    min_px, min_bytes, max_pixels = limits
    for start in range(0, doc.page_count, BATCH_PAGES):
        end = min(start + BATCH_PAGES, doc.page_count)
        pdf = _to_pdf(doc, start, end, fmt, name)
        try:
            # MuPDF's store keeps the source's layout between batches: emptied after each,
            # a reflowable chapter was laid out again for every batch (quadratic in it).
            pages = iter_pages(
                pdf,
                min_image_px=min_px,
                min_image_bytes=min_bytes,
                max_image_pixels=max_pixels,
                release=False,
            )
            for text, images in pages:
                number = start + text.page
                fresh = [_renumber(i, number) for i in images if i.sha256 not in seen]
                seen.update(i.sha256 for i in fresh)
                if fmt.name == "SVG" and not text.text.strip():
                    fresh += _rendered(pdf, text.page - 1, number, max_pixels)
                yield Unit(number, text.text, chapters.get(number), fresh)
        finally:
            pdf.close()


def _to_pdf(doc: Any, start: int, end: int, fmt: Format, name: str) -> Any:
    """Pages ``start`` to ``end`` (exclusive) as an in-memory PDF, one PDF page each.

    What ``Document.convert_to_pdf`` does, without its link copying, which in PyMuPDF 2.0
    loads the output's page by the source's number and so fails for any range not starting
    at page 0. A page MuPDF cannot run stays in as an empty page (logged), so numbers hold.
    """
    out = mupdf.PdfDocument()
    for number in range(start, end):
        box = mupdf.FzRect(0, 0, 612, 792)
        try:
            page = mupdf.fz_load_page(doc.this, number)
            box = mupdf.fz_bound_page(page)
            dev, resources, contents = mupdf.pdf_page_write(out, box)
            mupdf.fz_run_page(page, dev, mupdf.FzMatrix(), mupdf.FzCookie())
            mupdf.fz_close_device(dev)
        except _ERRORS as exc:
            if doc.page_count == 1:
                raise InvalidDocument(
                    one_line(f"{name}: damaged {fmt.name}: its page cannot be read ({exc})")
                ) from exc
            log.warning("%s: page %d cannot be read, left empty: %s", name, number + 1, exc)
            dev, resources, contents = mupdf.pdf_page_write(out, box)
            mupdf.fz_close_device(dev)
        mupdf.pdf_insert_page(out, -1, mupdf.pdf_add_page(out, box, 0, resources, contents))
    buffer = mupdf.fz_new_buffer(1 << 16)
    output = mupdf.FzOutput(buffer)
    mupdf.pdf_write_document(out, output, mupdf.PdfWriteOptions())
    output.fz_close_output()
    return pymupdf.open("pdf", mupdf.fz_buffer_extract_copy(buffer))


def _chapters(doc: Any) -> dict[int, str]:
    """Page → title of the chapter it is in (the last table-of-contents entry at or before
    it), for reflowable formats."""
    if not doc.is_reflowable:
        return {}
    try:
        toc = [(page, title) for _, title, page in doc.get_toc() if page >= 1]
    except _ERRORS:
        return {}
    if not toc:
        return {}
    out: dict[int, str] = {}
    entry = 0
    current: str | None = None
    for number in range(1, doc.page_count + 1):
        while entry < len(toc) and toc[entry][0] <= number:
            current = " ".join(toc[entry][1].split())[:200] or None
            entry += 1
        if current:
            out[number] = current
    return out


def _renumber(image: Image, page: int) -> Image:
    return msgspec.structs.replace(image, page=page)


def _rendered(pdf: Any, index: int, number: int, max_pixels: int) -> list[Image]:
    page = pdf.load_page(index)
    rect = page.rect
    scale = SVG_SCALE
    if rect.width * rect.height * scale * scale > max_pixels:
        scale = (max_pixels / max(rect.width * rect.height, 1.0)) ** 0.5
    pix = page.get_pixmap(matrix=pymupdf.Matrix(scale, scale), alpha=False)
    data = bytes(pix.tobytes("png"))
    return [
        Image(
            page=number,
            sha256=hashlib.sha256(data).hexdigest(),
            data=data,
            media_type="image/png",
            ext="png",
            width=pix.width,
            height=pix.height,
        )
    ]
