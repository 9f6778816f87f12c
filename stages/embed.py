"""embed: vectors for a document's chunks, cache first, misses in provider-sized batches.

The cache is content-addressed (model + sha256 of the text), so unchanged text is never
sent twice and re-indexing needs no embedding call. Each batch is checkpointed as it
returns, so a crash wastes at most the batch in flight. Each request goes through the
engine's provider gate (``ctx.calling``): the fleet's shared budget (requests and
estimated tokens per minute) and the provider's circuit; the process's aiolimiter stays
as an in-process smoother. A 429 surfaces as RateLimited, which pauses every process and
costs no attempt.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

from prometheus_client import Counter

from runtime.api import DbConn, InvalidDocument, Job, JobContext, ProviderSpec
from stages import model_switch, store
from stages.provider_stage import ProviderStage

CACHE_HITS = Counter("ragline_embed_cache_hits", "Chunks whose vector was already cached")
CACHE_MISSES = Counter("ragline_embed_cache_misses", "Chunks sent to the embedder")
REQUESTS = Counter("ragline_embed_requests", "Embedding requests sent")


def estimated_tokens(texts: Sequence[str]) -> int:
    """Tokens a provider will bill for ``texts``, estimated before the call: a UTF-8 byte
    per 4 (BPE tokenizers average 3-4 characters a token on English prose; bytes count
    non-Latin text higher, as the tokenizers do)."""
    return sum(len(t.encode()) // 4 + 1 for t in texts)


def batches(items: Sequence[Any], size: int) -> list[Sequence[Any]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


class EmbedStage(ProviderStage):
    name = "embed"

    @property
    def provider(self) -> ProviderSpec | None:
        return self.services.embed_provider

    async def process(self, ctx: JobContext) -> None:
        # The live model, and a model switch's target while it builds (both get vectors,
        # so the index stage can write both collections).
        for model in (await model_switch.targets(ctx.pool, self.services)).models:
            texts = await store.texts_to_embed(ctx.pool, ctx.job.document_id, model)
            if not texts.texts:
                raise InvalidDocument(
                    f"{ctx.job.filename}: no text found to index (a scanned PDF needs "
                    "RAGLINE_VISION=ocr or cohere)"
                )
            CACHE_HITS.inc(texts.texts - len(texts.misses))
            await self.embed_texts(ctx, model, texts.misses)

    async def embed_texts(self, ctx: JobContext, model: str, misses: dict[str, str]) -> None:
        """Vectors of ``model`` for ``{sha256: text}`` not in its cache, in batches."""
        CACHE_MISSES.inc(len(misses))
        for batch in batches(list(misses.items()), self.services.embedder_for(model).max_batch):
            await self._embed_batch(ctx, model, batch)

    async def _embed_batch(
        self, ctx: JobContext, model: str, batch: Sequence[tuple[str, str]]
    ) -> None:
        limiter = self.services.limiter
        texts = [t for _, t in batch]
        gate = self.gate(ctx, tokens=estimated_tokens(texts))
        async with gate, limiter if limiter is not None else contextlib.nullcontext():
            REQUESTS.inc()
            vectors = await self.services.embedder_for(model).embed(texts, "search_document")
        items = [(sha, vec) for (sha, _), vec in zip(batch, vectors, strict=True)]

        async def write(conn: DbConn) -> None:
            await store.insert_embeddings(conn, model, items)

        await ctx.checkpoint(write)

    async def write(self, conn: DbConn, job: Job, output: None) -> None:
        """Every batch was checkpointed as it came back; nothing is left to write."""

    async def on_failed(self, job: Job) -> None:
        """Cached vectors stay: they are correct and shared by content."""
