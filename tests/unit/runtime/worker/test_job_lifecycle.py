"""The worker's logic on the in-memory job store and a manual clock: no PostgreSQL, no
sleeps for readiness. Each stage job here waits for the test to hand it its outcome, so
every step is driven, not timed."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

import anyio
import pytest

from runtime.errors import Snooze, TransientError
from runtime.jobs.clock import ManualClock
from runtime.jobs.in_memory import MemoryStore
from runtime.models import Job, JobState, NewJob
from runtime.stage import DbConn, JobContext, Pipeline
from runtime.worker.config import WorkerConfig
from runtime.worker.rescuer import Rescuer, RescuerConfig
from runtime.worker.worker import Worker

pytestmark = pytest.mark.anyio
LEASE_S = 30.0
#: Far longer than any test: a claim loop that waited for its poll would time the test out.
POLL_S = 60.0
STEP_S = 2.0


class Gate:
    """A stage whose jobs wait for the test to send each its outcome: None (succeed),
    an exception (raise it), or "checkpoint" (write one step, then wait again)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.started = 0
        self.running = 0
        self.peak = 0
        self.failed: list[int] = []
        self.cancelled = 0
        self._changed = anyio.Event()
        self._send, self._receive = anyio.create_memory_object_stream[object](100)

    async def process(self, ctx: JobContext) -> Any:
        self.started += 1
        self.running += 1
        self.peak = max(self.peak, self.running)
        self._changed.set()
        try:
            while True:
                outcome = await self._receive.receive()
                if outcome == "checkpoint":

                    async def step(conn: DbConn) -> None:
                        pass

                    await ctx.checkpoint(step)
                    continue
                if isinstance(outcome, BaseException):
                    raise outcome
                return outcome
        except anyio.get_cancelled_exc_class():
            self.cancelled += 1
            raise
        finally:
            self.running -= 1
            self._changed.set()

    async def write(self, conn: DbConn, job: Job, output: Any) -> None:
        raise AssertionError("no output here: completions go through the completer")

    async def on_failed(self, job: Job) -> None:
        self.failed.append(job.id)
        self._changed.set()

    def close(self) -> None:
        self._send.close()
        self._receive.close()

    async def finish(self, *outcomes: object) -> None:
        for outcome in outcomes:
            await self._send.send(outcome)

    async def until(self, what: str, check: Any) -> None:
        """Wait (driven by the stage's own events) until ``check()`` holds."""
        with anyio.move_on_after(STEP_S):
            while not check():
                self._changed = anyio.Event()
                await self._changed.wait()
        assert check(), f"timed out waiting for: {what}"


def config(**kw: Any) -> WorkerConfig:
    fields: dict[str, Any] = {
        "stages": ("parse",),
        "concurrency": {"parse": 2},
        "lease_s": LEASE_S,
        "poll_s": POLL_S,
        "grace_s": 0.0,
        "retry_base_s": 4.0,
        "listen": False,
        "rescue_every_s": 3600.0,
    }
    fields.update(kw)
    return WorkerConfig(**fields)


class Rig:
    def __init__(self, worker: Worker, store: MemoryStore, clock: ManualClock, gate: Gate):
        self.worker, self.store, self.clock, self.gate = worker, store, clock, gate

    def states(self) -> list[JobState]:
        return [r.state for r in self.store.jobs.values()]

    def poll(self) -> None:
        """What the claim loop's poll timer does (without waiting for it)."""
        self.worker.state.wake_all()

    async def settled(self) -> None:
        """Wait until the worker holds no job."""
        with anyio.fail_after(STEP_S):
            while self.worker.inflight:
                event = self.worker.state.drained = anyio.Event()
                await event.wait()


