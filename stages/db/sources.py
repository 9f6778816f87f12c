"""Sources in PostgreSQL: one typed function per named query of ``queries/sources.sql``.

A document of a source knows its URI in it, its content hash (``documents.sha256``) and
the size and mtime last seen. asyncpg records stay in this module.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeAlias

import msgspec

import schema
from runtime.api import (
    DbConn,
    MissingInput,
    NewDocument,
    NewJob,
    Pool,
    cancel_document_jobs,
    document_transaction,
    enqueue_jobs,
    to_struct,
)

if TYPE_CHECKING:  # stages.ports.assets imports minio: sync of an unchanged source never needs it
    from stages.ports.assets import AssetStore

Q = schema.load("sources")
#: What a listing says of a file besides its size: mtime (ns) and, for objects, the ETag.
Stamp: TypeAlias = tuple[int, str | None]


class Source(msgspec.Struct, frozen=True):
    id: int
    uri: str
    collection: str
    #: The device (st_dev) of the folder at the last sync; None for a bucket or before it.
    device: int | None = None
    #: What the source gives its documents (0017): metadata as JSON text, and readers
    #: (None: every caller).
    metadata: str = "{}"
    readers: list[str] | None = None


class Known(msgspec.Struct, frozen=True):
    """A document of a source as sync compares it with the file."""

    id: uuid.UUID
    uri: str
    sha256: str
    byte_size: int
    mtime_ns: int | None
    etag: str | None


class NewSourceDocument(NewDocument, frozen=True, kw_only=True):
    """A file of a source as a new document (or version); its collection is the
    source's. Inserted unforced: one document per content in a collection, whichever
    door it came in by (sync adopts or skips a file whose bytes are already there)."""

    asset_key: str
    uri: str
    mtime_ns: int
    etag: str | None = None


class SameSize(msgspec.Struct, frozen=True):
    """A document of the collection as large as a new file, and its source if it has one."""

    id: uuid.UUID
    sha256: str
    byte_size: int
    source_id: int | None
    #: The owning source's URI and the file's in it (None: submitted or uploaded).
    source: str | None
    uri: str | None


class SourceSummary(msgspec.Struct, frozen=True):
    uri: str
    collection: str
    synced_at: datetime | None
    documents: int
    deleted: int


class Origin(msgspec.Struct, frozen=True):
    source: str
    uri: str
    deleted_at: datetime | None


async def ensure_source(pool: Pool, uri: str, collection: str) -> Source:
    row = await pool.fetchrow(Q["ensure_source"], uri, collection)
    assert row is not None  # an upsert returns its row
    return to_struct(Source, row)


async def find_source(pool: Pool, uri: str) -> Source | None:
    row = await pool.fetchrow(Q["find_source"], uri)
    return to_struct(Source, row) if row else None


@asynccontextmanager
async def source_lock(pool: Pool, source_id: int) -> AsyncIterator[None]:
    """Hold the source's sync lock (waits for another sync of it to finish applying)."""
    async with pool.acquire() as conn:
        await conn.execute(Q["lock_source"], source_id)
        try:
            yield
        finally:
            await conn.execute(Q["unlock_source"], source_id)


async def mark_synced(pool: Pool, source_id: int, device: int | None) -> None:
    await pool.execute(Q["mark_synced"], source_id, device)


async def documents(pool: Pool, source_id: int) -> dict[str, Known]:
    rows = await pool.fetch(Q["source_documents"], source_id)
    return {r["uri"]: to_struct(Known, r) for r in rows}


async def unfinished(pool: Pool, source_id: int) -> list[uuid.UUID]:
    return [r["id"] for r in await pool.fetch(Q["source_unfinished"], source_id)]


async def insert_document(
    pool: Pool, source: Source, doc: NewSourceDocument, first_stage: str
) -> bool:
    """The document row and its first job in one transaction; False when a concurrent
    sync created the document for this URI first, or the same bytes came into the
    collection meanwhile."""
    async with pool.acquire() as conn, conn.transaction():
        created = await conn.fetchval(
            Q["insert_source_document"],
            *doc.leading_values(),
            first_stage,
            source.collection,
            source.id,
            doc.uri,
            doc.mtime_ns,
            doc.etag,
        )
        if created is None:
            return False
        await enqueue_jobs(conn, [NewJob(document_id=doc.id, stage=first_stage)])
        return True


async def same_size(pool: Pool, collection: str, sizes: Sequence[int]) -> list[SameSize]:
    """Documents of ``collection`` of one of these byte sizes, unforced and oldest first."""
    rows = await pool.fetch(Q["same_size_documents"], collection, list(sizes))
    return [to_struct(SameSize, r) for r in rows]


