"""The doors' queries (``queries/serve.sql``): pages of documents, a document's
checkpoint counts, upload keys, a document's text by chunk or page."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime

import msgspec

import schema
from runtime.api import DbConn, Document, Pool, to_struct

Q = schema.load("serve")


class DocumentCounts(msgspec.Struct, frozen=True, kw_only=True):
    """A document's checkpoint sizes: pages and images (parse), described images
    (vision), chunks of its current generation."""

    pages: int
    images: int
    described_images: int
    chunks: int


async def documents_page(
    pool: Pool,
    *,
    status: str | None,
    stage: str | None,
    after: tuple[datetime, uuid.UUID] | None,
    limit: int,
    principals: Sequence[str] | None = None,
) -> list[Document]:
    """Documents newest first, filtered, after a cursor (the last of the previous page);
    with ``principals``, only those a caller with them may read."""
    at, last = after if after is not None else (None, None)
    readers = None if principals is None else list(principals)
    rows = await pool.fetch(Q["documents_page"], status, stage, at, last, limit, readers)
    return [to_struct(Document, r) for r in rows]


async def readable_copy(
    pool: Pool, sha256: str, collection: str, principals: Sequence[str]
) -> uuid.UUID | None:
    """A document of these bytes in ``collection`` a caller with ``principals`` may read."""
    found: uuid.UUID | None = await pool.fetchval(
        Q["find_readable_copy"], sha256, collection, list(principals)
    )
    return found


async def document_counts(pool: Pool, document_id: uuid.UUID, generation: int) -> DocumentCounts:
    row = await pool.fetchrow(Q["document_counts"], document_id, generation)
    assert row is not None  # one row of scalar subqueries, always
    return to_struct(DocumentCounts, row)


class UploadKey(msgspec.Struct, frozen=True, kw_only=True):
    """What an Idempotency-Key answered: its document, and the request's content hash and
    collection (a reuse with others is refused)."""

    document_id: uuid.UUID
    sha256: str
    collection: str


async def upload_key(pool: Pool, key: str) -> UploadKey | None:
    """What an Idempotency-Key answered, if its document still exists."""
    row = await pool.fetchrow(Q["find_upload_key"], key)
    return None if row is None else to_struct(UploadKey, row)


async def remember_upload_key(conn: DbConn, key: str, answered: UploadKey) -> bool:
    """Record the key in the upload's own transaction; False when a concurrent upload
    with the same key committed first."""
    found = await conn.fetchval(
        Q["insert_upload_key"], key, answered.document_id, answered.sha256, answered.collection
    )
    return found is not None


class ChunkText(msgspec.Struct, frozen=True, kw_only=True):
    ordinal: int
    kind: str
    text: str
    page_start: int
    page_end: int
    section: str | None = None


async def chunk_window(
    pool: Pool, document_id: uuid.UUID, first: int, last: int
) -> list[ChunkText]:
    """The document's chunks with ordinals from ``first`` to ``last``, in order."""
    rows = await pool.fetch(Q["chunk_window"], document_id, first, last)
    return [to_struct(ChunkText, r) for r in rows]


class PageText(msgspec.Struct, frozen=True, kw_only=True):
    page: int
    text: str
    section: str | None = None


async def page_text(pool: Pool, document_id: uuid.UUID, page: int) -> PageText | None:
    row = await pool.fetchrow(Q["page_text"], document_id, page)
    return None if row is None else to_struct(PageText, row)


async def page_count(pool: Pool, document_id: uuid.UUID) -> int:
    found: int = await pool.fetchval(Q["page_count"], document_id)
    return found


class ChunkBoxes(msgspec.Struct, frozen=True, kw_only=True):
    """A chunk's boxes (``(page, x0, y0, x1, y1)`` flat; None: none kept) and its
    document's original."""

    boxes: list[float] | None
    asset_key: str | None
    media_type: str
    generation: int


async def chunk_boxes(pool: Pool, document_id: uuid.UUID, ordinal: int) -> ChunkBoxes | None:
    row = await pool.fetchrow(Q["chunk_boxes"], document_id, ordinal)
    return None if row is None else to_struct(ChunkBoxes, row)
