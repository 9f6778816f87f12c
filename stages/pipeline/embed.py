"""embed: vectors for a document's chunks, cache first, misses in provider-sized batches.

The cache is content-addressed (model + sha256 of the text): unchanged text is never sent
twice. A metered provider's batches are checkpointed as each returns (a crash wastes at
most the paid call in flight); a model in this process, once the vectors held back took
:data:`CHECKPOINT_EVERY_S`, the rest with the job's completion; a failed call, what came
back before it. Requests go through the provider gate (``ctx.calling``), the aiolimiter
smoothing within the process; a 429 is RateLimited: every process pauses, no attempt
counted. Why, and the figures: docs/architecture.md, "Chunking and embedding memory".
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from typing import Any

import msgspec
from prometheus_client import Counter

from runtime.api import DbConn, InvalidDocument, Job, JobContext, ProviderSpec
from stages.db import checkpoints, model_switch
from stages.pipeline._provider import ProviderStage
from stages.ports.embedder import Embedder

CACHE_HITS = Counter("ragline_embed_cache_hits", "Chunks whose vector was already cached")
CACHE_MISSES = Counter("ragline_embed_cache_misses", "Chunks sent to the embedder")
REQUESTS = Counter("ragline_embed_requests", "Embedding requests sent")

#: An unmetered embedder's vectors are checkpointed once this many seconds of embedding
#: are held back (a metered one's after every call).
CHECKPOINT_EVERY_S = 1.0

#: ``(sha256, vector)`` pairs of one model, as the cache stores them.
Items = list[tuple[str, Sequence[float]]]


class Held(msgspec.Struct):
    """Vectors embedded but not yet written, per model: the job's output, written with
    its completion."""

    items: dict[str, Items] = msgspec.field(default_factory=dict)


def estimated_tokens(texts: Sequence[str]) -> int:
    """Tokens a provider will bill for ``texts``, estimated before the call: a UTF-8 byte
    per 4 (BPE tokenizers average 3-4 characters a token on English prose; bytes count
    non-Latin text higher, as the tokenizers do)."""
    return sum(len(t.encode()) // 4 + 1 for t in texts)


def batches(items: Sequence[Any], size: int) -> list[Sequence[Any]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def no_text(filename: str, vision: str) -> str:
    """Why a document has nothing to embed, and what to do, by the vision in use."""
    if vision == "none":
        return (
            f"{filename}: no text found to index (scanned pages and images need "
            "RAGLINE_VISION=ocr or cohere)"
        )
    reader = "read by OCR" if vision == "ocr" else "described by the vision model"
    return f"{filename}: no text found to index (nor in its images, {reader})"


class EmbedStage(ProviderStage):
    name = "embed"

    @property
    def provider(self) -> ProviderSpec | None:
        return self.services.embed_provider

    async def process(self, ctx: JobContext) -> Held | None:
        # The live model, and a model switch's target while it builds (both get vectors,
        # so the index stage can write both collections).
        held = Held()
        try:
            for model in (await model_switch.targets(ctx.pool, self.services)).models:
                texts = await checkpoints.texts_to_embed(ctx.pool, ctx.job.document_id, model)
                if not texts.texts:
                    raise InvalidDocument(
                        no_text(ctx.job.filename, self.services.settings.vision.kind)
                    )
                CACHE_HITS.inc(texts.texts - len(texts.misses))
                ctx.note(chunks=texts.texts, embedded=len(texts.misses), model=model)
                if items := await self.embed_texts(ctx, model, texts.misses):
                    held.items[model] = items
        except Exception:
            # An earlier model's vectors (a model switch embeds two) are kept too.
            for model, items in held.items.items():
                await self._keep(ctx, model, items)
            raise
        return held if held.items else None

    async def embed_texts(self, ctx: JobContext, model: str, misses: dict[str, str]) -> Items:
        """Vectors of ``model`` for ``{sha256: text}`` not in its cache, in batches;
        returns those not checkpointed yet (see the module's docstring)."""
        CACHE_MISSES.inc(len(misses))
        embedder = self.services.embedder_for(model)
        held: Items = []
        since = time.monotonic()
        try:
            for batch in batches(list(misses.items()), embedder.max_batch):
                held += await self._embed_batch(ctx, embedder, batch)
                if embedder.metered or time.monotonic() - since >= CHECKPOINT_EVERY_S:
                    await self._checkpoint(ctx, model, held)
                    held, since = [], time.monotonic()
        except Exception:
            await self._keep(ctx, model, held)
            raise
        return held

    async def _embed_batch(
        self, ctx: JobContext, embedder: Embedder, batch: Sequence[tuple[str, str]]
    ) -> Items:
        limiter = self.services.limiter
        texts = [t for _, t in batch]
        gate = self.gate(ctx, tokens=estimated_tokens(texts))
        async with gate, limiter if limiter is not None else contextlib.nullcontext():
            REQUESTS.inc()
            vectors = await embedder.embed(texts, "search_document")
        return [(sha, vec) for (sha, _), vec in zip(batch, vectors, strict=True)]

    async def _checkpoint(self, ctx: JobContext, model: str, items: Items) -> None:
        async def write(conn: DbConn) -> None:
            await checkpoints.insert_embeddings(conn, model, items)

        await ctx.checkpoint(write)

    async def _keep(self, ctx: JobContext, model: str, items: Items) -> None:
        """On the way out of a failed attempt: checkpoint what came back, if the lease
        still allows, so a retry sends only the rest."""
        if items:
            with contextlib.suppress(Exception):
                await self._checkpoint(ctx, model, items)

    async def write(self, conn: DbConn, job: Job, output: Held | None) -> None:
        """The vectors not checkpointed yet, in the completion's transaction."""
        if output is not None:
            for model, items in output.items.items():
                await checkpoints.insert_embeddings(conn, model, items)

    async def on_failed(self, job: Job) -> None:
        """Cached vectors stay: they are correct and shared by content."""
