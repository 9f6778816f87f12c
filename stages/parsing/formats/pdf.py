"""PDF parsing with PyMuPDF: open and validate a document, then walk it page by page.

Pure document logic for the parse stage: no database, no asset store. :func:`open_pdf`
turns every way a file can fail to be a usable PDF into one
:class:`runtime.errors.InvalidDocument` whose one-line message names the file and says what
to do. :func:`iter_pages` yields each page's text and the page's new images, so a caller
that writes as it goes keeps memory flat in the page count.

A page's text comes from :mod:`stages.parsing.formats.pdf_text`.
"""

# PyMuPDF ships type hints for only part of its API; its untyped methods are still the
# documented, stable ones.
# mypy: disallow-untyped-calls=False

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pymupdf
from pymupdf import mupdf

from runtime.api import InvalidDocument, MissingInput, one_line, release_free_heap
from stages.parsing.formats.pdf_layout import Outline, outline, page_layout
from stages.parsing.formats.pdf_tables import may_have_tables, page_tables
from stages.parsing.formats.pdf_text import blocks_at, text_at
from stages.parsing.formats.png import png_of
from stages.parsing.formats.unit import (
    DEFAULT_MAX_IMAGE_PIXELS,
    DEFAULT_MIN_IMAGE_BYTES,
    DEFAULT_MIN_IMAGE_PX,
    Image,
    Layout,
)

__all__ = [
    "DEFAULT_MAX_IMAGE_PIXELS",
    "DEFAULT_MIN_IMAGE_BYTES",
    "DEFAULT_MIN_IMAGE_PX",
    "Image",
    "PageText",
    "iter_pages",
    "open_pdf",
    "release_document_memory",
]

log = logging.getLogger(__name__)


# The PDF spec lets a header sit anywhere in the first 1024 bytes (readers tolerate junk
# written before it by some generators).
_MAGIC = b"%PDF-"
_MAGIC_WINDOW = 1024
# MuPDF's own exceptions (pymupdf.mupdf.FzErrorBase) do not derive from RuntimeError.
_MUPDF_ERRORS = (RuntimeError, ValueError, pymupdf.mupdf.FzErrorBase)

# MuPDF prints its errors to stdout ("MuPDF error: format error: ..."), into the CLI's
# output; ragline reports them itself, one line naming the file. (pymupdf4llm's import
# used to switch this off as a side effect; it is kept out of the process now.)
pymupdf.TOOLS.mupdf_display_errors(False)
_MEDIA_TYPES = {"png": "image/png", "jpeg": "image/jpeg"}
#: MuPDF keeps every image it decodes (to convert it to PNG) in its store, though each is
#: extracted once per document: past this many bytes of pixels the store is emptied.
DECODED_IMAGES_BUDGET = 32 * 1024 * 1024


class PageText(msgspec.Struct, frozen=True):
    """One page's extracted text; ``page`` is 1-based; ``layout`` where asked for."""

    page: int
    text: str
    layout: Layout | None = None


Source = str | os.PathLike[str] | bytes


def open_pdf(source: Source, *, name: str) -> pymupdf.Document:
    """Open ``source`` (a path or the file's bytes) as a PDF that has pages to read.

    ``name`` is how messages refer to the file (the user's filename).

    :raises MissingInput: the path does not exist.
    :raises InvalidDocument: empty, not a PDF, corrupt, password-protected, or no pages;
        the message is one line that names the file and says what to do.
    """
    _check_header(_head(source, name), name)
    doc = _open(source, name)
    try:
        _check_usable(doc, name)
    except InvalidDocument:
        doc.close()
        raise
    return doc


def _head(source: Source, name: str) -> bytes:
    if isinstance(source, bytes):
        return source[:_MAGIC_WINDOW]
    try:
        with Path(source).open("rb") as f:
            return f.read(_MAGIC_WINDOW)
    except FileNotFoundError as exc:
        raise MissingInput(_msg(name, "file not found; submit it again")) from exc
    except OSError as exc:
        raise InvalidDocument(_msg(name, f"cannot be read ({exc.strerror or exc})")) from exc


