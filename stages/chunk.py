"""chunk: pages → structure-aware text chunks with overlap and page provenance."""

from __future__ import annotations

import anyio.to_thread

from runtime.errors import MissingInput
from runtime.models import Job
from runtime.stage import DbConn, JobContext
from stages import store
from stages.chunking import chunk_pages
from stages.services import Services


class ChunkStage:
    name = "chunk"

    def __init__(self, services: Services) -> None:
        self.services = services

    async def process(self, ctx: JobContext) -> list[store.NewChunk]:
        pages = await store.pages(ctx.pool, ctx.job.document_id)
        if not pages:
            raise MissingInput(f"{ctx.job.filename}: no parsed pages; run parse first")
        config = self.services.settings.chunk
        chunks = await anyio.to_thread.run_sync(
            lambda: chunk_pages([(p.page, p.text) for p in pages], config)
        )
        return [
            store.NewChunk(
                text=c.text, page_start=c.page_start, page_end=c.page_end, sha256=c.sha256
            )
            for c in chunks
        ]

    async def write(self, conn: DbConn, job: Job, output: list[store.NewChunk]) -> None:
        await store.replace_text_chunks(conn, job.document_id, job.generation, output)

    async def on_failed(self, job: Job) -> None:
        """Nothing outside PostgreSQL to undo."""
