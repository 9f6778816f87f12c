"""The engine's access to PostgreSQL: one typed method per named query.

asyncpg records never leave this module; callers get :mod:`runtime.models` structs.
Methods that take ``conn`` run inside the caller's transaction when one is given (so an
application can insert its document and its first job atomically); otherwise they use
the pool. Every ``now`` parameter pins the database clock for tests (``None``: server time).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any, TypeAlias, TypeVar

import asyncpg
import msgspec

import schema
from runtime.models import Failure, Job, JobRow, JobState, NewJob
from runtime.stage import DbConn, Writer

Q = schema.load("stage_jobs")
W = schema.load("workers")

Conn: TypeAlias = DbConn
Pool: TypeAlias = "asyncpg.Pool[Any]"
S = TypeVar("S", bound=msgspec.Struct)


def to_struct(kind: type[S], record: asyncpg.Record) -> S:
    return kind(**dict(record.items()))


class Rescued(msgspec.Struct, frozen=True, kw_only=True):
    """A job the sweep took back from a worker that is gone."""

    id: int
    document_id: uuid.UUID
    stage: str
    state: JobState
    last_error: str | None


class Worker(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    stages: list[str]
    started_at: datetime
    last_seen_at: datetime


class JobRepository:
    """Jobs and workers."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    async def claim(
        self, stage: str, worker_id: str, limit: int, lease_s: float, now: datetime | None = None
    ) -> list[Job]:
        rows = await self.pool.fetch(Q["claim_jobs"], stage, worker_id, limit, lease_s, now)
        return [to_struct(Job, r) for r in rows]

    async def heartbeat(
        self, held: Sequence[tuple[int, uuid.UUID]], lease_s: float, now: datetime | None = None
    ) -> set[int]:
        """Renew leases; returns the ids still held (the others are lost)."""
        if not held:
            return set()
        ids, tokens = zip(*held, strict=True)
        rows = await self.pool.fetch(Q["heartbeat_jobs"], list(ids), list(tokens), lease_s, now)
        return {r["id"] for r in rows}

    async def complete(
        self,
        job: Job,
        next_stage: str | None,
        write: Writer | None = None,
        now: datetime | None = None,
    ) -> bool:
        """Finish a job as one transaction; False (and nothing written) if the lease is lost.

        Idempotent for its caller: retried after a lost reply, it returns True again.
        """
        if write is None:
            return job.id in await self.complete_many([(job, next_stage)], now)
        async with self.pool.acquire() as conn, conn.transaction():
            rows = await conn.fetch(*self._complete_args([(job, next_stage)], now))
            if not any(r["held"] for r in rows):
                # Nothing changed; leaving the block commits an empty transaction. A row
                # not held means our own earlier commit went through and its reply was lost.
                return bool(rows)
            await write(conn)
            return True

    async def complete_many(
        self, jobs: Sequence[tuple[Job, str | None]], now: datetime | None = None
    ) -> set[int]:
        """Complete jobs that have nothing to write, in one statement; returns the ids
        whose completion holds (the others lost their lease)."""
        rows = await self.pool.fetch(*self._complete_args(jobs, now))
        return {r["id"] for r in rows}

    @staticmethod
    def _complete_args(
        jobs: Sequence[tuple[Job, str | None]], now: datetime | None
    ) -> tuple[Any, ...]:
        return (
            Q["complete_jobs"],
            [j.id for j, _ in jobs],
            [j.lease_token for j, _ in jobs],
            [n for _, n in jobs],
            now,
        )

    async def retry_or_fail(
        self, job: Job, failure: Failure, delay_s: float, now: datetime | None = None
    ) -> JobState | None:
        """Record a failed attempt; returns the job's new state, None if the lease is lost."""
        row = await self.pool.fetchrow(
            Q["retry_or_fail_job"],
            job.id,
            job.lease_token,
            failure.message,
            failure.kind,
            failure.permanent,
            delay_s,
            now,
        )
        return JobState(row["state"]) if row else None

    async def release(
        self,
        job: Job,
        delay_s: float = 0.0,
        note: str | None = None,
        kind: str | None = None,
        now: datetime | None = None,
    ) -> bool:
        """Give a held job back without counting the attempt; False if the lease is lost."""
        row = await self.pool.fetchrow(
            Q["release_job"], job.id, job.lease_token, delay_s, note, kind, now
        )
        return bool(row and row["released"])

    async def rescue_expired(self, limit: int = 500, now: datetime | None = None) -> list[Rescued]:
        rows = await self.pool.fetch(Q["rescue_expired"], now, limit)
        return [
            Rescued(
                id=r["id"],
                document_id=r["document_id"],
                stage=r["stage"],
                state=JobState(r["state"]),
                last_error=r["last_error"],
            )
            for r in rows
        ]

    async def check_lease(self, conn: Conn, job: Job) -> bool:
        """Inside ``conn``'s transaction: lock the job's row if its lease still holds."""
        return await conn.fetchval(Q["check_lease"], job.id, job.lease_token) is not None

    async def enqueue(
        self, jobs: Sequence[NewJob], conn: Conn | None = None, now: datetime | None = None
    ) -> int:
        """Enqueue jobs (idempotent per live (document, stage)); returns how many were added."""
        if not jobs:
            return 0
        row = await (conn or self.pool).fetchrow(
            Q["enqueue_jobs"],
            [j.document_id for j in jobs],
            [j.stage for j in jobs],
            [j.generation for j in jobs],
            [j.priority for j in jobs],
            [j.max_attempts for j in jobs],
            now,
        )
        return int(row["added"]) if row else 0

    async def cancel_document_jobs(
        self, document_id: uuid.UUID, below_generation: int, conn: Conn | None = None
    ) -> int:
        rows = await (conn or self.pool).fetch(
            Q["cancel_document_jobs"], document_id, below_generation
        )
        return len(rows)

    async def count_live(self, stages: Sequence[str]) -> int:
        return int(await self.pool.fetchval(Q["count_live_jobs"], list(stages)))

    async def get_job(self, job_id: int) -> JobRow | None:
        row = await self.pool.fetchrow(Q["get_job"], job_id)
        return to_struct(JobRow, row) if row else None

    async def document_jobs(self, document_id: uuid.UUID) -> list[JobRow]:
        rows = await self.pool.fetch(Q["document_jobs"], document_id)
        return [to_struct(JobRow, r) for r in rows]

    async def retry_failed(
        self, stage: str | None, kind: str | None, document_ids: Sequence[uuid.UUID] | None
    ) -> list[tuple[uuid.UUID, str]]:
        """Requeue failed jobs by predicate; returns (document, stage) of each."""
        ids = list(document_ids) if document_ids else None
        rows = await self.pool.fetch(Q["retry_failed"], stage, kind, ids)
        return [(r["document_id"], r["stage"]) for r in rows]

    async def register_worker(self, worker_id: str, stages: Sequence[str]) -> None:
        await self.pool.execute(W["upsert_worker"], worker_id, list(stages))

    async def unregister_worker(self, worker_id: str) -> None:
        await self.pool.execute(W["delete_worker"], worker_id)

    async def prune_workers(self, older_than_s: float) -> None:
        await self.pool.execute(W["prune_workers"], older_than_s)

    async def live_workers(self, seen_within_s: float) -> list[Worker]:
        rows = await self.pool.fetch(W["live_workers"], seen_within_s)
        return [to_struct(Worker, r) for r in rows]