def _check_header(head: bytes, name: str) -> None:
    if not head:
        raise InvalidDocument(_msg(name, "empty file (0 bytes); upload the complete file"))
    if _MAGIC not in head:
        raise InvalidDocument(
            _msg(name, "not a PDF (no %PDF header); convert or export it to PDF first")
        )


class _Document(pymupdf.Document):
    """A PDF opened without PyMuPDF's outline: PyMuPDF loads it on open, resolving each
    bookmark to its page (3% of parsing's CPU on the corpus). The layout reads MuPDF's
    own tree instead, at a fraction of that (:mod:`stages.parsing.formats.pdf_layout`)."""

    def _loadOutline(self) -> None:
        return None


def _open(source: Source, name: str) -> pymupdf.Document:
    try:
        if isinstance(source, bytes):
            return _Document(stream=source, filetype="pdf")
        return _Document(os.fspath(source), filetype="pdf")
    except (pymupdf.FileNotFoundError, FileNotFoundError) as exc:
        raise MissingInput(_msg(name, "file not found; submit it again")) from exc
    except (pymupdf.FileDataError, *_MUPDF_ERRORS) as exc:
        raise InvalidDocument(
            _msg(name, f"corrupt PDF that cannot be opened ({exc}); re-export it from its source")
        ) from exc


def _check_usable(doc: pymupdf.Document, name: str) -> None:
    if doc.needs_pass:
        raise InvalidDocument(
            _msg(name, "password-protected PDF; remove the password and submit it again")
        )
    if doc.page_count > 0:
        if doc.is_repaired and _lost_content(doc):
            raise InvalidDocument(
                _msg(name, "damaged PDF (truncated or corrupt, pages lost); submit a complete copy")
            )
        if doc.is_repaired:
            log.warning("%s: damaged PDF repaired on open; its pages are intact", name)
        return
    # MuPDF "repairs" a truncated file by scanning for objects; with the page tree gone it
    # opens without an error and shows zero pages.
    if doc.is_repaired:
        raise InvalidDocument(
            _msg(
                name,
                "damaged PDF (truncated or corrupt, no pages recoverable); submit a complete copy",
            )
        )
    raise InvalidDocument(_msg(name, "PDF has no pages"))


def _lost_content(doc: pymupdf.Document) -> bool:
    """Whether a repaired document lost pages or content streams (a truncated file keeps
    its page objects but not what they point to): partial text must not pass for whole."""
    try:
        for number in range(doc.page_count):
            page = doc.load_page(number)
            contents = page.get_contents()
            if not contents or not all(doc.xref_is_stream(x) for x in contents):
                return True
    except (ValueError, RuntimeError, *_MUPDF_ERRORS):
        return True
    return False


def _msg(name: str, reason: str) -> str:
    return one_line(f"{name}: {reason}")


class _Seen:
    """Images already handled in this document, by xref and by content hash, and the
    bytes of pixels MuPDF decoded for them since its store was last emptied; the
    document's outline where its pages' layouts are read (None: no layout)."""

    __slots__ = ("decoded", "hashes", "layout", "outline", "xrefs")

    def __init__(self, layout: bool = False, outline: Outline | None = None) -> None:
        self.xrefs: set[int] = set()
        self.hashes: set[str] = set()
        self.decoded = 0
        self.layout = layout
        self.outline = outline