@asynccontextmanager
async def rig(jobs: int = 1, max_attempts: int = 3, **kw: Any) -> AsyncIterator[Rig]:
    clock = ManualClock()
    store = MemoryStore(clock)
    await store.enqueue(
        [
            NewJob(document_id=uuid.uuid4(), stage="parse", max_attempts=max_attempts)
            for _ in range(jobs)
        ]
    )
    gate = Gate("parse")
    worker = Worker(Pipeline(stages=[gate]), "", config(**kw), clock=clock)
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            await tg.start(worker.serve, store)
            try:
                yield Rig(worker, store, clock, gate)
            finally:
                worker.stop()
    gate.close()


async def test_the_claim_loop_fills_its_slots_and_no_more() -> None:
    async with rig(jobs=5) as r:
        await r.gate.until("two running", lambda: r.gate.running == 2)
        assert r.states().count(JobState.RUNNING) == 2
        # A completion leases the slot's next job in the same step: still two.
        await r.gate.finish(None)
        await r.gate.until("third started", lambda: r.gate.started == 3)
        assert r.states().count(JobState.RUNNING) == 2
        await r.gate.finish(None, None, None, None)
        await r.gate.until("all done", lambda: r.gate.started == 5 and r.gate.running == 0)
        await r.settled()
        assert r.gate.peak == 2
        assert r.states() == [JobState.SUCCEEDED] * 5


def one_slot_each(first: Gate, second: Gate, clock: ManualClock) -> Worker:
    """A worker of a two-stage pipeline, one slot per stage."""
    names = (first.name, second.name)
    cfg = config(stages=names, concurrency=dict.fromkeys(names, 1))
    return Worker(Pipeline(stages=[first, second]), "", cfg, clock=clock)


async def test_a_worker_registers_and_wakes_itself_for_its_next_stage() -> None:
    clock = ManualClock()
    store = MemoryStore(clock)
    await store.enqueue([NewJob(document_id=uuid.uuid4(), stage="parse")])
    parse, chunk = Gate("parse"), Gate("chunk")
    worker = one_slot_each(parse, chunk, clock)
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            await tg.start(worker.serve, store)
            assert set(store.workers) == {worker.id}
            assert store.announced == [("ragline_jobs", "+worker")]
            await parse.finish(None)
            # No NOTIFY and a 60 s poll: the completion woke chunk's loop itself.
            await chunk.until("chunk started", lambda: chunk.started == 1)
            await chunk.finish(None)
            await chunk.until("chunk done", lambda: chunk.running == 0)
            worker.stop()
    parse.close()
    chunk.close()
    assert [(r.stage, r.state) for r in store.jobs.values()] == [
        ("parse", JobState.SUCCEEDED),
        ("chunk", JobState.SUCCEEDED),
    ]
    assert store.workers == {}  # unregistered on the way out


class HoldingGate(Gate):
    holds_entry = True


@pytest.mark.parametrize("peer", [True, False])
async def test_a_busy_holds_entry_stage_leaves_new_documents_to_a_peer(peer: bool) -> None:
    """While every slot of a ``holds_entry`` stage is busy, a worker leases no new job of
    the first stage when another worker serves it too; alone, it goes on."""
    clock = ManualClock()
    store = MemoryStore(clock)
    if peer:
        store.workers["peer"] = (("parse",), clock.db_now())
    await store.enqueue([NewJob(document_id=uuid.uuid4(), stage="parse") for _ in range(3)])
    await store.enqueue([NewJob(document_id=uuid.uuid4(), stage="index")])
    parse, index = Gate("parse"), HoldingGate("index")
    worker = one_slot_each(parse, index, clock)
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            await tg.start(worker.serve, store)
            await index.until("index running", lambda: index.running == 1)
            if peer:
                # The first parse job may have been leased before index's; no other is.
                worker.state.wake_all()
                await anyio.sleep(0.05)
                await parse.finish(*[None] * parse.running)
                await anyio.sleep(0.05)
                started = parse.started
                assert started <= 1 and parse.running == 0
                # The index slot frees up (after the job the parse enqueued): new
                # documents again, without a poll.
                await index.finish(*[None] * (1 + started))
                await parse.until("parse resumed", lambda: parse.started == started + 1)
            else:
                await parse.until("parse running", lambda: parse.running == 1)
                assert index.running == 1
            await parse.finish(None, None, None)
            await index.finish(None, None, None, None)
            await parse.until("all parsed", lambda: parse.started == 3 and parse.running == 0)
            await index.until("all indexed", lambda: index.started == 4 and index.running == 0)
            worker.stop()
    parse.close()
    index.close()


