"""Search's optional reranking: the fused hits ordered again by a reranker
(``RAGLINE_RERANK``), through the provider gate as embed calls go (the fleet's budget
and circuit). When the reranker cannot answer — its circuit open, a timeout, an error —
search answers in fused order and says why (:attr:`Reranked.note`)."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence

import msgspec

from runtime.api import Pool, Providers, ProviderSpec, RaglineError, one_line
from stages.ports.reranker import Reranker

__all__ = ["RERANK_CANDIDATES", "Reranked", "rerank"]

#: Hits given to the reranker (at least; a search for more gives it more).
RERANK_CANDIDATES = 40
#: A gate's view of the fleet's circuit is read again when older than this.
REFRESH_S = 5.0
#: The stage name the reranker is registered under (``status`` shows its circuit).
STAGE = "search"


class Reranked(msgspec.Struct, kw_only=True):
    #: (index into the hits, relevance) in the reranker's order; None: the fused order.
    order: list[tuple[int, float]] | None
    #: Why the fused order stands, when a reranker is configured but did not answer.
    note: str | None = None


class _Gate:
    """One process's gate for the reranker on one pool, registered once."""

    def __init__(self, pool: Pool, spec: ProviderSpec) -> None:
        self.providers = Providers(pool, f"search-{os.getpid()}", {STAGE: (spec,)})
        self.read_at = 0.0

    async def fresh(self) -> Providers:
        if not self.read_at:
            await self.providers.register()
        elif time.monotonic() - self.read_at > REFRESH_S:
            await self.providers.refresh()
        self.read_at = time.monotonic()
        return self.providers


#: Gates by pool (the pool kept with it, so its id is not reused while the gate lives).
_GATES: dict[tuple[int, str], tuple[Pool, _Gate]] = {}


async def rerank(
    pool: Pool, reranker: Reranker, spec: ProviderSpec, query: str, texts: Sequence[str], top: int
) -> Reranked:
    """The reranker's order of ``texts`` for ``query`` (its ``top`` best), or the
    reason it gave none."""
    if not texts:
        return Reranked(order=[])
    key = (id(pool), spec.name)
    if key not in _GATES:
        _GATES[key] = (pool, _Gate(pool, spec))
    providers = await _GATES[key][1].fresh()
    try:
        async with providers.call(spec.name):
            order = await reranker.rerank(query, texts, top)
    except RaglineError as exc:  # unavailable, timed out, refused: the fused order stands
        return Reranked(order=None, note=one_line(f"not reranked: {exc.message}", 300))
    return Reranked(order=order)
