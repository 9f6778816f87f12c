"""The embedder's port: text in, L2-normalised float vectors out.

The adapters (:class:`stages.embedder.CohereEmbedder`, :class:`stages.embedder.LocalEmbedder`)
live in :mod:`stages.embedder`, which only the composition root (:mod:`stages.services`)
imports; this module imports no adapter and no client library (an import-linter contract).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol

__all__ = ["Embedder", "InputType"]

InputType = Literal["search_document", "search_query"]


class Embedder(Protocol):
    """Turns texts into vectors of a fixed size."""

    @property
    def model(self) -> str:
        """Id of the vector space, the embedding cache key: ``cohere/embed-v4.0@1024``."""
        ...

    @property
    def dimensions(self) -> int: ...

    @property
    def max_batch(self) -> int:
        """The most texts one provider call takes; callers batch at this size."""
        ...

    @property
    def metered(self) -> bool:
        """Whether calls count against a provider's quota, so ``RAGLINE_EMBED_RPM``
        applies; a model running in this process is not metered."""
        ...

    async def embed(self, texts: Sequence[str], input_type: InputType) -> list[list[float]]:
        """One L2-normalised vector per text, in the order given."""
        ...

    async def aclose(self) -> None: ...