async def same_bytes(pool: Pool, collection: str, hashes: Sequence[str]) -> list[SameSize]:
    """The unforced document of ``collection`` holding each of these sha256s (if any)."""
    rows = await pool.fetch(Q["same_bytes_documents"], collection, list(hashes))
    return [to_struct(SameSize, r) for r in rows]


async def adopt(
    pool: Pool, source: Source, document_id: uuid.UUID, uri: str, filename: str, stamp: Stamp
) -> bool:
    """Make a document of no source the file ``uri``'s; False when a source has it."""
    mtime_ns, etag = stamp
    row = await pool.fetchval(
        Q["adopt_document"], document_id, source.id, uri, filename, mtime_ns, etag
    )
    return row is not None


async def touch(pool: Pool, document_id: uuid.UUID, mtime_ns: int, etag: str | None) -> None:
    await pool.execute(Q["touch_source_document"], document_id, mtime_ns, etag)


async def move(
    pool: Pool, source: Source, document_id: uuid.UUID, uri: str, filename: str, stamp: Stamp
) -> None:
    mtime_ns, etag = stamp
    await pool.execute(
        Q["move_source_document"], document_id, source.id, uri, filename, mtime_ns, etag
    )


async def new_version(
    pool: Pool, doc: NewSourceDocument, first_stage: str, max_attempts: int = 3
) -> int:
    """The document's next generation from ``first_stage`` with the new bytes, in one
    transaction: the old version's objects recorded as superseded, its live jobs
    cancelled (a worker running one commits nothing), the first job queued. Its points
    stay searchable until the new generation's index job replaces them."""

    async def body(conn: DbConn) -> int:
        row = await conn.fetchrow(
            Q["new_version"],
            doc.id,
            doc.sha256,
            doc.byte_size,
            doc.asset_key,
            doc.mtime_ns,
            first_stage,
            doc.etag,
            doc.media_type,
        )
        if row is None:
            raise MissingInput(f"{doc.filename}: the document was deleted meanwhile")
        generation = int(row["generation"])
        await conn.execute(Q["supersede_objects"], doc.id, generation, row["old_key"])
        await cancel_document_jobs(conn, doc.id, generation)
        job = NewJob(
            document_id=doc.id, stage=first_stage, generation=generation, max_attempts=max_attempts
        )
        await enqueue_jobs(conn, [job])
        return generation

    return await document_transaction(pool, doc.id, body)


async def retire(pool: Pool, source: Source, document_id: uuid.UUID) -> bool:
    """Stop a deleted file's document: a new generation without a job (live jobs are
    cancelled). False when it is not (any more) a document of this source."""

    async def body(conn: DbConn) -> bool:
        generation = await conn.fetchval(Q["retire_document"], document_id, source.id)
        if generation is None:
            return False
        await cancel_document_jobs(conn, document_id, generation)
        return True

    return await document_transaction(pool, document_id, body)


async def bury(pool: Pool, source: Source, document_id: uuid.UUID) -> None:
    """Delete the document's rows and leave its tombstone (one statement)."""
    await pool.execute(Q["bury_document"], document_id, source.id)


async def retire_superseded(
    db: Pool | DbConn, assets: AssetStore, document_id: uuid.UUID, generation: int
) -> int:
    """Delete the stored objects of the versions ``generation`` replaced (called once it
    is indexed); returns how many. Deleting twice is harmless, so a crash between the
    deletes and forgetting them converges on the next index run."""
    rows = await db.fetch(Q["due_superseded_objects"], document_id, generation)
    if not rows:
        return 0
    keys = [r["object_key"] for r in rows if r["due"]]
    for key in keys:
        await assets.delete(key)
    await db.execute(Q["forget_superseded_objects"], document_id, generation)
    return len(keys)


async def summaries(db: Any) -> list[SourceSummary]:
    return [to_struct(SourceSummary, r) for r in await db.fetch(Q["source_summaries"])]


async def origin(db: Any, document_id: uuid.UUID) -> Origin | None:
    row = await db.fetchrow(Q["document_source"], document_id)
    return to_struct(Origin, row) if row else None


async def label_source(
    pool: Pool, source_id: int, metadata: Mapping[str, Any], readers: Sequence[str] | None
) -> None:
    """What the source gives its documents, set on it and on each of them."""
    values = msgspec.json.encode(dict(metadata)).decode()
    names = None if readers is None else list(readers)
    await pool.execute(Q["label_source"], source_id, values, names)
