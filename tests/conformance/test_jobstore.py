"""One conformance suite for the worker's port (runtime.jobs.store.JobStore): every test
runs against the asyncpg repository on a throwaway database and against the in-memory
store the worker's unit tests use, so the fake cannot drift from the real thing."""

from __future__ import annotations

import inspect
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import asyncpg
import msgspec
import pytest

from runtime.jobs.documents import DocumentRepository
from runtime.jobs.in_memory import MemoryStore
from runtime.jobs.postgres import JobRepository
from runtime.jobs.store import Claim, Deferral, JobStore, Release
from runtime.models import Failure, Job, JobRow, JobState, NewDocument, NewJob
from runtime.stage import DbConn

pytestmark = pytest.mark.anyio
LEASE_S = 30.0


class Harness:
    """A store, a way to put jobs in it, and a way to read one back."""

    def __init__(self, store: MemoryStore | JobRepository, docs: DocumentRepository | None):
        self.store: JobStore = store
        self._impl = store
        self._docs = docs
        self.t0 = datetime.now(UTC)

    async def seed(
        self, n: int, stage: str = "parse", *, max_attempts: int = 3, priority: int = 0
    ) -> None:
        for _ in range(n):
            if self._docs is not None:
                doc = NewDocument(
                    filename="d.pdf",
                    media_type="application/pdf",
                    byte_size=1,
                    sha256=uuid.uuid4().hex,
                )
                await self._docs.submit(doc, stage, max_attempts=max_attempts, priority=priority)
            else:
                new = NewJob(
                    document_id=uuid.uuid4(),
                    stage=stage,
                    max_attempts=max_attempts,
                    priority=priority,
                )
                assert isinstance(self._impl, MemoryStore)
                await self._impl.enqueue([new])
        # Every job is due from here on.
        self.t0 = datetime.now(UTC) + timedelta(seconds=1)

    def at(self, seconds: float) -> datetime:
        return self.t0 + timedelta(seconds=seconds)

    async def row(self, job_id: int) -> JobRow:
        row = await self._impl.get_job(job_id)
        assert row is not None
        return row

    async def claim(self, n: int = 1, stage: str = "parse", at: float = 0.0) -> list[Job]:
        return await self.store.claim(stage, "w1", n, LEASE_S, self.at(at))


@pytest.fixture(params=["postgres", "memory"])
def backend(request: pytest.FixtureRequest) -> str | None:
    """A throwaway database's DSN, or None for the in-memory store."""
    return request.getfixturevalue("dsn") if request.param == "postgres" else None


@pytest.fixture
async def h(backend: str | None) -> AsyncIterator[Harness]:
    if backend is None:
        yield Harness(MemoryStore(), None)
        return
    async with asyncpg.create_pool(backend, min_size=1, max_size=4) as pool:
        yield Harness(JobRepository(pool), DocumentRepository(pool))


def _both_conform(repo: JobRepository, memory: MemoryStore) -> tuple[JobStore, JobStore]:
    """mypy checks here that both implementations are structurally JobStores."""
    return repo, memory


def stolen(job: Job) -> Job:
    """The same job as a worker whose lease was taken over sees it."""
    return msgspec.structs.replace(job, lease_token=uuid.uuid4())


def test_the_fake_has_every_method_of_the_port_with_the_same_parameters() -> None:
    port = {n for n, v in vars(JobStore).items() if inspect.isfunction(v) and not n.startswith("_")}
    assert len(port) == 17
    for impl in (MemoryStore, JobRepository):
        for name in port:
            got, want = (
                inspect.signature(getattr(impl, name)),
                inspect.signature(getattr(JobStore, name)),
            )
            assert list(got.parameters) == list(want.parameters), (impl.__name__, name)
            assert inspect.iscoroutinefunction(getattr(impl, name)), (impl.__name__, name)


