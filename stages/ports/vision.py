"""The vision model's port: an image in, searchable text out.

The adapters (Cohere, local OCR, none) live in :mod:`stages.adapters.vision`, which only
the composition root (:mod:`stages.services`) imports; this module imports no adapter and
no client library (an import-linter contract).
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["VisionModel"]


class VisionModel(Protocol):
    """Describes images as text for the index."""

    @property
    def name(self) -> str:
        """Which model wrote a description, e.g. ``cohere/command-a-vision-07-2025``."""
        ...

    @property
    def metered(self) -> bool:
        """Whether each call goes to a provider with a fleet-wide budget and circuit
        (a hosted model), rather than running here."""
        ...

    @property
    def describes(self) -> bool:
        """False for the model that describes nothing: the vision stage then passes
        images through without reading them."""
        ...

    @property
    def parallel(self) -> int:
        """How many images one vision job may have described at once: a local model's
        share of the process's cores, 1 for a hosted one (its budget paces calls)."""
        ...

    async def describe(self, image: bytes, media_type: str) -> str:
        """Text for ``image`` ("" when there is nothing to say).

        Raises :class:`runtime.errors.PermanentError` for bytes that are not a readable
        image, :class:`runtime.errors.TransientError` when the service may recover.
        """
        ...

    async def aclose(self) -> None: ...
