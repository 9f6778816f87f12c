"""vision: each stored image described once (per-image checkpoint), as image chunks.

A retry skips images already described. An image the model cannot read at all is
recorded with an empty description and a warning: one bad picture does not fail the
document. Transient model errors fail the attempt (the engine retries it).
"""

from __future__ import annotations

import hashlib
import logging

import anyio

from runtime.api import (
    DbConn,
    Job,
    JobContext,
    PermanentError,
    ProviderSpec,
    first_leaf,
    one_line,
)
from stages.db import checkpoints
from stages.pipeline._provider import ProviderStage
from stages.text.keywords import stored_vector

log = logging.getLogger(__name__)


def image_chunk(asset: checkpoints.Asset) -> checkpoints.NewChunk:
    text = f"Image on page {asset.page}: {asset.description}"
    return checkpoints.NewChunk(
        text=text,
        page_start=asset.page,
        page_end=asset.page,
        sha256=hashlib.sha256(text.encode()).hexdigest(),
        keywords=stored_vector(text),
    )


class VisionStage(ProviderStage):
    name = "vision"

    @property
    def provider(self) -> ProviderSpec | None:
        return self.services.vision_provider

    async def process(self, ctx: JobContext) -> list[checkpoints.NewChunk]:
        if not self.services.vision.describes:
            return []
        pending = [
            a
            for a in await checkpoints.assets(ctx.pool, ctx.job.document_id)
            if a.description is None
        ]
        reused = await self._reuse_descriptions(ctx) if pending else set()
        await self._describe_all(ctx, [a for a in pending if a.sha256 not in reused])
        described = await checkpoints.assets(ctx.pool, ctx.job.document_id)
        chunks = [image_chunk(a) for a in described if a.description and a.description.strip()]
        ctx.note(images=len(described), reused=len(reused), chunks=len(chunks))
        return chunks

    async def _reuse_descriptions(self, ctx: JobContext) -> set[str]:
        """Images whose bytes this vision model already described, for any document, take
        that description (a checkpoint, fenced by the lease like each image's)."""
        reused: set[str] = set()
        doc, model = ctx.job.document_id, self.services.vision.name

        async def write(conn: DbConn) -> None:
            reused.update(await checkpoints.reuse_descriptions(conn, doc, model))

        await ctx.checkpoint(write)
        return reused

    async def _describe_all(self, ctx: JobContext, pending: list[checkpoints.Asset]) -> None:
        """Describe ``pending``, up to the model's ``parallel`` at once (a local model
        fills the cores the other stages leave idle; each image is its own checkpoint)."""
        limit = anyio.Semaphore(max(1, self.services.vision.parallel))

        async def one(asset: checkpoints.Asset) -> None:
            async with limit:
                await self._describe(ctx, asset)

        try:
            async with anyio.create_task_group() as tg:
                for asset in pending:
                    tg.start_soon(one, asset)
        except BaseExceptionGroup as group:
            # The first failure, as a sequential run would raise it (the engine classifies
            # TransientError, LeaseLost... by type); the others were cancelled by it.
            raise first_leaf(group) from None

    async def _describe(self, ctx: JobContext, asset: checkpoints.Asset) -> None:
        data = await self.services.assets.get(asset.object_key)
        try:
            async with self.gate(ctx):
                text = await self.services.vision.describe(data, asset.media_type)
        except PermanentError as exc:
            log.warning(
                "%s: image %s on page %d unreadable: %s",
                ctx.job.filename,
                asset.sha256[:12],
                asset.page,
                one_line(str(exc)),
            )
            text = ""
        doc = ctx.job.document_id

        async def write(conn: DbConn) -> None:
            await checkpoints.describe_asset(
                conn, doc, asset.sha256, text, self.services.vision.name
            )

        await ctx.checkpoint(write)

    async def write(self, conn: DbConn, job: Job, output: list[checkpoints.NewChunk]) -> None:
        await checkpoints.replace_image_chunks(conn, job.document_id, job.generation, output)

    async def on_failed(self, job: Job) -> None:
        """Nothing outside PostgreSQL to undo."""
