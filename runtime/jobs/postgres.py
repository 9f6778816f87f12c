"""The engine's access to PostgreSQL: one typed method per named query.

asyncpg records never leave this module; callers get :mod:`runtime.models` structs.
Methods that take ``conn`` run inside the caller's transaction when one is given (so an
application can insert its document and its first job atomically); otherwise they use
the pool. Every ``now`` parameter pins the database clock for tests (``None``: server time).
"""

from __future__ import annotations

import contextlib
import random
import uuid
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any, TypeAlias, TypeVar

import asyncpg
import msgspec

import schema
from runtime.jobs.store import (
    AT_ONCE,
    PEERS_SEEN_WITHIN_S,
    Deferral,
    JobStore,
    Release,
    Rescued,
    Settled,
    Settlement,
)
from runtime.models import Failure, Job, JobRow, JobState, NewJob
from runtime.process.tracing import contexts_for
from runtime.stage import DbConn, Writer

Q = schema.load("stage_jobs")
W = schema.load("workers")

Conn: TypeAlias = DbConn
Pool: TypeAlias = "asyncpg.Pool[Any]"
S = TypeVar("S", bound=msgspec.Struct)
T = TypeVar("T")


def to_struct(kind: type[S], record: asyncpg.Record, skip: frozenset[str] = frozenset()) -> S:
    return kind(**{k: v for k, v in record.items() if k not in skip})


#: Columns of complete_and_claim's rows that are not the claimed job's.
_SETTLE_ONLY = frozenset({"kind", "notified"})


class WorkerRow(msgspec.Struct, frozen=True, kw_only=True):
    """A row of the workers table (who serves which stages)."""

    id: str
    stages: list[str]
    started_at: datetime
    last_seen_at: datetime


class WorkerRegistry:
    """The workers table, and the leases of workers known to be gone."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    async def register_worker(
        self, worker_id: str, stages: Sequence[str], peers_within_s: float = PEERS_SEEN_WITHIN_S
    ) -> set[str]:
        """Register (or refresh) a worker; returns the stages that other workers seen in
        the last ``peers_within_s`` serve."""
        rows = await self.pool.fetch(W["upsert_worker"], worker_id, list(stages), peers_within_s)
        return {r["stage"] for r in rows}

    async def announce_worker(self, channel: str, payload: str) -> None:
        await self.pool.execute(W["announce_worker"], channel, payload)

    async def unregister_worker(self, worker_id: str) -> None:
        await self.pool.execute(W["delete_worker"], worker_id)

    async def prune_workers(self, older_than_s: float) -> None:
        await self.pool.execute(W["prune_workers"], older_than_s)

    async def live_workers(self, seen_within_s: float) -> list[WorkerRow]:
        rows = await self.pool.fetch(W["live_workers"], seen_within_s)
        return [to_struct(WorkerRow, r) for r in rows]

    async def running_owners_on_host(self, prefix: str) -> list[str]:
        rows = await self.pool.fetch(Q["running_owners_on_host"], prefix)
        return [r["lease_owner"] for r in rows]

    async def expire_leases_of(self, owners: Sequence[str]) -> int:
        return int(await self.pool.fetchval(Q["expire_leases_of"], list(owners)))

    async def expire_connections(self) -> None:
        await self.pool.expire_connections()


class JobRepository(WorkerRegistry, JobStore):
    """Jobs and workers on PostgreSQL; implements :class:`runtime.jobs.store.JobStore`."""

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
        settled = await self.settle([(job, next_stage)], write=write, now=now)
        return job.id in settled.held

    async def apply(self, settlement: Settlement) -> Settled:
        """Settle in one statement and one commit; ``write`` runs in its transaction."""
        args = _settle_args(settlement)
        if settlement.write is None:
            rows = await self.pool.fetch(*args)
            settled = _settled(rows)
        else:
            async with self.pool.acquire() as conn, conn.transaction():
                settled = _settled(await conn.fetch(*args))
                if settled.held:
                    await settlement.write(conn)
        missing = [job for job, _ in settlement.jobs if job.id not in settled.held]
        if missing:
            settled.held.update(await self._completed_earlier(missing))
        return settled

    async def _completed_earlier(self, jobs: Sequence[Job]) -> set[int]:
        rows = await self.pool.fetch(
            Q["completed_earlier"], [j.id for j in jobs], [j.lease_token for j in jobs]
        )
        return {r["id"] for r in rows}

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

    async def release(self, job: Job, how: Release = AT_ONCE, now: datetime | None = None) -> bool:
        """Give a held job back without counting the attempt; False if the lease is lost."""
        row = await self.pool.fetchrow(
            Q["release_job"], job.id, job.lease_token, how.delay_s, how.note, how.kind, now
        )
        return bool(row and row["released"])

    async def defer(
        self, job: Job, message: str, kind: str, how: Deferral, now: datetime | None = None
    ) -> JobState | None:
        """Hand a job back after a transient failure without counting the attempt, or
        fail it once its failures outlast the retry budget; None if the lease is lost."""
        row = await self.pool.fetchrow(
            Q["defer_job"],
            job.id,
            job.lease_token,
            message,
            kind,
            how.floor_s,
            how.base_s,
            how.cap_s,
            how.retry_for_s,
            random.random(),
            how.progressed,
            now,
        )
        return JobState(row["state"]) if row else None

    async def rescue_expired(self, limit: int = 500, now: datetime | None = None) -> list[Rescued]:
        rows = await self.pool.fetch(Q["rescue_expired"], now, limit)
        return [
            Rescued(
                id=r["id"],
                document_id=r["document_id"],
                stage=r["stage"],
                state=JobState(r["state"]),
                last_error=r["last_error"],
                generation=r["generation"],
                attempts=r["attempts"],
                max_attempts=r["max_attempts"],
                created_at=r["created_at"],
                lease_owner=r["lease_owner"],
                trace_context=r["trace_context"],
            )
            for r in rows
        ]

    async def checkpoint(self, job: Job, write: Writer) -> bool:
        """Run ``write`` in one transaction if the job still holds its lease (its row
        locked meanwhile); False and nothing written if it does not."""
        async with self.pool.acquire() as conn, conn.transaction():
            if not await self.check_lease(conn, job):
                return False
            await write(conn)
        return True

    async def check_lease(self, conn: Conn, job: Job) -> bool:
        """Inside ``conn``'s transaction: lock the job's row if its lease still holds."""
        return await conn.fetchval(Q["check_lease"], job.id, job.lease_token) is not None

    async def enqueue(
        self, jobs: Sequence[NewJob], conn: Conn | None = None, now: datetime | None = None
    ) -> int:
        return await enqueue_jobs(conn or self.pool, jobs, now)

    async def cancel_document_jobs(
        self, document_id: uuid.UUID, below_generation: int, conn: Conn | None = None
    ) -> int:
        return await cancel_document_jobs(conn or self.pool, document_id, below_generation)

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
        return await retry_failed_jobs(self.pool, document_ids, stage=stage, kind=kind)


# -- what a pipeline calls through the face (runtime.api): functions, not the repository --


async def enqueue_jobs(db: Pool | Conn, jobs: Sequence[NewJob], now: datetime | None = None) -> int:
    """Enqueue jobs (idempotent per live (document, stage)) on ``db``, a pool or the
    connection of a transaction the job must commit with; returns how many were added.
    Each job carries its own trace context, else the current span's (the submission's),
    else a new trace's (:func:`runtime.process.tracing.contexts_for`)."""
    if not jobs:
        return 0
    row = await db.fetchrow(
        Q["enqueue_jobs"],
        [j.document_id for j in jobs],
        [j.stage for j in jobs],
        [j.generation for j in jobs],
        [j.priority for j in jobs],
        [j.max_attempts for j in jobs],
        now,
        contexts_for(jobs),
    )
    return int(row["added"]) if row else 0