def iter_pages(
    doc: pymupdf.Document,
    *,
    min_image_px: int = DEFAULT_MIN_IMAGE_PX,
    min_image_bytes: int = DEFAULT_MIN_IMAGE_BYTES,
    max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS,
    trim_cache_every_pages: int = 0,
    release: bool = True,
    layout: bool = False,
) -> Iterator[tuple[PageText, list[Image]]]:
    """Yield ``(text, new images)`` for each page of ``doc``, in order.

    Each image is yielded once per document, on the first page that shows it: the same
    xref on many pages (a logo) is extracted once, and distinct xrefs with the same bytes
    are dropped by sha256. Images under ``min_image_px`` on a side or ``min_image_bytes``
    encoded are skipped as decoration; images declaring more than ``max_image_pixels``
    are skipped before decoding (logged at WARNING). Images that are not PNG or RGB/gray
    JPEG (JPEG 2000, JBIG2, CMYK JPEG...) are converted to PNG so any consumer can read them.

    Memory: MuPDF caches decoded fonts and images in a process-wide store capped at 256 MB,
    so RSS levels off however long the document is (on a 2,000-page corpus PDF: 320 MB
    at page 1,000, 342 MB at page 2,000, of which 140 MB is PyMuPDF itself).
    ``trim_cache_every_pages=N`` empties that store every N pages: with N=200 the peak was
    256 MB (193 MB once the block leak was fixed, ``python -m bench.parse``) for about 5%
    more CPU, which is why it is off by default. It is emptied too once the images decoded
    since it last was (to PNG; each only once per document) pass
    :data:`DECODED_IMAGES_BUDGET`: on the corpus's six most image-heavy manuals a parsing
    process peaked at 121 MB instead of 158 MB. After the last page the store and the glyph
    cache are emptied and free heap returned to the system (``release=False``: not, for a
    caller that reads another document still open, whose cached state it keeps).
    ``layout``: each page's :class:`Layout` too (blocks, boxes, the outline's headings).
    """
    seen = _Seen(layout, outline(doc) if layout else None)
    limits = (min_image_px, min_image_bytes, max_image_pixels)
    for number in range(doc.page_count):
        text, laid, images = _read_page(doc, number, seen, limits)
        if seen.decoded > DECODED_IMAGES_BUDGET or (
            trim_cache_every_pages and (number + 1) % trim_cache_every_pages == 0
        ):
            pymupdf.TOOLS.store_shrink(100)
            seen.decoded = 0
        yield PageText(page=number + 1, text=text, layout=laid), images
    if release:
        release_document_memory()


def release_document_memory() -> None:
    """Drop what MuPDF cached for the document just read (its store of decoded fonts and
    images, its glyph cache: nothing another document reuses) and hand the freed heap
    back to the system. On bench.ingest's 60 largest PDFs a parsing process then peaked
    at 243 MB instead of 294 MB, for no measurable CPU.

    All of the free heap (a worker keeps 64 MB of it for its next job): between documents
    the parser process sits idle beside the worker's models, and what it keeps counts in
    the machine's peak. On bench.default_path's slice it held 96 MB after the image-heavy
    manuals with 64 MB kept, 62 MB with none (55 MB when it was ready)."""
    pymupdf.TOOLS.store_shrink(100)
    pymupdf.mupdf.fz_purge_glyph_cache()
    release_free_heap(keep=0)


def _read_page(
    doc: pymupdf.Document, number: int, seen: _Seen, limits: tuple[int, int, int]
) -> tuple[str, Layout | None, list[Image]]:
    """The page's text, layout (where asked for) and images; a part MuPDF cannot read is
    logged and left out, so one broken page does not sink a long document."""
    text, laid, images = "", None, []
    try:
        if seen.layout:
            text, laid = _laid_out(doc, number, seen.outline)
        else:
            text = text_at(doc, number)
    except _MUPDF_ERRORS as exc:
        _skipped(doc, number, "text", exc)
    try:
        images = _page_images(doc, number, seen, limits)
    except _MUPDF_ERRORS as exc:
        _skipped(doc, number, "images", exc)
    return text, laid, images


