"""The reranker's port: a query and candidate texts in, their order by relevance out.

Optional: search reranks its fused hits when ``RAGLINE_RERANK`` names a reranker. The
adapters live in :mod:`stages.adapters.reranker`, which only the composition root
imports; this module imports no adapter and no client library.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

__all__ = ["Reranker"]


class Reranker(Protocol):
    """Orders candidate texts by their relevance to a query."""

    @property
    def model(self) -> str:
        """The provider and model, e.g. ``cohere/rerank-v3.5`` (the gate's provider name)."""
        ...

    async def rerank(self, query: str, texts: Sequence[str], top_n: int) -> list[tuple[int, float]]:
        """The ``top_n`` most relevant texts as (index in ``texts``, relevance score),
        the most relevant first."""
        ...

    async def aclose(self) -> None: ...
