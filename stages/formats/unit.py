"""What every reader yields: one page, or one section of a format without pages."""

from __future__ import annotations

import msgspec

from stages.pdf import Image

__all__ = ["Unit"]


class Unit(msgspec.Struct, frozen=True):
    """``page`` is 1-based (the section's number where the format has no pages);
    ``section`` is what search shows beside it (heading path, chapter or line range)."""

    page: int
    text: str
    section: str | None
    images: list[Image]
