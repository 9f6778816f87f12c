"""The worker's port to its job store: exactly what the engine's worker roles call.

Two implementations: :class:`runtime.jobs.postgres.JobRepository` (asyncpg, PostgreSQL) and
:class:`runtime.jobs.in_memory.MemoryStore` (in memory, for the worker's logic tests). One
conformance suite (tests/conformance/test_jobstore.py) runs against both. This module
imports neither of them.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Protocol

import msgspec

from runtime.models import Failure, Job, JobState, fields_of
from runtime.stage import Writer

#: Workers heard from within this long count as serving their stages (conservative: a
#: dead one only costs NOTIFYs nobody needed).
PEERS_SEEN_WITHIN_S = 120.0


class Claim(msgspec.Struct, frozen=True):
    """Jobs to lease in a :meth:`JobStore.settle`: how many per stage, for whom."""

    worker_id: str
    lease_s: float
    limits: Mapping[str, int]


class Settlement(msgspec.Struct, frozen=True, kw_only=True):
    """One :meth:`JobStore.settle` call, as the implementations' :meth:`JobStore.apply`
    takes it."""

    jobs: Sequence[tuple[Job, str | None]]
    claim: Claim | None = None
    #: Runs in the same transaction once the (one) job is known to hold its lease; if it
    #: raises, nothing of the settlement is committed.
    write: Writer | None = None
    now: datetime | None = None
    #: The caller's free slots per stage it runs: it claims that many of the next stages'
    #: new jobs itself, so only jobs beyond them NOTIFY other workers.
    own_free: Mapping[str, int] = msgspec.field(default_factory=dict)


class Settled(msgspec.Struct):
    """What a :meth:`JobStore.settle` did: ids completed, jobs leased."""

    held: set[int] = msgspec.field(default_factory=set)
    claimed: list[Job] = msgspec.field(default_factory=list)


class Rescued(msgspec.Struct, frozen=True, kw_only=True):
    """A job the sweep took back from a worker that is gone."""

    id: int
    document_id: uuid.UUID
    stage: str
    state: JobState
    last_error: str | None
    generation: int = 1
    attempts: int = 0
    max_attempts: int = 0
    created_at: datetime | None = None
    #: Whose lease expired, and the job's trace (a span event there records the loss).
    lease_owner: str | None = None
    trace_context: str | None = None

    def as_job(self, filename: str = "") -> Job:
        """The job as a stage's ``on_failed`` takes it (no lease: the sweep ended it)."""
        when = self.created_at or datetime.now(UTC)
        lease = {"lease_token": uuid.UUID(int=0), "lease_expires_at": when, "created_at": when}
        return Job(**fields_of(Job, msgspec.structs.asdict(self)) | lease, filename=filename)


class Release(msgspec.Struct, frozen=True, kw_only=True):
    """How :meth:`JobStore.release` hands a held job back, the attempt not counted."""

    delay_s: float = 0.0
    #: The job's new ``last_error`` and ``error_kind`` (None keeps the ones it has).
    note: str | None = None
    kind: str | None = None


#: Release at once, the job's last error kept (a graceful stop).
AT_ONCE = Release()


class Deferral(msgspec.Struct, frozen=True, kw_only=True):
    """How :meth:`JobStore.defer` hands a job back after a transient failure."""

    #: Least delay (a server's Retry-After).
    floor_s: float = 0.0
    #: First backoff delay; 0 retries as soon as claims allow (an open circuit holds them).
    base_s: float = 2.0
    cap_s: float = 300.0
    #: Retry budget: failing for longer than this fails the job.
    retry_for_s: float = 86400.0
    #: The attempt checkpointed progress: the failures' clock starts over.
    progressed: bool = False


class JobStore(Protocol):
    """Jobs and workers as the worker, its completer and its rescuer use them.

    Every ``now`` pins the store's clock (``None``: the store's own time). Writes that
    concern a leased job are fenced by its lease token: a lost lease changes nothing.
    Implementations subclass it, so mypy checks each one has every method.
    """

    async def claim(
        self, stage: str, worker_id: str, limit: int, lease_s: float, now: datetime | None = None
    ) -> list[Job]:
        """Lease up to ``limit`` due jobs of ``stage``, best first: a :meth:`settle` that
        completes nothing (both implementations inherit this)."""
        settled = await self.settle((), Claim(worker_id, lease_s, {stage: limit}), now=now)
        return settled.claimed

    async def heartbeat(
        self, held: Sequence[tuple[int, uuid.UUID]], lease_s: float, now: datetime | None = None
    ) -> set[int]:
        """Renew leases; returns the ids still held."""
        ...

    async def settle(
        self,
        jobs: Sequence[tuple[Job, str | None]],
        claim: Claim | None = None,
        write: Writer | None = None,
        now: datetime | None = None,
        *,
        own_free: Mapping[str, int] | None = None,
    ) -> Settled:
        """Complete held ``jobs`` (enqueueing each one's next stage) and lease new ones
        in one commit; a retry after a lost reply finds its jobs held again (both
        implementations inherit this; ``write`` completes exactly one job)."""
        if write is not None and len(jobs) != 1:
            raise ValueError("a writer completes exactly one job")
        return await self.apply(
            Settlement(jobs=jobs, claim=claim, write=write, now=now, own_free=own_free or {})
        )

    async def apply(self, settlement: Settlement) -> Settled:
        """What :meth:`settle` does, its arguments checked."""
        ...

    async def checkpoint(self, job: Job, write: Writer) -> bool:
        """Run ``write`` in one transaction if ``job`` still holds its lease; False (and
        nothing written) when it does not."""
        ...

    async def retry_or_fail(
        self, job: Job, failure: Failure, delay_s: float, now: datetime | None = None
    ) -> JobState | None:
        """Record a failed attempt; the job's new state, None if the lease is lost."""
        ...

    async def release(self, job: Job, how: Release = AT_ONCE, now: datetime | None = None) -> bool:
        """Give a held job back without counting the attempt; False if the lease is lost."""
        ...

    async def defer(
        self, job: Job, message: str, kind: str, how: Deferral, now: datetime | None = None
    ) -> JobState | None:
        """Hand a job back after a transient failure (attempt not counted), or fail it
        once its failures outlast ``how.retry_for_s``; None if the lease is lost."""
        ...

    async def rescue_expired(self, limit: int = 500, now: datetime | None = None) -> list[Rescued]:
        """Requeue (attempts left) or fail jobs whose lease expired."""
        ...

    async def running_owners_on_host(self, prefix: str) -> list[str]: ...

    async def expire_leases_of(self, owners: Sequence[str]) -> int: ...

    async def count_live(self, stages: Sequence[str]) -> int:
        """Queued or running jobs of ``stages``, due or not."""
        ...

    async def register_worker(
        self, worker_id: str, stages: Sequence[str], peers_within_s: float = PEERS_SEEN_WITHIN_S
    ) -> set[str]:
        """Register or refresh a worker; the stages other live workers serve."""
        ...

    async def announce_worker(self, channel: str, payload: str) -> None: ...

    async def unregister_worker(self, worker_id: str) -> None: ...

    async def prune_workers(self, older_than_s: float) -> None: ...

    async def expire_connections(self) -> None:
        """The store was unreachable: replace connections that may be half-dead."""
        ...
