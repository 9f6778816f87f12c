"""The worker loop in-process, against a real PostgreSQL, with scripted test stages."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import anyio
import asyncpg
import pytest

from bench.harness.pipelines import STAGES, ScriptedStage
from runtime.errors import LeaseLost
from runtime.jobs.documents import DocumentRepository
from runtime.jobs.postgres import JobRepository
from runtime.models import DocumentStatus, JobState, NewDocument
from runtime.stage import DbConn, JobContext, Pipeline
from runtime.worker.config import WorkerConfig
from runtime.worker.inflight import Context
from runtime.worker.listener import CHANNEL
from runtime.worker.worker import Worker
from tests.support.notify import Heard, listening
from tests.support.waits import wait_until

#: The engine runs on uvloop and on plain asyncio alike.
pytestmark = [pytest.mark.anyio, pytest.mark.both_backends]


@pytest.fixture
async def pool(dsn: str) -> AsyncIterator[asyncpg.Pool[Any]]:
    async with asyncpg.create_pool(dsn, min_size=1, max_size=4) as p:
        yield p


async def submit_many(pool: asyncpg.Pool[Any], n: int, stage: str = "parse") -> list[uuid.UUID]:
    docs = DocumentRepository(pool)
    ids = []
    for i in range(n):
        doc = NewDocument(
            filename=f"d{i}.pdf", media_type="application/pdf", byte_size=1, sha256=uuid.uuid4().hex
        )
        ids.append((await docs.submit(doc, stage)).document_id)
    return ids


def config(**kw: Any) -> WorkerConfig:
    fields: dict[str, Any] = {
        "stages": STAGES,
        "concurrency": dict.fromkeys(STAGES, 3),
        "lease_s": 10.0,
        "poll_s": 0.2,
        "retry_base_s": 0.05,
        "exit_when_idle": True,
    }
    fields.update(kw)
    return WorkerConfig(**fields)


async def run(pipeline: Pipeline, dsn: str, cfg: WorkerConfig, timeout_s: float = 30) -> Worker:
    worker = Worker(pipeline, dsn, cfg)
    with anyio.fail_after(timeout_s):
        await worker.run()
    return worker


def slow_parse(started: anyio.Event) -> list[ScriptedStage]:
    """The scripted stages with a parse that sets ``started`` and then hangs (far longer
    than any test waits): its job stays in flight until the worker cancels it."""

    class Slow(ScriptedStage):
        async def process(self, ctx: JobContext) -> Any:
            started.set()
            await anyio.sleep(60)
            return 1

    return [Slow("parse")] + [ScriptedStage(s) for s in STAGES[1:]]


async def effects(pool: asyncpg.Pool[Any]) -> dict[tuple[uuid.UUID, str], int]:
    rows = await pool.fetch(
        "SELECT document_id, stage, count(*) AS n FROM test_effects GROUP BY 1, 2"
    )
    return {(r["document_id"], r["stage"]): r["n"] for r in rows}


def scripted_but(stage: ScriptedStage) -> Pipeline:
    """The scripted pipeline, with ``stage`` in its place."""
    return Pipeline(stages=[stage if s == stage.name else ScriptedStage(s) for s in STAGES])


async def test_pipeline_runs_every_stage_once(dsn: str, pool: asyncpg.Pool[Any]) -> None:
    ids = await submit_many(pool, 12)
    await run(Pipeline(stages=[ScriptedStage(s) for s in STAGES]), dsn, config())
    docs = await DocumentRepository(pool).get_many(ids)
    assert {d.status for d in docs} == {DocumentStatus.READY}
    assert await effects(pool) == {(d, s): 1 for d in ids for s in STAGES}


class CountingStage(ScriptedStage):
    """Records the most jobs it ever had running at once."""

    def __init__(self, name: str) -> None:
        super().__init__(name, sleep_s=0.01, noop=True)
        self.now = 0
        self.peak = 0

    async def process(self, ctx: JobContext) -> Any:
        self.now += 1
        self.peak = max(self.peak, self.now)
        try:
            return await super().process(ctx)
        finally:
            self.now -= 1


async def test_slots_chain_jobs_without_exceeding_concurrency(
    dsn: str, pool: asyncpg.Pool[Any]
) -> None:
    # Completions lease the next job of their stage in the same commit; the slot keeps
    # its job count, so a stage never runs more than its concurrency.
    ids = await submit_many(pool, 30)
    stages = [CountingStage(name) for name in STAGES]
    limits = {"parse": 2, "chunk": 1, "vision": 3, "embed": 1, "index": 2}
    await run(Pipeline(stages=stages), dsn, config(concurrency=limits))
    peaks = {s.name: s.peak for s in stages}
    assert all(peaks[name] <= limit for name, limit in limits.items()), peaks
    assert peaks["parse"] == limits["parse"]  # its whole queue was due from the start
    assert all(s.calls == len(ids) for s in stages)
    statuses = await pool.fetch("SELECT DISTINCT status::text FROM documents")
    assert [r[0] for r in statuses] == ["ready"]


async def test_permanent_failure_fails_document_once(dsn: str, pool: asyncpg.Pool[Any]) -> None:
    ids = await submit_many(pool, 2)
    chunk = ScriptedStage("chunk", fail="permanent")
    await run(scripted_but(chunk), dsn, config())
    docs = await DocumentRepository(pool).get_many(ids)
    assert [d.status for d in docs] == [DocumentStatus.FAILED] * 2
    assert docs[0].error == "chunk: scripted permanent failure of chunk"
    assert chunk.calls == 2  # never retried
    assert len(chunk.failed_jobs) == 2  # side effects undone
    jobs = await JobRepository(pool).document_jobs(ids[0])
    assert [(j.stage, j.state, j.attempts) for j in jobs] == [
        ("parse", JobState.SUCCEEDED, 1),
        ("chunk", JobState.FAILED, 1),
    ]


async def test_transient_failure_retries_for_the_retry_budget_not_a_count(
    dsn: str, pool: asyncpg.Pool[Any]
) -> None:
    [doc] = await submit_many(pool, 1)
    embed = ScriptedStage("embed", fail="transient")
    await run(scripted_but(embed), dsn, config(retry_for_s=1.0))
    assert embed.calls > 3  # more than max_attempts: transient failures cost no attempt
    got = await DocumentRepository(pool).get(doc)
    assert got is not None and got.status == DocumentStatus.FAILED
    assert got.error is not None
    assert got.error.startswith("embed: scripted transient failure (still failing after ")
    [job] = [j for j in await JobRepository(pool).document_jobs(doc) if j.stage == "embed"]
    assert (job.state, job.attempts, job.error_kind) == (JobState.FAILED, 1, "transient")


async def test_an_attempt_that_checkpointed_progress_does_not_count(
    dsn: str, pool: asyncpg.Pool[Any]
) -> None:
    [doc] = await submit_many(pool, 1, stage="vision")
    # Checkpoints one step per attempt, then crashes, five times (max_attempts 3).
    vision = ScriptedStage("vision", fail="crash", fail_calls=5, progress=True, noop=True)
    await run(scripted_but(vision), dsn, config())
    assert vision.calls == 6
    got = await DocumentRepository(pool).get(doc)
    assert got is not None and got.status == DocumentStatus.READY


async def test_unclassified_exception_is_retried_and_named(
    dsn: str, pool: asyncpg.Pool[Any]
) -> None:
    [doc] = await submit_many(pool, 1, stage="index")
    index = ScriptedStage("index", fail="crash")
    await run(scripted_but(index), dsn, config())
    got = await DocumentRepository(pool).get(doc)
    assert got is not None and got.error == "index: ValueError: scripted bug"
    assert index.calls == 3


async def test_rate_limit_snoozes_without_counting_attempts(
    dsn: str, pool: asyncpg.Pool[Any]
) -> None:
    [doc] = await submit_many(pool, 1, stage="embed")
    embed = ScriptedStage("embed", fail="ratelimit:0.05", fail_calls=5)
    await run(scripted_but(embed), dsn, config())
    assert embed.calls == 6  # five 429s, more than max_attempts, and still fine
    got = await DocumentRepository(pool).get(doc)
    assert got is not None and got.status == DocumentStatus.READY
    [embed_job] = [j for j in await JobRepository(pool).document_jobs(doc) if j.stage == "embed"]
    assert embed_job.attempts == 1


async def test_heartbeat_cancels_job_whose_lease_was_taken(
    dsn: str, pool: asyncpg.Pool[Any]
) -> None:
    [doc] = await submit_many(pool, 1)
    started = anyio.Event()
    pipeline = Pipeline(stages=slow_parse(started))
    worker = Worker(pipeline, dsn, config(exit_when_idle=False, stages=("parse",)))
    async with anyio.create_task_group() as tg:
        tg.start_soon(worker.run)
        with anyio.fail_after(10):
            await started.wait()
        # Another owner took the job (as after an expiry and a re-claim): new token.
        await pool.execute("UPDATE stage_jobs SET lease_token = gen_random_uuid()")
        with anyio.fail_after(10):
            await worker.heartbeat_once()
            while worker.inflight:  # each slot that ends sets the worker's drained event
                drained = worker.state.drained = anyio.Event()
                await drained.wait()
        worker.stop()
    assert await effects(pool) == {}
    [job] = await JobRepository(pool).document_jobs(doc)
    assert job.state == JobState.RUNNING  # still the other owner's


async def test_checkpoint_refuses_after_lease_loss(dsn: str, pool: asyncpg.Pool[Any]) -> None:
    await submit_many(pool, 1)
    repo = JobRepository(pool)
    [job] = await repo.claim("parse", "w", 1, 30)
    ctx = Context(job, repo, pool=pool)
    wrote: list[int] = []

    async def write(conn: DbConn) -> None:
        wrote.append(1)

    await ctx.checkpoint(write)
    await pool.execute("UPDATE stage_jobs SET lease_token = gen_random_uuid()")
    with pytest.raises(LeaseLost):
        await ctx.checkpoint(write)
    assert wrote == [1]


async def test_stop_releases_inflight_jobs_after_grace(dsn: str, pool: asyncpg.Pool[Any]) -> None:
    [doc] = await submit_many(pool, 1)
    started = anyio.Event()
    pipeline = Pipeline(stages=slow_parse(started))
    worker = Worker(pipeline, dsn, config(exit_when_idle=False, stages=("parse",), grace_s=0.1))
    async with anyio.create_task_group() as tg:
        tg.start_soon(worker.run)
        with anyio.fail_after(10):
            await started.wait()
        worker.stop()
    [job] = await JobRepository(pool).document_jobs(doc)
    assert (job.state, job.attempts, job.lease_token) == (JobState.QUEUED, 0, None)


async def test_worker_only_claims_its_stages(dsn: str, pool: asyncpg.Pool[Any]) -> None:
    await submit_many(pool, 3)
    at_embed = await submit_many(pool, 2, stage="embed")
    await run(
        Pipeline(stages=[ScriptedStage(s) for s in STAGES]),
        dsn,
        config(stages=("embed", "index"), concurrency={"embed": 2, "index": 2}),
    )
    assert await effects(pool) == {(d, s): 1 for d in at_embed for s in ("embed", "index")}
    rows = await pool.fetch(
        "SELECT stage, state::text AS state, count(*) AS n FROM stage_jobs "
        "WHERE stage = 'parse' GROUP BY 1, 2"
    )
    assert [(r["stage"], r["state"], r["n"]) for r in rows] == [("parse", "queued", 3)]


async def test_config_validation() -> None:
    from runtime.errors import ConfigurationError

    with pytest.raises(ConfigurationError):
        WorkerConfig(stages=("parse",), concurrency={"parse": 0})
    with pytest.raises(ConfigurationError):
        WorkerConfig(stages=("parse",), concurrency={"parse": 1}, lease_s=5, heartbeat_s=5)


async def heard_everything(pool: asyncpg.Pool[Any], heard: Heard) -> None:
    """NOTIFY a marker and wait for it: notifications arrive in commit order, so every
    one committed before it has been heard by then."""
    arrived = heard.arrived = anyio.Event()
    await pool.execute("SELECT pg_notify($1, 'end')", CHANNEL)
    with anyio.fail_after(10):
        while "end" not in heard.payloads:
            await arrived.wait()
            arrived = heard.arrived = anyio.Event()


async def test_a_lone_worker_wakes_itself_without_notify(dsn: str, pool: asyncpg.Pool[Any]) -> None:
    # NOTIFY wakes other processes; with none serving a stage it only costs a lock that
    # serializes commits. The worker still announces itself.
    ids = await submit_many(pool, 20)
    async with listening(dsn) as heard:
        pipeline = Pipeline(stages=[ScriptedStage(s, noop=True) for s in STAGES])
        await run(pipeline, dsn, config(concurrency=dict.fromkeys(STAGES, 1)))
        await heard_everything(pool, heard)
    docs = await DocumentRepository(pool).get_many(ids)
    assert {d.status for d in docs} == {DocumentStatus.READY}
    assert heard.payloads == ["+worker", "end"]


async def test_a_worker_notifies_the_stages_another_worker_serves(
    dsn: str, pool: asyncpg.Pool[Any]
) -> None:
    # The parse worker does not run chunk, so each chunk job it enqueues into an empty
    # queue wakes the other worker; that one polls only every 30 s, so only NOTIFY can
    # finish this in time. Its own later stages it wakes for itself.
    ids = await submit_many(pool, 10)
    parse = Worker(
        Pipeline(stages=[ScriptedStage("parse", sleep_s=0.05, noop=True)]),
        dsn,
        config(stages=("parse",), concurrency={"parse": 1}),
    )
    rest = STAGES[1:]
    others = Worker(
        Pipeline(stages=[ScriptedStage(s, noop=True) for s in rest]),
        dsn,
        config(stages=rest, concurrency=dict.fromkeys(rest, 2), poll_s=30.0, exit_when_idle=False),
    )
    docs = DocumentRepository(pool)

    async def all_ready() -> bool:
        return {d.status for d in await docs.get_many(ids)} == {DocumentStatus.READY}

    with anyio.fail_after(25):
        async with anyio.create_task_group() as tg:
            await tg.start(others.run)  # registered and listening before parse begins
            tg.start_soon(parse.run)
            await wait_until(all_ready, timeout_s=20, what="all documents ready")
            others.stop()