async def test_a_failed_attempt_is_retried_after_its_backoff_until_max_attempts() -> None:
    async with rig(max_attempts=2) as r:
        await r.gate.finish(ValueError("a bug"))
        await r.settled()
        [row] = r.store.jobs.values()
        assert (row.state, row.attempts, row.error_kind) == (JobState.QUEUED, 1, "error")
        assert row.last_error == "ValueError: a bug"
        delay = (row.run_after - r.clock.db_now()).total_seconds()
        assert 2.0 <= delay <= 4.0  # retry_base_s with equal jitter
        r.poll()  # not due yet: nothing is claimed
        r.clock.advance(delay)
        r.poll()
        await r.gate.until("second attempt", lambda: r.gate.started == 2)
        await r.gate.finish(ValueError("a bug"))
        await r.gate.until("undone", lambda: r.gate.failed == [row.id])
        assert (row.state, row.attempts) == (JobState.FAILED, 2)


async def test_transient_failures_defer_without_counting_until_the_budget_is_spent() -> None:
    async with rig(max_attempts=1, retry_for_s=30.0) as r:
        [row] = r.store.jobs.values()
        for n in range(1, 4):  # three failures, max_attempts 1: none counted
            await r.gate.finish(TransientError("503 from the provider"))
            await r.settled()
            assert (row.state, row.attempts, row.transient_failures) == (JobState.QUEUED, 0, n)
            r.clock.advance(4.0 * 2**n)
            r.poll()
            await r.gate.until("next attempt", lambda n=n: r.gate.started == n + 1)
        await r.gate.finish(TransientError("503 from the provider"))
        await r.gate.until("undone", lambda: r.gate.failed == [row.id])
        assert row.state == JobState.FAILED
        assert row.last_error is not None and "still failing after" in row.last_error


async def test_an_attempt_that_checkpointed_progress_is_not_counted() -> None:
    async with rig(max_attempts=1) as r:
        await r.gate.finish("checkpoint", ValueError("a bug after a step"))
        await r.settled()
        [row] = r.store.jobs.values()
        assert (row.state, row.attempts) == (JobState.QUEUED, 0)


async def test_a_snoozed_job_goes_back_untried_and_pauses_the_stage_here() -> None:
    async with rig(max_attempts=1, concurrency={"parse": 1}) as r:
        [row] = r.store.jobs.values()
        state = r.worker.state
        for n, pause_s in enumerate([0.05, 0.1, 0.2], start=1):
            await r.gate.finish(Snooze("another worker holds the shard"))
            await r.settled()
            # Due again at once for any worker, the attempt not counted, no error noted.
            assert (row.state, row.attempts, row.last_error) == (JobState.QUEUED, 0, None)
            assert row.run_after == r.clock.db_now()
            # This worker claims none of the stage's jobs meanwhile (the pause doubles).
            assert state.paused_s("parse") == pytest.approx(pause_s)
            assert "parse" not in state.free_slots()
            r.poll()
            await anyio.wait_all_tasks_blocked()
            assert r.gate.started == n
            r.clock.advance(pause_s)
            r.poll()
            await r.gate.until("claimed again", lambda n=n: r.gate.started == n + 1)
        await r.gate.finish(None)
        await r.settled()
        assert row.state == JobState.SUCCEEDED
        # A success here: the next snooze pauses briefly again.
        assert state.pause("parse") == pytest.approx(0.05)