#: How often a short transaction that PostgreSQL aborted as a deadlock's victim, or for a
#: serialization failure, is run again.
TRANSACTION_ATTEMPTS = 3
_RETRIED = (asyncpg.exceptions.DeadlockDetectedError, asyncpg.exceptions.SerializationError)


async def in_transaction(pool: Pool, body: Callable[[Conn], Awaitable[T]]) -> T:
    """``body`` in a transaction on a pooled connection, run again (up to
    :data:`TRANSACTION_ATTEMPTS` times) when PostgreSQL aborts it as a deadlock's victim
    or for a serialization failure: both say the same transaction may well succeed now."""
    for _ in range(TRANSACTION_ATTEMPTS - 1):
        with contextlib.suppress(*_RETRIED):
            return await _once(pool, body)
    return await _once(pool, body)


async def _once(pool: Pool, body: Callable[[Conn], Awaitable[T]]) -> T:
    async with pool.acquire() as conn, conn.transaction():
        return await body(conn)


async def document_transaction(
    pool: Pool, document_id: uuid.UUID, body: Callable[[Conn], Awaitable[T]]
) -> T:
    """``body``, which updates the document's row and cancels its jobs (a new generation),
    in :func:`in_transaction` after the document's live jobs are locked: the order in which
    a worker completing one of them takes the two (``lock_document_jobs`` says why). The
    one race left, a job queued and finished between the lock and the cancel, is the
    deadlock that ``in_transaction`` runs again."""

    async def locked(conn: Conn) -> T:
        await conn.execute(Q["lock_document_jobs"], document_id)
        return await body(conn)

    return await in_transaction(pool, locked)


async def cancel_document_jobs(
    db: Pool | Conn, document_id: uuid.UUID, below_generation: int
) -> int:
    """Cancel the document's live jobs of generations below ``below_generation`` (a
    worker running one commits nothing); returns how many."""
    return len(await db.fetch(Q["cancel_document_jobs"], document_id, below_generation))


async def retry_failed_jobs(
    pool: Pool,
    document_ids: Sequence[uuid.UUID] | None,
    *,
    stage: str | None = None,
    kind: str | None = None,
) -> list[tuple[uuid.UUID, str]]:
    """Requeue failed jobs by predicate, with a fresh attempt budget; returns the
    (document, stage) of each."""
    ids = list(document_ids) if document_ids else None
    rows = await pool.fetch(Q["retry_failed"], stage, kind, ids)
    return [(r["document_id"], r["stage"]) for r in rows]


def _settle_args(s: Settlement) -> tuple[Any, ...]:
    limits = s.claim.limits if s.claim else {}
    return (
        Q["complete_and_claim"],
        [j.id for j, _ in s.jobs],
        [j.lease_token for j, _ in s.jobs],
        [n for _, n in s.jobs],
        s.now,
        s.claim.worker_id if s.claim else "",
        s.claim.lease_s if s.claim else 0.0,
        list(limits),
        list(limits.values()),
        list(s.own_free),
        list(s.own_free.values()),
    )


def _settled(rows: Sequence[asyncpg.Record]) -> Settled:
    settled = Settled()
    for r in rows:
        if r["kind"] == "completed":
            settled.held.add(r["id"])
        else:
            settled.claimed.append(to_struct(Job, r, skip=_SETTLE_ONLY))
    return settled