def _laid_out(doc: pymupdf.Document, number: int, found: Outline | None) -> tuple[str, Layout]:
    blocks, textpage = blocks_at(doc, number)
    targets = None if found is None else found.get(number, [])
    tables = None
    if may_have_tables(doc, number):
        tables = page_tables(doc.load_page(number), textpage)
    return page_layout(blocks, textpage, targets, tables)


def _skipped(doc: pymupdf.Document, number: int, what: str, exc: BaseException) -> None:
    log.warning(
        "%s: page %d %s cannot be read, left out: %s",
        doc.name or "<bytes>",
        number + 1,
        what,
        one_line(str(exc)),
    )


def _page_images(
    doc: pymupdf.Document, number: int, seen: _Seen, limits: tuple[int, int, int]
) -> list[Image]:
    min_px, min_bytes, max_pixels = limits
    found: list[Image] = []
    for info in doc.get_page_images(number, full=True):
        xref, width, height = info[0], info[2], info[3]
        if xref in seen.xrefs:
            continue
        seen.xrefs.add(xref)
        if width < min_px or height < min_px:
            continue
        if width * height > max_pixels:
            log.warning(
                "%s: skipped image xref %d on page %d: %dx%d px is over max_image_pixels=%d",
                doc.name or "<bytes>",
                xref,
                number + 1,
                width,
                height,
                max_pixels,
            )
            continue
        image = _extract(doc, xref, number + 1)
        if image is None or image.ext == "png":
            # Decoded (a PDF holds no PNG), and the pixels stay in MuPDF's store.
            seen.decoded += width * height * 4
        if image is None or len(image.data) < min_bytes or image.sha256 in seen.hashes:
            continue
        seen.hashes.add(image.sha256)
        found.append(image)
    return found


def _extract(doc: pymupdf.Document, xref: int, page: int) -> Image | None:
    try:
        raw = {}  # any image but a JPEG (2000) is made a PNG here
        if _kept_as_is(doc, xref):
            raw = doc.extract_image(xref)
            if not raw:
                return None
        ext = raw.get("ext")
        if ext in _MEDIA_TYPES and not (ext == "jpeg" and raw.get("colorspace", 3) > 3):
            data, width, height = raw["image"], int(raw["width"]), int(raw["height"])
        else:
            data, width, height = _to_png(doc, xref)
            ext = "png"
    except _MUPDF_ERRORS as exc:
        # One unreadable image (unsupported filter, broken stream) must not sink the page.
        log.warning(
            "%s: skipped unreadable image xref %d on page %d: %s",
            doc.name or "<bytes>",
            xref,
            page,
            one_line(str(exc)),
        )
        return None
    return Image(
        page=page,
        sha256=hashlib.sha256(data).hexdigest(),
        data=data,
        media_type=_MEDIA_TYPES[ext],
        ext=ext,
        width=width,
        height=height,
    )


def _kept_as_is(doc: pymupdf.Document, xref: int) -> bool:
    """Whether the image's stream is a file format of its own (JPEG, JPEG 2000), which
    ``extract_image`` hands back as it is stored. Any other it decodes and encodes as a
    PNG at zlib's default level: :func:`_to_png` does that at level 1 instead."""
    kind, value = doc.xref_get_key(xref, "Filter")
    return kind != "null" and ("DCTDecode" in value or "JPXDecode" in value)


def _to_png(doc: pymupdf.Document, xref: int) -> tuple[bytes, int, int]:
    """The image as a PNG, its width and height. A PNG holds gray or RGB: any other color
    space (CMYK, a spot color, Lab) is converted to RGB first, as MuPDF's encoder does."""
    pix = pymupdf.Pixmap(doc, xref)
    space = pix.colorspace
    if space is not None and not (
        mupdf.fz_colorspace_is_gray(space.this) or mupdf.fz_colorspace_is_rgb(space.this)
    ):
        pix = pymupdf.Pixmap(pymupdf.csRGB, pix)
    return png_of(pix), pix.width, pix.height
