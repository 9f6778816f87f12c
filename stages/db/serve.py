"""The HTTP API's queries (``queries/serve.sql``): pages of documents, a document's
checkpoint counts, upload keys."""

from __future__ import annotations

import uuid
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
) -> list[Document]:
    """Documents newest first, filtered, after a cursor (the last of the previous page)."""
    at, last = after if after is not None else (None, None)
    rows = await pool.fetch(Q["documents_page"], status, stage, at, last, limit)
    return [to_struct(Document, r) for r in rows]


async def document_counts(pool: Pool, document_id: uuid.UUID, generation: int) -> DocumentCounts:
    row = await pool.fetchrow(Q["document_counts"], document_id, generation)
    assert row is not None  # one row of scalar subqueries, always
    return to_struct(DocumentCounts, row)


async def upload_key_document(pool: Pool, key: str) -> uuid.UUID | None:
    """The document an Idempotency-Key created, if it still exists."""
    found: uuid.UUID | None = await pool.fetchval(Q["find_upload_key"], key)
    return found


async def remember_upload_key(conn: DbConn, key: str, document_id: uuid.UUID) -> bool:
    """Record the key in the upload's own transaction; False when a concurrent upload
    with the same key committed first."""
    return await conn.fetchval(Q["insert_upload_key"], key, document_id) is not None
