"""index: a document's chunks and vectors → points in the vector index.

Point ids derive from (document id, chunk ordinal) and every payload carries the
generation, so the stage upserts this generation's points and then deletes the
document's points of any other generation: a re-run after any crash converges to exactly
one point per chunk. A permanently failed run removes what its generation wrote.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import msgspec

from runtime.api import DbConn, Job, JobContext, MissingInput, release_free_heap
from stages.db import checkpoints, model_switch
from stages.db.sources import retire_superseded
from stages.ports.collections import DEFAULT_COLLECTION
from stages.ports.services import Services
from stages.ports.vector_index import (
    COLLECTION_FIELD,
    DOCUMENT_FIELD,
    GENERATION_FIELD,
    Keywords,
    Point,
    point_ids,
)
from stages.text.keywords import from_stored, text_vector

#: Points read, built and written at a time: an index job's memory does not grow with
#: its document (bench.ingest's two 2,415-page manuals have ~9,000 points each).
SLICE_POINTS = 1000

#: Trim the heap after a document of this many points or more (malloc_trim costs a few
#: ms, most of an index job of a short document; what a short one frees is reused).
TRIM_AFTER_POINTS = 1000


class Written(msgspec.Struct, frozen=True, kw_only=True):
    """What an index run wrote: the vector collections, and a building migration's id
    when it wrote that migration's collection too."""

    collections: list[str]
    points: int
    migration_id: int | None = None


class IndexStage:
    name = "index"

    def __init__(self, services: Services) -> None:
        self.services = services

    @property
    def holds_entry(self) -> bool:
        """With the embedded index, only the process holding the shard runs index jobs
        (the others snooze theirs to it): while its index slots are all busy it parses
        no new documents, so its index queue does not grow behind its own parsing and
        the run does not end with the other processes idle while it catches up
        (runtime.stage: ``holds_entry``)."""
        return self.services.index.single_writer

    async def process(self, ctx: JobContext) -> Written:
        job = ctx.job
        where, found = await model_switch.targets_and_tenant(
            ctx.pool, self.services, job.document_id
        )
        # A document whose row is gone: its points are about to be deleted anyway.
        tenant = found or DEFAULT_COLLECTION
        live = where.live
        index = self.services.index
        # Before any work: with the embedded index, another process that holds the shard
        # takes the job (a snooze) instead of this one waiting for it.
        await index.reserve(live.vector_collection)
        await index.ensure_vector_collection(live.vector_collection, live.dimensions)
        points = await self._stream(ctx, live.vector_collection, live.model, tenant, embed=True)
        assert points is not None  # embed=True raises instead
        # The older versions' points are gone now: their stored objects go too (sync).
        await retire_superseded(ctx.pool, self.services.assets, job.document_id, job.generation)
        written = Written(collections=[live.vector_collection], points=points)
        ctx.note(chunks=points, collection=live.vector_collection)
        if where.building is not None:
            written = await self._also_target(ctx, where.building, tenant, written)
        if points >= TRIM_AFTER_POINTS:
            release_free_heap()  # a long document's slices
        return written

    async def _stream(
        self, ctx: JobContext, collection: str, model: str, tenant: str, *, embed: bool
    ) -> int | None:
        """Write the document's points into ``collection`` a slice at a time (memory that
        does not grow with the document), the last slice with the delete of other
        generations' points; how many points. A chunk without a vector of ``model`` is
        embedded first (``embed``), or nothing more is written and the result is None."""
        job, index = ctx.job, self.services.index
        after, written = -1, 0
        # A collection made before hybrid search stores no keywords: none are read or built.
        keywords = await index.has_keywords(collection)
        while True:
            rows = await self._slice(ctx, model, after, embed=embed, keywords=keywords)
            if rows is None:
                return None
            points = document_points(
                rows, job.document_id, job.generation, job.filename, tenant, keywords
            )
            written += len(points)
            # A job cancelled by a reprocess must not touch the index: the lease check
            # makes the window a stale worker has tiny, and verify catches what slips
            # through it.
            await ctx.checkpoint(_nothing)
            if len(rows) < SLICE_POINTS:
                # The last slice, then the delete of other generations' points (the
                # embedded index: under one lock and one flush). Earlier slices are of
                # this generation too: any crash before this re-runs into one point per
                # chunk.
                await index.replace_document(collection, job.document_id, job.generation, points)
                return written
            await index.upsert(collection, points)
            after = rows[-1].ordinal
            del rows, points

    async def _slice(
        self, ctx: JobContext, model: str, after: int, *, embed: bool, keywords: bool
    ) -> list[checkpoints.ChunkVector] | None:
        """The next slice's rows with ``model``'s vectors (embedding missing ones first
        when ``embed``; None when one is missing and not ``embed``), with their stored
        keyword vectors when ``keywords``."""
        document = ctx.job.document_id
        rows = await checkpoints.chunk_vectors(
            ctx.pool, document, model, after=after, limit=SLICE_POINTS, keywords=keywords
        )
        if all(r.vector is not None for r in rows):
            return rows
        if not embed:
            return None
        # Embedded before a model switch moved the live model: embed what is missing.
        await self._embed_missing(ctx, model)
        rows = await checkpoints.chunk_vectors(
            ctx.pool, document, model, after=after, limit=SLICE_POINTS, keywords=keywords
        )
        missing = [r.ordinal for r in rows if r.vector is None]
        if missing:
            raise MissingInput(
                f"{ctx.job.filename}: {len(missing)} chunk(s) have no {model} vector; "
                "reprocess --from embed"
            )
        return rows

    async def _also_target(
        self, ctx: JobContext, migration: model_switch.Migration, tenant: str, written: Written
    ) -> Written:
        """While a model switch builds, write its collection too (when the embed stage
        gave this document the target model's vectors; else the migrator will)."""
        target = migration.target
        await self.services.index.ensure_vector_collection(
            target.vector_collection, target.dimensions
        )
        points = await self._stream(
            ctx, target.vector_collection, target.model, tenant, embed=False
        )
        if points is None:
            return written
        return Written(
            collections=[*written.collections, target.vector_collection],
            points=points,
            migration_id=migration.id,
        )

    async def _embed_missing(self, ctx: JobContext, model: str) -> None:
        embedder = self.services.embedder_for(model)
        found = await checkpoints.texts_to_embed(ctx.pool, ctx.job.document_id, model)
        misses = list(found.misses.items())
        for start in range(0, len(misses), embedder.max_batch):
            batch = misses[start : start + embedder.max_batch]
            vectors = await embedder.embed([t for _, t in batch], "search_document")
            items = [(sha, vec) for (sha, _), vec in zip(batch, vectors, strict=True)]

            async def write(conn: DbConn, items: list[tuple[str, list[float]]] = items) -> None:
                await checkpoints.insert_embeddings(conn, model, items)

            await ctx.checkpoint(write)

    async def write(self, conn: DbConn, job: Job, output: Written) -> None:
        """The points are written; the engine marks the document ready in this commit,
        after checking no model switch moved search elsewhere meanwhile."""
        await model_switch.confirm_written(conn, output.collections)
        await checkpoints.mark_indexed(conn, job.document_id, job.generation)
        if output.migration_id is not None:
            await model_switch.mark_migrated(
                conn, output.migration_id, job.document_id, job.generation, output.points
            )

    async def on_failed(self, job: Job) -> None:
        for collection in await self.services.index.vector_collections():
            await self.services.index.delete_generation(collection, job.document_id, job.generation)


