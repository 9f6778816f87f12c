"""Providers on a real PostgreSQL: the circuit every process shares (opens on N failures in
a row across processes, holds claims, one probe at a time, closes with a NOTIFY) and the
GCRA budget's reservations. Two :class:`Providers` on one database stand for two worker
processes; probe intervals are passed by backdating ``next_probe_at``, not by sleeping."""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator
from typing import Any

import anyio
import asyncpg
import pytest
from prometheus_client import REGISTRY

from bench.harness.pipelines import STAGES, ScriptedStage
from runtime.errors import PermanentError, ProviderUnavailable, RateLimited, TransientError
from runtime.jobs.documents import DocumentRepository
from runtime.jobs.postgres import JobRepository
from runtime.models import DocumentStatus, JobState, NewDocument
from runtime.providers.gate import Providers
from runtime.providers.specs import CircuitConfig, ProviderSpec, provider_states
from runtime.stage import JobContext, Pipeline
from runtime.worker.config import WorkerConfig
from runtime.worker.worker import Worker
from tests.support.notify import listening

pytestmark = pytest.mark.anyio

NAME = "cohere/embed-v4.0"
SPEC = ProviderSpec(name=NAME)
#: Three failures open it; probes far apart unless a test backdates them.
CIRCUIT = CircuitConfig(failures=3, probe_s=30.0, probe_max_s=120.0)


@pytest.fixture
async def pool(dsn: str) -> AsyncIterator[asyncpg.Pool[Any]]:
    async with asyncpg.create_pool(dsn, min_size=1, max_size=6) as p:
        yield p


async def process(pool: asyncpg.Pool[Any], owner: str, spec: ProviderSpec = SPEC) -> Providers:
    providers = Providers(pool, owner, {"embed": (spec,)}, CIRCUIT)
    await providers.register()
    return providers


async def fail(providers: Providers, exc: Exception | None = None) -> None:
    with pytest.raises(TransientError):
        async with providers.call(NAME):
            raise exc or TransientError("cohere embed: HTTP 503: injected")


async def state(pool: asyncpg.Pool[Any]) -> Any:
    [row] = [s for s in await provider_states(pool) if s.name == NAME]
    return row


async def probe_due_now(pool: asyncpg.Pool[Any], *procs: Providers) -> None:
    await pool.execute("UPDATE providers SET next_probe_at = now() - interval '1 second'")
    for p in procs:
        await p.refresh()


def gauge() -> float | None:
    return REGISTRY.get_sample_value("ragline_provider_state", {"provider": NAME})


async def test_consecutive_failures_across_processes_open_the_circuit(
    dsn: str, pool: asyncpg.Pool[Any], caplog: pytest.LogCaptureFixture
) -> None:
    a, b = await process(pool, "a"), await process(pool, "b")
    await fail(a)
    async with b.call(NAME):  # a success anywhere resets the count
        pass
    assert (await state(pool)).failures == 0
    await fail(a)
    await fail(b)
    assert gauge() == 0
    async with listening(dsn) as heard:
        with caplog.at_level(logging.INFO, logger="runtime.providers.specs"):
            assert await heard.after(fail(a)) == [f"provider:{NAME}"]
            await fail(b)  # a failure while open is no transition
    transitions = [r.getMessage() for r in caplog.records if "circuit" in r.getMessage()]
    assert len(transitions) == 1 and "circuit open (3 failures in a row" in transitions[0]
    assert gauge() == 2
    opened = await state(pool)
    assert (opened.state, opened.failures, opened.stages) == ("open", 4, ["embed"])
    assert opened.last_error == "cohere embed: HTTP 503: injected"
    assert "unavailable since" in opened.waiting_line() and "(HTTP 503)" in opened.waiting_line()

    await b.refresh()
    assert b.claimable("embed", 4) == 0 and b.claimable("parse", 4) == 4
    called = False
    with pytest.raises(ProviderUnavailable, match="next try"):
        async with b.call(NAME):
            called = True
    assert not called  # refused without calling the provider


async def test_one_probe_at_a_time_and_its_success_closes_for_everyone(
    dsn: str, pool: asyncpg.Pool[Any]
) -> None:
    a, b = await process(pool, "a"), await process(pool, "b")
    for _ in range(3):
        await fail(a)
    await probe_due_now(pool, a, b)
    assert a.claimable("embed", 4) == 1 and b.claimable("embed", 4) == 1
    async with listening(dsn) as heard:
        async with a.call(NAME):  # the probe
            assert (await state(pool)).state == "half_open"
            with pytest.raises(ProviderUnavailable):
                async with b.call(NAME):
                    pytest.fail("a second call went while the probe was in flight")
            with pytest.raises(ProviderUnavailable):
                async with a.call(NAME):
                    pytest.fail("a second call went while the probe was in flight")
        with anyio.fail_after(5):
            while f"provider:{NAME}" not in heard.payloads:  # noqa: ASYNC110 - a listener
                await anyio.sleep(0.02)
    closed = await state(pool)
    assert (closed.state, closed.failures, closed.next_probe_at) == ("closed", 0, None)
    await b.refresh()
    assert b.claimable("embed", 4) == 4