async def test_claim_leases_due_jobs_best_first_up_to_the_limit(h: Harness) -> None:
    await h.seed(2)
    await h.seed(1, priority=5)
    assert await h.claim(3, at=-3600) == []  # not due yet an hour ago
    first = await h.claim(2)
    assert {j.id for j in first} == {3, 1}  # priority first, then oldest
    assert all(j.attempts == 1 and j.lease_expires_at == h.at(LEASE_S) for j in first)
    row = await h.row(first[0].id)
    assert (row.state, row.lease_owner, row.lease_token) == (
        JobState.RUNNING,
        "w1",
        first[0].lease_token,
    )
    rest = await h.claim(5)
    assert [j.id for j in rest] == [2]
    assert await h.claim(5) == [] and await h.claim(5, stage="chunk") == []
    assert await h.store.count_live(["parse"]) == 3 and await h.store.count_live(["chunk"]) == 0


async def test_heartbeat_renews_held_leases_only(h: Harness) -> None:
    await h.seed(2)
    a, b = await h.claim(2)
    held = await h.store.heartbeat(
        [(a.id, a.lease_token), (b.id, stolen(b).lease_token)], LEASE_S, h.at(10)
    )
    assert held == {a.id}
    assert (await h.row(a.id)).lease_expires_at == h.at(10 + LEASE_S)
    assert (await h.row(b.id)).lease_expires_at == h.at(LEASE_S)
    assert await h.store.heartbeat([], LEASE_S) == set()


async def test_settle_completes_enqueues_the_next_stage_and_claims_in_one_call(h: Harness) -> None:
    await h.seed(3)
    a, b = await h.claim(2)
    settled = await h.store.settle(
        [(a, "chunk"), (stolen(b), "chunk")],
        Claim("w1", LEASE_S, {"parse": 5, "chunk": 5}),
        now=h.at(1),
    )
    assert settled.held == {a.id}  # b's lease is not ours: nothing happens to it
    # The third parse job is leased; the chunk job this call enqueued is not.
    assert [j.stage for j in settled.claimed] == ["parse"]
    assert (await h.row(a.id)).state == JobState.SUCCEEDED
    assert (await h.row(b.id)).state == JobState.RUNNING
    [nxt] = await h.claim(5, stage="chunk", at=2)
    assert (nxt.document_id, nxt.attempts) == (a.document_id, 1)
    # A retry after a lost reply finds the completion done and the job held.
    again = await h.store.settle([(a, "chunk")], now=h.at(3))
    assert again.held == {a.id} and again.claimed == []
    assert await h.store.count_live(["chunk"]) == 1  # and enqueued nothing twice


async def test_a_failing_writer_commits_nothing_and_one_writer_completes_one_job(
    h: Harness,
) -> None:
    await h.seed(2)
    a, b = await h.claim(2)

    async def bad(conn: DbConn) -> None:
        raise ValueError("writer failed")

    with pytest.raises(ValueError, match="writer failed"):
        await h.store.settle([(a, None)], Claim("w1", LEASE_S, {"parse": 1}), bad, h.at(1))
    assert (await h.row(a.id)).state == JobState.RUNNING
    with pytest.raises(ValueError):
        await h.store.settle([(a, None), (b, None)], write=bad)
    wrote: list[int] = []

    async def good(conn: DbConn) -> None:
        wrote.append(1)

    settled = await h.store.settle([(stolen(a), None)], write=good, now=h.at(1))
    assert settled.held == set() and wrote == []  # not held: the writer does not run
    assert (await h.store.settle([(a, None)], write=good, now=h.at(1))).held == {a.id}
    assert wrote == [1]


async def test_checkpoint_writes_only_under_a_held_lease(h: Harness) -> None:
    await h.seed(1)
    [job] = await h.claim()
    wrote: list[int] = []

    async def write(conn: DbConn) -> None:
        wrote.append(1)

    assert await h.store.checkpoint(job, write) is True
    assert await h.store.checkpoint(stolen(job), write) is False
    assert wrote == [1]


