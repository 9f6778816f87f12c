"""The vision model that describes nothing (``RAGLINE_VISION=none``): images pass through
the vision stage untouched."""

from __future__ import annotations


class NoVision:
    """:class:`VisionModel` that describes nothing (``RAGLINE_VISION=none``)."""

    metered = False
    parallel = 1
    describes = False

    @property
    def name(self) -> str:
        return "none"

    async def describe(self, image: bytes, media_type: str) -> str:
        return ""

    async def aclose(self) -> None:
        return None
