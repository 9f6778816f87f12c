"""What every reader yields: one page (or one section of a format without pages) and the
images in it, with the defaults that say which images are worth keeping. Imports nothing
heavy: settings and the worker side name these without loading PyMuPDF."""

from __future__ import annotations

import msgspec

__all__ = [
    "DEFAULT_MAX_IMAGE_PIXELS",
    "DEFAULT_MIN_IMAGE_BYTES",
    "DEFAULT_MIN_IMAGE_PX",
    "Image",
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


class Unit(msgspec.Struct, frozen=True):
    """``page`` is 1-based (the section's number where the format has no pages);
    ``section`` is what search shows beside it (heading path, chapter or line range)."""

    page: int
    text: str
    section: str | None
    images: list[Image]