async def test_retry_or_fail_counts_attempts_and_fails_when_they_run_out(h: Harness) -> None:
    await h.seed(1, max_attempts=2)
    failure = Failure(message="boom", kind="error", permanent=False)
    [job] = await h.claim()
    assert await h.store.retry_or_fail(stolen(job), failure, 5.0, h.at(1)) is None
    assert await h.store.retry_or_fail(job, failure, 5.0, h.at(1)) == JobState.QUEUED
    row = await h.row(job.id)
    assert (row.run_after, row.last_error, row.error_kind, row.lease_token) == (
        h.at(6),
        "boom",
        "error",
        None,
    )
    assert await h.claim(at=5) == []  # backing off
    [job] = await h.claim(at=6)
    assert job.attempts == 2
    assert await h.store.retry_or_fail(job, failure, 5.0, h.at(7)) == JobState.FAILED
    assert (await h.row(job.id)).finished_at == h.at(7)


async def test_a_permanent_failure_fails_at_once(h: Harness) -> None:
    await h.seed(1)
    [job] = await h.claim()
    failure = Failure(message="bad pdf", kind="invalid", permanent=True)
    assert await h.store.retry_or_fail(job, failure, 0.0, h.at(1)) == JobState.FAILED
    assert await h.store.count_live(["parse"]) == 0


async def test_release_hands_the_job_back_without_counting_the_attempt(h: Harness) -> None:
    await h.seed(1)
    [job] = await h.claim()
    assert await h.store.release(stolen(job)) is False
    snooze = Release(delay_s=2.0, note="snoozed", kind="rate_limited")
    assert await h.store.release(job, snooze, h.at(1)) is True
    row = await h.row(job.id)
    assert (row.state, row.attempts, row.run_after) == (JobState.QUEUED, 0, h.at(3))
    assert (row.last_error, row.error_kind) == ("snoozed", "rate_limited")
    [again] = await h.claim(at=3)
    assert again.attempts == 1
    assert await h.store.release(again, now=h.at(4)) is True
    assert (await h.row(job.id)).last_error == "snoozed"  # no note keeps the last one


async def test_defer_retries_within_a_time_budget_not_a_count(h: Harness) -> None:
    await h.seed(1, max_attempts=1)
    how = Deferral(floor_s=1.0, base_s=0.0, cap_s=10.0, retry_for_s=60.0)
    [job] = await h.claim()
    assert await h.store.defer(stolen(job), "503", "transient", how, h.at(0)) is None
    for second in (0, 2, 4):  # more failures than max_attempts: not counted
        assert await h.store.defer(job, "503", "transient", how, h.at(second)) == JobState.QUEUED
        row = await h.row(job.id)
        assert (row.attempts, row.run_after) == (0, h.at(second + 1))
        [job] = await h.claim(at=second + 2)
    assert await h.store.defer(job, "503", "transient", how, h.at(61)) == JobState.FAILED
    row = await h.row(job.id)
    assert row.last_error == "503 (still failing after 61 s of retries)"
    assert (row.attempts, row.error_kind) == (1, "transient")


async def test_defer_backs_off_and_progress_restarts_the_budget(h: Harness) -> None:
    await h.seed(1)
    how = Deferral(floor_s=0.0, base_s=4.0, cap_s=100.0, retry_for_s=10.0)
    [job] = await h.claim()
    assert await h.store.defer(job, "e", "transient", how, h.at(0)) == JobState.QUEUED
    first = (await h.row(job.id)).run_after
    assert h.at(2) <= first <= h.at(4)  # equal jitter on the base
    [job] = await h.claim(at=4)
    assert await h.store.defer(job, "e", "transient", how, h.at(4)) == JobState.QUEUED
    assert h.at(4 + 4) <= (await h.row(job.id)).run_after <= h.at(4 + 8)  # doubled
    [job] = await h.claim(at=12)
    progressed = msgspec.structs.replace(how, progressed=True)
    assert await h.store.defer(job, "e", "transient", progressed, h.at(12)) == JobState.QUEUED
    [job] = await h.claim(at=20)
    assert await h.store.defer(job, "e", "transient", how, h.at(20)) == JobState.QUEUED