async def test_the_heartbeat_renews_leases_and_cancels_a_job_whose_lease_was_taken() -> None:
    async with rig(jobs=1) as r:
        await r.gate.until("running", lambda: r.gate.running == 1)
        [row] = r.store.jobs.values()
        r.clock.advance(20)
        await r.worker.heartbeat_once()
        assert row.lease_expires_at == r.clock.db_now() + timedelta(seconds=LEASE_S)
        row.lease_token = uuid.uuid4()  # another owner took it (expiry and a re-claim)
        await r.worker.heartbeat_once()
        await r.settled()
        assert r.gate.cancelled == 1
        assert row.state == JobState.RUNNING  # still the other owner's: nothing written


async def test_an_expired_lease_is_rescued_and_the_old_holder_commits_nothing() -> None:
    async with rig(jobs=1, concurrency={"parse": 1}) as r:
        await r.gate.until("running", lambda: r.gate.running == 1)
        [row] = r.store.jobs.values()
        r.clock.advance(LEASE_S + 1)  # the worker looked dead: no heartbeat renewed it
        [rescued] = await Rescuer(r.store, RescuerConfig(), clock=r.clock).run_once()
        assert (rescued.state, row.lost) == (JobState.QUEUED, 1)
        await r.worker.heartbeat_once()  # the old holder finds out and lets go
        # Its slot frees and claims the job back at once (it is due again).
        await r.gate.until("claimed again", lambda: r.gate.started == 2)
        assert r.gate.cancelled == 1
        assert (row.state, row.attempts) == (JobState.RUNNING, 2)
        await r.gate.finish(None)
        await r.gate.until("done", lambda: r.gate.running == 0)
        await r.settled()
        assert row.state == JobState.SUCCEEDED


class FlakyStore(MemoryStore):
    down = False

    async def heartbeat(self, *args: Any, **kw: Any) -> set[int]:
        if self.down:
            raise ConnectionRefusedError("database down")
        return await super().heartbeat(*args, **kw)


async def test_an_unreachable_database_cancels_jobs_whose_lease_may_have_run_out() -> None:
    async with rig(jobs=1) as r:
        store = FlakyStore(r.clock)
        store.jobs = r.store.jobs
        r.worker.state.attach(store, None, None)
        await r.gate.until("running", lambda: r.gate.running == 1)
        store.down = True
        await r.worker.heartbeat_once()  # the lease has most of its time left: keep going
        assert r.gate.cancelled == 0 and store.expired_connections == 1
        r.clock.advance(LEASE_S - r.worker.config.heartbeat_every_s)
        await r.worker.heartbeat_once()  # it would run out before the next heartbeat
        await r.gate.until("cancelled", lambda: r.gate.cancelled == 1)
        store.down = False


class CutOffStore(MemoryStore):
    """A store behind a cut link: statements are sent and never answered."""

    cut = False

    async def register_worker(self, *args: Any, **kw: Any) -> set[str]:
        if self.cut:
            await anyio.sleep_forever()
        return await super().register_worker(*args, **kw)


async def test_a_heartbeat_the_database_never_answers_gives_up_and_fences_the_jobs() -> None:
    async with rig(jobs=1) as r:
        store = CutOffStore(r.clock)
        store.jobs = r.store.jobs
        r.worker.state.attach(store, None, None)
        r.worker.heartbeat.budget_s = 0.05
        await r.gate.until("running", lambda: r.gate.running == 1)
        store.cut = True
        r.clock.advance(LEASE_S - r.worker.config.heartbeat_every_s)
        await r.worker.heartbeat_once()  # returns after its budget: no answer is an answer
        await r.gate.until("cancelled", lambda: r.gate.cancelled == 1)
        assert store.expired_connections == 1
        store.cut = False


async def test_stop_releases_jobs_in_flight_after_the_grace_period() -> None:
    async with rig(jobs=3) as r:
        await r.gate.until("two running", lambda: r.gate.running == 2)
        r.worker.stop()
        await r.gate.until("cancelled", lambda: r.gate.cancelled == 2)
        await r.settled()
        rows = list(r.store.jobs.values())
        assert [(x.state, x.attempts) for x in rows] == [(JobState.QUEUED, 0)] * 3