async def test_a_failed_probe_reopens_with_a_longer_interval(pool: asyncpg.Pool[Any]) -> None:
    a = await process(pool, "a")
    for _ in range(3):
        await fail(a)
    first = await state(pool)
    await probe_due_now(pool, a)
    await fail(a)
    again = await state(pool)
    assert (again.state, again.probes) == ("open", 1)
    assert again.next_probe_at is not None and first.next_probe_at is not None
    assert (again.next_probe_at - again.changed_at).total_seconds() == pytest.approx(60, abs=1)
    assert (first.next_probe_at - first.changed_at).total_seconds() == pytest.approx(30, abs=1)


async def test_a_bad_request_or_a_429_is_an_answer_and_resets_the_count(
    pool: asyncpg.Pool[Any],
) -> None:
    a = await process(pool, "a")
    await fail(a)
    with pytest.raises(PermanentError):
        async with a.call(NAME):
            raise PermanentError("HTTP 400: bad input")
    assert (await state(pool)).failures == 0
    await fail(a)
    with pytest.raises(RateLimited):
        async with a.call(NAME):
            raise RateLimited("HTTP 429", retry_after_s=30)
    after = await state(pool)
    assert after.failures == 0
    # The Retry-After pauses every process: the next reservation waits past it.
    gap = await pool.fetchval("SELECT extract(epoch FROM paused_until - now()) FROM providers")
    assert 25 < gap <= 30


async def test_reservations_never_overlap_across_processes(pool: asyncpg.Pool[Any]) -> None:
    spec = ProviderSpec(name=NAME, requests_per_min=60_000, tokens_per_min=6_000_000)
    procs = [await process(pool, f"p{i}", spec) for i in range(3)]
    start = await pool.fetchval("SELECT now()")

    async def calls(p: Providers) -> None:
        for _ in range(10):
            async with p.call(NAME, tokens=100):
                pass

    async with anyio.create_task_group() as tg:
        for p in procs:
            for _ in range(2):
                tg.start_soon(calls, p)
    # 60 requests at 1 ms each and 6,000 tokens at 10 µs each: each clock moved on by
    # exactly what was reserved, from no earlier than the first reservation.
    row = await pool.fetchrow(
        "SELECT extract(epoch FROM request_at - $1::timestamptz) AS r,"
        " extract(epoch FROM token_at - $1::timestamptz) AS t FROM providers",
        start,
    )
    assert row is not None
    assert 0.060 <= row["r"] < 0.060 + 5.0
    assert 0.060 <= row["t"] < 0.060 + 5.0


class CallingStage(ScriptedStage):
    """A stage that declares a provider and calls it once per job."""

    providers = (SPEC,)

    async def process(self, ctx: JobContext) -> Any:
        async with ctx.calling(NAME):
            return await super().process(ctx)


async def test_workers_claim_nothing_while_open_and_resume_on_notify(
    dsn: str, pool: asyncpg.Pool[Any]
) -> None:
    docs = DocumentRepository(pool)
    ids = []
    for i in range(4):
        new = NewDocument(
            filename=f"d{i}.pdf", media_type="application/pdf", byte_size=1, sha256=uuid.uuid4().hex
        )
        ids.append((await docs.submit(new, "embed")).document_id)
    other = await process(pool, "elsewhere")
    for _ in range(3):
        await fail(other)
    embed = CallingStage("embed")
    pipeline = Pipeline(stages=[embed if s == "embed" else ScriptedStage(s) for s in STAGES])
    config = WorkerConfig(
        stages=("embed", "index"),
        concurrency={"embed": 2, "index": 2},
        poll_s=0.1,
        circuit=CIRCUIT,
        exit_when_idle=True,
    )
    worker = Worker(pipeline, dsn, config)
    async with anyio.create_task_group() as tg:
        tg.start_soon(worker.run)
        with anyio.fail_after(10):
            while worker.providers is None or not worker.providers.board:  # noqa: ASYNC110
                await anyio.sleep(0.02)
        await anyio.sleep(0.5)  # several poll intervals: nothing may be claimed
        assert embed.calls == 0
        jobs = [j for d in ids for j in await JobRepository(pool).document_jobs(d)]
        assert {(j.state, j.attempts) for j in jobs} == {(JobState.QUEUED, 0)}
        # Another process's successful probe closes it; its NOTIFY wakes this worker.
        await probe_due_now(pool, other)
        async with other.call(NAME):
            pass
        with anyio.fail_after(20):
            while worker.inflight or embed.calls < 4:  # noqa: ASYNC110 - worker's own state
                await anyio.sleep(0.05)
    assert {d.status for d in await docs.get_many(ids)} == {DocumentStatus.READY}