async def test_rescue_requeues_expired_leases_and_fails_when_attempts_ran_out(h: Harness) -> None:
    await h.seed(1, max_attempts=2)
    [job] = await h.claim()
    assert await h.store.rescue_expired(now=h.at(LEASE_S - 1)) == []
    [rescued] = await h.store.rescue_expired(now=h.at(LEASE_S + 1))
    assert (rescued.id, rescued.state, rescued.attempts) == (job.id, JobState.QUEUED, 1)
    assert rescued.last_error == "worker lost 1 times (lease of w1 expired)"
    assert (await h.row(job.id)).lost == 1
    assert await h.store.heartbeat([(job.id, job.lease_token)], LEASE_S, h.at(LEASE_S + 2)) == set()
    [job] = await h.claim(at=LEASE_S + 2)
    [rescued] = await h.store.rescue_expired(now=h.at(3 * LEASE_S))
    assert (rescued.state, rescued.attempts, rescued.max_attempts) == (JobState.FAILED, 2, 2)
    assert rescued.as_job().id == job.id


async def test_leases_of_dead_owners_expire_at_once(h: Harness) -> None:
    await h.seed(2)
    [a] = await h.store.claim("parse", "host:1", 1, LEASE_S, h.at(0))
    [b] = await h.store.claim("parse", "other:2", 1, LEASE_S, h.at(0))
    assert await h.store.running_owners_on_host("host:") == ["host:1"]
    assert await h.store.expire_leases_of(["host:1"]) == 1
    assert [r.id for r in await h.store.rescue_expired(now=h.at(1))] == [a.id]
    assert (await h.row(b.id)).state == JobState.RUNNING


async def test_workers_see_the_stages_the_others_serve(h: Harness) -> None:
    assert await h.store.register_worker("a", ["parse"]) == set()
    assert await h.store.register_worker("b", ["chunk", "embed"]) == {"parse"}
    assert await h.store.register_worker("a", ["parse"]) == {"chunk", "embed"}
    await h.store.announce_worker("ragline_jobs", "+worker")
    await h.store.unregister_worker("b")
    await h.store.prune_workers(3600)
    assert await h.store.register_worker("a", ["parse"]) == set()
    await h.store.expire_connections()


async def test_a_jobs_trace_context_travels_with_its_document(h: Harness) -> None:
    """The submission's traceparent is stored with the first job, and the job of every
    next stage, a retry and a rescue carry the same one (docs/tracing.md)."""
    from opentelemetry.sdk.trace import TracerProvider

    from runtime.process.tracing import document_span, traceparent_of

    tracer = TracerProvider().get_tracer("ragline")
    with document_span("submit", {}, tracer=tracer) as root:
        await h.seed(1)
    context = traceparent_of(root)
    assert context is not None
    [job] = await h.claim()
    assert job.trace_context == context
    await h.store.settle([(job, "chunk")], now=h.at(1))
    [chunk] = await h.claim(stage="chunk", at=2)
    assert chunk.trace_context == context
    failure = Failure(message="boom", kind="error", permanent=False)
    assert await h.store.retry_or_fail(chunk, failure, 0.0, h.at(3)) == JobState.QUEUED
    [again] = await h.claim(stage="chunk", at=4)
    assert (again.attempts, again.trace_context) == (2, context)
    [rescued] = await h.store.rescue_expired(now=h.at(5 + LEASE_S))
    assert (rescued.trace_context, rescued.lease_owner) == (context, "w1")
    assert (await h.row(job.id)).trace_context == context
