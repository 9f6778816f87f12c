"""Documents: submit (document row + first job, atomically), reprocess, delete."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime

import asyncpg
import msgspec

import schema
from runtime.jobs.postgres import (
    Conn,
    JobRepository,
    Pool,
    document_transaction,
    to_struct,
)
from runtime.models import Document, DocumentStatus, NewDocument, NewJob

D = schema.load("documents")


class Submitted(msgspec.Struct, frozen=True, kw_only=True):
    document_id: uuid.UUID
    created: bool
    """False when the same bytes were already there (and not forced)."""


def _document(record: asyncpg.Record) -> Document:
    doc = to_struct(Document, record)
    return msgspec.structs.replace(doc, status=DocumentStatus(doc.status))


class DocumentRepository:
    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self.jobs = JobRepository(pool)

    async def submit(
        self,
        doc: NewDocument,
        first_stage: str,
        *,
        conn: Conn | None = None,
        max_attempts: int = 3,
        priority: int = 0,
    ) -> Submitted:
        """Insert ``doc`` and enqueue its first stage, in ``conn``'s transaction if given."""
        if conn is not None:
            return await self._submit(conn, doc, first_stage, max_attempts, priority)
        async with self.pool.acquire() as own, own.transaction():
            return await self._submit(own, doc, first_stage, max_attempts, priority)

    async def _submit(
        self, conn: Conn, doc: NewDocument, stage: str, max_attempts: int, priority: int
    ) -> Submitted:
        new_id = await conn.fetchval(
            D["insert_document"],
            *doc.leading_values(),
            doc.forced,
            stage,
            doc.collection,
        )
        if new_id is None:
            existing = await conn.fetchrow(D["find_document_by_sha256"], doc.sha256, doc.collection)
            if existing is None:  # deleted between the two statements
                raise asyncpg.exceptions.SerializationError("document vanished; retry")
            return Submitted(document_id=existing["id"], created=False)
        job = NewJob(document_id=new_id, stage=stage, max_attempts=max_attempts, priority=priority)
        await self.jobs.enqueue([job], conn=conn)
        return Submitted(document_id=new_id, created=True)

    async def reprocess(
        self, document_id: uuid.UUID, from_stage: str, *, max_attempts: int = 3
    ) -> int | None:
        """Start a new generation at ``from_stage``; returns it (None: no such document).

        Live jobs of older generations are cancelled; a worker still running one loses
        its lease token and commits nothing. Checkpoints of earlier stages stay.
        """

        async def body(conn: Conn) -> int | None:
            generation = await conn.fetchval(D["start_generation"], document_id, from_stage, True)
            if generation is None:
                return None
            await self.jobs.cancel_document_jobs(document_id, generation, conn=conn)
            job = NewJob(
                document_id=document_id,
                stage=from_stage,
                generation=generation,
                max_attempts=max_attempts,
            )
            await self.jobs.enqueue([job], conn=conn)
            return int(generation)

        return await document_transaction(self.pool, document_id, body)

    async def retire(self, document_id: uuid.UUID) -> bool:
        """Stop a document that is about to be deleted: a new generation with no job, its
        live jobs cancelled (a worker running one commits nothing). False: no document."""

        async def body(conn: Conn) -> bool:
            generation = await conn.fetchval(D["retire_document"], document_id)
            if generation is None:
                return False
            await self.jobs.cancel_document_jobs(document_id, generation, conn=conn)
            return True

        return await document_transaction(self.pool, document_id, body)

    async def get(self, document_id: uuid.UUID) -> Document | None:
        row = await self.pool.fetchrow(D["get_document"], document_id)
        return _document(row) if row else None

    async def get_many(self, ids: Sequence[uuid.UUID]) -> list[Document]:
        return [_document(r) for r in await self.pool.fetch(D["get_documents"], list(ids))]

    async def find_by_sha256(self, sha256: str, collection: str = "default") -> Document | None:
        row = await self.pool.fetchrow(D["find_document_by_sha256"], sha256, collection)
        return _document(row) if row else None

    async def named(
        self, filename: str, collection: str | None = None, limit: int = 10
    ) -> list[tuple[uuid.UUID, str]]:
        """The documents (id, collection) whose file name is ``filename``, in
        ``collection`` if given, oldest first, at most ``limit``."""
        rows = await self.pool.fetch(D["documents_named"], filename, collection, limit)
        return [(r["id"], r["collection"]) for r in rows]

    async def delete(self, ids: Sequence[uuid.UUID], conn: Conn | None = None) -> list[uuid.UUID]:
        rows = await (conn or self.pool).fetch(D["delete_documents"], list(ids))
        return [r["id"] for r in rows]

    async def all_ids(self, collection: str | None = None) -> list[uuid.UUID]:
        """Every document's id, or those of one collection."""
        return [r["id"] for r in await self.pool.fetch(D["all_document_ids"], collection)]

    async def page_after(
        self,
        collection: str | None,
        after: tuple[datetime, uuid.UUID] | None,
        limit: int,
    ) -> list[Document]:
        """Up to ``limit`` documents oldest first after ``after`` (the (created_at, id) of
        the last one seen; None: from the first), of one collection or all."""
        at, last = after if after is not None else (None, None)
        rows = await self.pool.fetch(D["documents_after"], collection, at, last, limit)
        return [_document(r) for r in rows]

    async def existing(self, ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
        """Which of ``ids`` are documents."""
        return {r["id"] for r in await self.pool.fetch(D["existing_documents"], list(ids))}

    async def list(self, status: str | None = None, limit: int = 100) -> list[Document]:
        return [_document(r) for r in await self.pool.fetch(D["list_documents"], status, limit)]

    async def count_finished(self, ids: Sequence[uuid.UUID]) -> int:
        return int(await self.pool.fetchval(D["count_finished"], list(ids)))

    async def count_by_status(self) -> dict[str, int]:
        rows = await self.pool.fetch(D["count_documents_by_status"])
        return {r["status"]: int(r["n"]) for r in rows}