async def _nothing(conn: DbConn) -> None:
    """A checkpoint that only checks the lease."""


def payload(
    row: checkpoints.ChunkVector, job: Job, tenant: str = DEFAULT_COLLECTION
) -> dict[str, Any]:
    """What search shows of a chunk, beside the fields every point carries."""
    return {
        "ordinal": row.ordinal,
        "kind": row.kind,
        "text": row.text,
        "page_start": row.page_start,
        "page_end": row.page_end,
        "filename": job.filename,
        COLLECTION_FIELD: tenant,
        **({"section": row.section} if row.section else {}),
        **({"table": True} if row.is_table else {}),
    }


def document_points(
    rows: Sequence[checkpoints.ChunkVector],
    document_id: uuid.UUID,
    generation: int,
    filename: str,
    tenant: str = DEFAULT_COLLECTION,
    keywords: bool = True,
) -> list[Point]:
    """The document's points, as :func:`stages.ports.vector_index.new_point` builds them
    with their keywords (unless not ``keywords``), in one pass: ids from one hash state,
    the per-document fields computed once, one dict each (this runs once per chunk on
    the throughput path)."""
    document = str(document_id)
    ids = point_ids(document_id, [r.ordinal for r in rows])
    points = [
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
                COLLECTION_FIELD: tenant,
            },
            keywords=_keywords(r) if keywords else None,
        )
        for point, r in zip(ids, rows, strict=True)
    ]
    # The section label search shows (absent where a document has none), and a table's
    # pieces marked as such.
    for point, r in zip(points, rows, strict=True):
        if r.section:
            point.payload["section"] = r.section
        if r.is_table:
            point.payload["table"] = True
    return points


def _keywords(row: checkpoints.ChunkVector) -> Keywords:
    """The chunk's keyword vector as the chunk or vision stage stored it, else computed
    now (rows from before it was stored, or of another stored format)."""
    stored = from_stored(row.keywords)
    if stored is None:
        return Keywords(*text_vector(row.text, row.section))
    return Keywords(*stored)
