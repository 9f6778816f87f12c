"""What every reader yields: one page (or one section of a format without pages) and the
images in it, with the defaults that say which images are worth keeping. Imports nothing
heavy: settings and the worker side name these without loading PyMuPDF."""

from __future__ import annotations

import msgspec

__all__ = [
    "DEFAULT_MAX_IMAGE_PIXELS",
    "DEFAULT_MIN_IMAGE_BYTES",
    "DEFAULT_MIN_IMAGE_PX",
    "Block",
    "Heading",
    "Image",
    "Layout",
    "Unit",
]

#: An image narrower or shorter than this (in pixels) is an icon, bullet or rule.
DEFAULT_MIN_IMAGE_PX = 32
#: An image whose encoded bytes are fewer than this carries nothing worth describing.
DEFAULT_MIN_IMAGE_BYTES = 1024
#: Declared width * height above this is skipped before decoding: a decompression bomb
#: (a tiny stream declaring a gigapixel image) would otherwise need gigabytes to decode.
#: 40 Mpx is a 300-dpi full-page scan of A3 with room to spare.
DEFAULT_MAX_IMAGE_PIXELS = 40_000_000


class Image(msgspec.Struct, frozen=True):
    """An image pulled out of a document, as PNG or JPEG bytes; ``page`` is where it first
    appears."""

    page: int
    sha256: str
    data: bytes
    media_type: str
    ext: str
    width: int
    height: int


class Block(msgspec.Struct, frozen=True, array_like=True):
    """A block of a PDF page's text: ``text[start:end]`` of the page, its box in points
    (origin top left, as PyMuPDF gives it), and its type where that was read."""

    start: int
    end: int
    x0: float
    y0: float
    x1: float
    y1: float
    #: Size in points of its first character (0: not read: the document has an outline,
    #: or the block is too long to be a heading and was not sampled).
    size: float = 0.0
    bold: bool = False
    #: 0 text; 1 a table's header row, 2 another row of it (one block per row); 3 a
    #: header row set apart from the rows (bold over a row that is not, or above a rule
    #: of its own): a table's own header, never a row continued from the page before.
    kind: int = 0


class Heading(msgspec.Struct, frozen=True, array_like=True):
    """An outline entry whose target is on this page: its section starts at ``start`` of
    the page's text (the first block at or below the target's point)."""

    start: int
    level: int
    title: str


class Layout(msgspec.Struct, frozen=True):
    """Where a PDF page's text sits and how it is structured (the chunker's input beside
    the text; stored with the page)."""

    width: float
    height: float
    blocks: list[Block]
    #: The outline's entries on this page; None: the document has no outline (headings
    #: are then told by type size and weight).
    headings: list[Heading] | None = None


class Unit(msgspec.Struct, frozen=True):
    """``page`` is 1-based (the section's number where the format has no pages);
    ``section`` is what search shows beside it (heading path, chapter or line range);
    ``layout``: a PDF page's blocks, boxes and headings."""

    page: int
    text: str
    section: str | None
    images: list[Image]
    layout: Layout | None = None
