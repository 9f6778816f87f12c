"""An in-memory :class:`runtime.jobs.store.JobStore`: the worker's logic without PostgreSQL.

It keeps the job life of schema/queries/stage_jobs.sql (lease tokens fence every write,
completions enqueue the next stage and lease new jobs in one step, transient failures
back off within a time budget, the sweep counts lost leases as attempts) and runs on an
injected clock. It has no documents and no connection: a stage that writes SQL fails with
:class:`NoConnection`'s error, and nothing is NOTIFYed (payloads are only recorded).
tests/conformance/test_jobstore.py holds it to the same tests as the asyncpg repository.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, cast

from runtime.jobs.clock import Clock
from runtime.jobs.store import AT_ONCE, PEERS_SEEN_WITHIN_S, JobStore, Rescued, Settled
from runtime.models import Failure, Job, JobRow, JobState, NewJob, fields_of
from runtime.process.tracing import contexts_for
from runtime.stage import DbConn, Writer

if TYPE_CHECKING:  # the port's parameter structs, for annotations only
    from runtime.jobs.store import Deferral, Release, Settlement

#: Stands for PostgreSQL's '-infinity': a lease expired at once.
LONG_AGO = datetime.min.replace(tzinfo=UTC)
LIVE = (JobState.QUEUED, JobState.RUNNING)


class NoConnection:
    """What a writer gets from the in-memory store: any use is a clear error."""

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError(f"the in-memory job store has no database connection (.{name})")


NO_CONNECTION = cast(DbConn, NoConnection())


@dataclass
class _Row:
    id: int
    document_id: uuid.UUID
    stage: str
    generation: int
    max_attempts: int
    priority: int
    run_after: datetime
    created_at: datetime
    state: JobState = JobState.QUEUED
    attempts: int = 0
    lost: int = 0
    lease_owner: str | None = None
    lease_token: uuid.UUID | None = None
    lease_expires_at: datetime | None = None
    last_error: str | None = None
    error_kind: str | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    transient_since: datetime | None = None
    transient_failures: int = 0
    trace_context: str | None = None

    def holds(self, token: uuid.UUID) -> bool:
        return self.state is JobState.RUNNING and self.lease_token == token

    def end_lease(self, state: JobState, run_after: datetime, now: datetime) -> None:
        self.state = state
        self.run_after = run_after
        self.lease_token = None
        self.lease_expires_at = None
        self.finished_at = now if state is JobState.FAILED else None

    def as_job(self) -> Job:
        assert self.lease_token is not None and self.lease_expires_at is not None
        return Job(**fields_of(Job, vars(self)))

    def as_row(self) -> JobRow:
        return JobRow(**fields_of(JobRow, vars(self)))


def _defer_delay_s(how: Deferral, failures: int, jitter: float) -> float:
    backoff = 0.0
    if how.base_s > 0:
        backoff = min(how.cap_s, how.base_s * 2 ** min(max(failures - 1, 0), 30))
        backoff *= 0.5 + 0.5 * jitter
    return max(min(how.floor_s, how.cap_s), backoff)


class MemoryTables:
    """The in-memory tables: jobs, workers, and what needs no lease."""

    def __init__(self, clock: Clock | None = None, rng: random.Random | None = None) -> None:
        self.clock = clock or Clock()
        self.rng = rng or random.Random()
        self.jobs: dict[int, _Row] = {}
        self.workers: dict[str, tuple[tuple[str, ...], datetime]] = {}
        #: Payloads announced on a channel, in order (nobody listens).
        self.announced: list[tuple[str, str]] = []
        self.expired_connections = 0

    def _now(self, now: datetime | None = None) -> datetime:
        return now or self.clock.db_now() or datetime.now(UTC)

    def _held(self, job: Job) -> _Row | None:
        row = self.jobs.get(job.id)
        return row if row is not None and row.holds(job.lease_token) else None

    # -- beyond the port: seeding and reading, as the repository has them ---------------

    async def enqueue(
        self, jobs: Sequence[NewJob], conn: object = None, now: datetime | None = None
    ) -> int:
        added = 0
        for new, context in zip(jobs, contexts_for(jobs), strict=True):
            added += (
                self._insert(
                    new.document_id,
                    new.stage,
                    new.generation,
                    new.max_attempts,
                    new.priority,
                    self._now(now),
                    context,
                )
                is not None
            )
        return added

    def _insert(
        self,
        doc: uuid.UUID,
        stage: str,
        gen: int,
        max_attempts: int,
        prio: int,
        now: datetime,
        trace_context: str | None = None,
    ) -> _Row | None:
        if any(
            r.document_id == doc and r.stage == stage and r.state in LIVE
            for r in self.jobs.values()
        ):
            return None
        row = _Row(len(self.jobs) + 1, doc, stage, gen, max_attempts, prio, now, now)
        row.trace_context = trace_context
        self.jobs[row.id] = row
        return row

    async def get_job(self, job_id: int) -> JobRow | None:
        row = self.jobs.get(job_id)
        return row.as_row() if row else None

    async def running_owners_on_host(self, prefix: str) -> list[str]:
        return sorted(
            {
                r.lease_owner
                for r in self.jobs.values()
                if r.state is JobState.RUNNING
                and r.lease_owner
                and r.lease_owner.startswith(prefix)
            }
        )

    async def expire_leases_of(self, owners: Sequence[str]) -> int:
        rows = [
            r for r in self.jobs.values() if r.state is JobState.RUNNING and r.lease_owner in owners
        ]
        for row in rows:
            row.lease_expires_at = LONG_AGO
        return len(rows)

    async def count_live(self, stages: Sequence[str]) -> int:
        return sum(r.stage in stages and r.state in LIVE for r in self.jobs.values())

    async def register_worker(
        self, worker_id: str, stages: Sequence[str], peers_within_s: float = PEERS_SEEN_WITHIN_S
    ) -> set[str]:
        at = self._now()
        self.workers[worker_id] = (tuple(stages), at)
        since = at - timedelta(seconds=peers_within_s)
        return {
            s
            for w, (ss, seen) in self.workers.items()
            if w != worker_id and seen >= since
            for s in ss
        }

    async def announce_worker(self, channel: str, payload: str) -> None:
        self.announced.append((channel, payload))

    async def unregister_worker(self, worker_id: str) -> None:
        self.workers.pop(worker_id, None)

    async def prune_workers(self, older_than_s: float) -> None:
        since = self._now() - timedelta(seconds=older_than_s)
        self.workers = {w: v for w, v in self.workers.items() if v[1] >= since}

    async def expire_connections(self) -> None:
        self.expired_connections += 1


class MemoryStore(MemoryTables, JobStore):
    """Jobs and workers in dicts; implements :class:`runtime.jobs.store.JobStore`."""

    # -- the port ------------------------------------------------------------------------

    async def heartbeat(
        self, held: Sequence[tuple[int, uuid.UUID]], lease_s: float, now: datetime | None = None
    ) -> set[int]:
        ids = set()
        for job_id, token in held:
            row = self.jobs.get(job_id)
            if row is not None and row.holds(token):
                row.lease_expires_at = self._now(now) + timedelta(seconds=lease_s)
                ids.add(job_id)
        return ids

    async def apply(self, settlement: Settlement) -> Settled:
        jobs, claim = settlement.jobs, settlement.claim
        at = self._now(settlement.now)
        held = [(row, nxt) for job, nxt in jobs if (row := self._held(job)) is not None]
        if settlement.write is not None and held:
            await settlement.write(NO_CONNECTION)  # raises: nothing of this call happens
        settled = Settled()
        fresh: set[int] = set()
        for row, nxt in held:
            row.state, row.finished_at, row.lease_expires_at = JobState.SUCCEEDED, at, None
            settled.held.add(row.id)
            if nxt is not None:
                added = self._insert(
                    row.document_id,
                    nxt,
                    row.generation,
                    row.max_attempts,
                    row.priority,
                    at,
                    row.trace_context,
                )
                if added is not None:
                    fresh.add(added.id)
        for stage, n in (claim.limits if claim else {}).items():
            assert claim is not None
            due = [
                r
                for r in self.jobs.values()
                if r.state is JobState.QUEUED
                and r.stage == stage
                and r.run_after <= at
                and r.id not in fresh
            ]
            due.sort(key=lambda r: (-r.priority, r.run_after, r.id))
            for row in due[:n]:
                row.state, row.attempts, row.lease_owner = (
                    JobState.RUNNING,
                    row.attempts + 1,
                    claim.worker_id,
                )
                row.lease_token = uuid.uuid4()
                row.lease_expires_at = at + timedelta(seconds=claim.lease_s)
                row.started_at, row.finished_at = at, None
                settled.claimed.append(row.as_job())
        for job, _ in jobs:  # completed by an earlier call whose reply was lost
            row = self.jobs.get(job.id)
            if row and row.state is JobState.SUCCEEDED and row.lease_token == job.lease_token:
                settled.held.add(job.id)
        return settled

    async def checkpoint(self, job: Job, write: Writer) -> bool:
        if self._held(job) is None:
            return False
        await write(NO_CONNECTION)
        return True

    async def retry_or_fail(
        self, job: Job, failure: Failure, delay_s: float, now: datetime | None = None
    ) -> JobState | None:
        if (row := self._held(job)) is None:
            return None
        at = self._now(now)
        failed = failure.permanent or row.attempts >= row.max_attempts
        row.end_lease(
            JobState.FAILED if failed else JobState.QUEUED, at + timedelta(seconds=delay_s), at
        )
        row.last_error, row.error_kind = failure.message, failure.kind
        return row.state

    async def release(self, job: Job, how: Release = AT_ONCE, now: datetime | None = None) -> bool:
        if (row := self._held(job)) is None:
            return False
        at = self._now(now)
        row.end_lease(JobState.QUEUED, at + timedelta(seconds=how.delay_s), at)
        row.attempts = max(row.attempts - 1, 0)
        row.last_error = how.note if how.note is not None else row.last_error
        row.error_kind = how.kind if how.kind is not None else row.error_kind
        return True

    async def defer(
        self, job: Job, message: str, kind: str, how: Deferral, now: datetime | None = None
    ) -> JobState | None:
        if (row := self._held(job)) is None:
            return None
        at = self._now(now)
        since = at if how.progressed or row.transient_since is None else row.transient_since
        failures = (0 if how.progressed else row.transient_failures) + (how.base_s > 0)
        elapsed = (at - since).total_seconds()
        failed = elapsed > how.retry_for_s
        delay = _defer_delay_s(how, failures, self.rng.random())
        row.end_lease(
            JobState.FAILED if failed else JobState.QUEUED, at + timedelta(seconds=delay), at
        )
        row.attempts = row.attempts if failed else max(row.attempts - 1, 0)
        row.transient_since, row.transient_failures = since, failures
        suffix = f" (still failing after {round(elapsed)} s of retries)" if failed else ""
        row.last_error, row.error_kind = message + suffix, kind
        return row.state

    async def rescue_expired(self, limit: int = 500, now: datetime | None = None) -> list[Rescued]:
        at = self._now(now)
        expired = [
            r
            for r in self.jobs.values()
            if r.state is JobState.RUNNING
            and r.lease_expires_at is not None
            and r.lease_expires_at < at
        ]
        expired.sort(key=lambda r: (r.lease_expires_at or at, r.id))
        rescued = []
        for row in expired[:limit]:
            failed = row.attempts >= row.max_attempts
            row.lost += 1
            row.last_error = f"worker lost {row.lost} times (lease of {row.lease_owner} expired)"
            row.error_kind = "worker_lost"
            row.end_lease(JobState.FAILED if failed else JobState.QUEUED, at, at)
            rescued.append(
                Rescued(
                    id=row.id,
                    document_id=row.document_id,
                    stage=row.stage,
                    state=row.state,
                    last_error=row.last_error,
                    generation=row.generation,
                    attempts=row.attempts,
                    max_attempts=row.max_attempts,
                    created_at=row.created_at,
                    lease_owner=row.lease_owner,
                    trace_context=row.trace_context,
                )
            )
        return rescued
