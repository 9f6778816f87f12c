"""index: a document's chunks and vectors → points in the vector index.

Point ids derive from (document id, chunk ordinal) and every payload carries the
generation, so the stage upserts this generation's points and then deletes the
document's points of any other generation: a re-run after any crash converges to exactly
one point per chunk. A permanently failed run removes what its generation wrote.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from runtime.api import DbConn, Job, JobContext, MissingInput
from stages import store
from stages.heap import release_free_heap
from stages.services import Services
from stages.vector_index import DOCUMENT_FIELD, GENERATION_FIELD, Point, point_ids


class IndexStage:
    name = "index"

    def __init__(self, services: Services) -> None:
        self.services = services

    async def process(self, ctx: JobContext) -> None:
        job = ctx.job
        embedder = self.services.embedder
        rows = await store.chunk_vectors(ctx.pool, job.document_id, embedder.model)
        missing = [r.ordinal for r in rows if r.vector is None]
        if missing:
            raise MissingInput(
                f"{job.filename}: {len(missing)} chunk(s) have no {embedder.model} vector; "
                "reprocess --from embed"
            )
        collection = self.services.collection
        index = self.services.index
        await index.ensure_collection(collection, embedder.dimensions)
        points = document_points(rows, job)
        # A job cancelled by a reprocess must not touch the index: the lease check makes
        # the window a stale worker has tiny, and verify catches what slips through it.
        await ctx.checkpoint(_nothing)
        # One call for the whole document (upsert, then drop other generations' points):
        # the embedded index does it under one lock and one flush.
        await index.replace_document(collection, job.document_id, job.generation, points)
        del rows, points
        release_free_heap()  # a long document's rows and points

    async def write(self, conn: DbConn, job: Job, output: None) -> None:
        """The points are written; the engine marks the document ready in its commit."""

    async def on_failed(self, job: Job) -> None:
        await self.services.index.delete_generation(
            self.services.collection, job.document_id, job.generation
        )


async def _nothing(conn: DbConn) -> None:
    """A checkpoint that only checks the lease."""


def payload(row: store.ChunkVector, job: Job) -> dict[str, Any]:
    """What search shows of a chunk, beside the fields every point carries."""
    return {
        "ordinal": row.ordinal,
        "kind": row.kind,
        "text": row.text,
        "page_start": row.page_start,
        "page_end": row.page_end,
        "filename": job.filename,
    }


def document_points(rows: Sequence[store.ChunkVector], job: Job) -> list[Point]:
    """The document's points, as :func:`stages.vector_index.new_point` builds them, in one
    pass: ids from one hash state, the per-document fields computed once, one dict each
    (this runs once per chunk on the throughput path)."""
    document, generation, filename = str(job.document_id), job.generation, job.filename
    ids = point_ids(job.document_id, [r.ordinal for r in rows])
    return [
        Point(
            id=point,
            vector=r.vector or [],
            payload={
                "ordinal": r.ordinal,
                "kind": r.kind,
                "text": r.text,
                "page_start": r.page_start,
                "page_end": r.page_end,
                "filename": filename,
                DOCUMENT_FIELD: document,
                GENERATION_FIELD: generation,
            },
        )
        for point, r in zip(ids, rows, strict=True)
    ]
