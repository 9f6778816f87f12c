"""The index stage converges to exactly one point per chunk: when it runs twice, when its
worker is SIGKILLed mid-job, and when a reprocess leaves fewer chunks than before."""

from __future__ import annotations

import contextlib
import signal
import uuid
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest

from bench.harness.procs import StartWorker, WorkerProcess
from runtime.errors import LeaseLost
from runtime.models import DocumentStatus, JobState
from runtime.worker.inflight import Context
from stages.actions import verify
from stages.db import checkpoints
from stages.pipeline import index as index_stage
from stages.pipeline.index import IndexStage
from stages.ports.vector_index import point_id
from tests.support.pipeline_env import (
    PipelineEnv,
    TimedCohere,
    cohere_env,
    copy_sample,
    long_pdf,
    pipeline_env,
    sample,
)
from tests.support.waits import wait_until

pytestmark = pytest.mark.anyio

BEFORE_INDEX = ("parse", "chunk", "vision", "embed")


async def index_jobs(env: PipelineEnv) -> dict[str, int]:
    rows = await env.pool.fetch(
        "SELECT state::text, count(*) FROM stage_jobs WHERE stage = 'index' GROUP BY 1"
    )
    return {r[0]: int(r[1]) for r in rows}


async def assert_all_indexed(env: PipelineEnv, ids: list[uuid.UUID]) -> int:
    """Every document ready with one point per chunk, nothing else in the collection."""
    total = 0
    for doc_id in ids:
        assert (await env.doc(doc_id)).status == DocumentStatus.READY
        total += await env.assert_indexed(doc_id)
    assert await env.count_points() == total
    report = await verify.verify(env.pool, env.probe)
    assert report.clean, report.problems
    return total


async def test_index_twice_for_the_same_generation_adds_nothing(
    dsn: str, tmp_path: Path, fake_cohere: TimedCohere
) -> None:
    async with pipeline_env(dsn, tmp_path / "d", **cohere_env(fake_cohere)) as env:
        ids = await env.submit_all([sample("lighthouses.pdf"), sample("sourdough.pdf")])
        await env.run()
        total = await assert_all_indexed(env, ids)
        target = ids[0]
        points = await env.points(target)

        # The same generation's index job once more, as after a commit that was lost.
        await env.enqueue_index(target)
        await env.run(("index",))
        assert await env.points(target) == points
        assert await assert_all_indexed(env, ids) == total
        for generation in (2, 3):  # reprocess --from index, twice
            assert await env.docs.reprocess(target, "index") == generation
            await env.run(("index",))
            assert {p.generation for p in await env.points(target)} == {generation}
            assert await assert_all_indexed(env, ids) == total
        assert await env.job_count("index") == 2 + 1 + 2
        assert fake_cohere.requests_to("embed") == 2  # one per document, never again


async def kill_mid_job(
    env: PipelineEnv, start: StartWorker, data_dir: Path, extra: dict[str, str]
) -> WorkerProcess:
    """Start an index worker and SIGKILL it while it holds a running index job.

    SIGSTOP first, then look: a job still running while the process is frozen was cut
    off mid-job. If the worker slipped past one, let it go on and look again.
    """
    proc = start(
        env.dsn,
        "--stages",
        "index",
        "--concurrency",
        "2",
        "--poll",
        "0.2",
        RAGLINE_PIPELINE="stages.app:plugin",
        RAGLINE_DATA_DIR=str(data_dir),
        **extra,
    )
    for _ in range(20):
        try:
            await wait_until(lambda: running_index_jobs(env, proc.pid), what="an index job")
        except TimeoutError as exc:
            raise AssertionError(f"the index worker ran no job:\n{proc.output()}") from exc
        proc.signal(signal.SIGSTOP)
        await anyio.sleep(0.1)  # let a commit already on the wire land
        if await running_index_jobs(env, proc.pid):
            proc.signal(signal.SIGKILL)
            await anyio.to_thread.run_sync(proc.wait)
            return proc
        proc.signal(signal.SIGCONT)
    raise AssertionError("never caught the worker in the middle of an index job")


async def running_index_jobs(env: PipelineEnv, pid: int) -> int:
    return int(
        await env.pool.fetchval(
            "SELECT count(*) FROM stage_jobs WHERE stage = 'index' AND state = 'running' "
            "AND split_part(lease_owner, ':', 2) = $1",
            str(pid),
        )
    )


async def test_worker_killed_during_index_jobs_converges_to_one_point_per_chunk(
    dsn: str, tmp_path: Path, fake_cohere: TimedCohere, start_worker: StartWorker
) -> None:
    data_dir = tmp_path / "data"
    env_vars = cohere_env(
        fake_cohere, RAGLINE_CHUNK_TOKENS="400", RAGLINE_CHUNK_OVERLAP_TOKENS="40"
    )
    async with pipeline_env(dsn, data_dir, **env_vars) as env:
        big = long_pdf(tmp_path / "harbour-log.pdf", 100)
        ids = await env.submit_all([sample(n) for n in ("lighthouses.pdf", "sourdough.pdf")])
        ids += [(await env.submit(big, force=True)).document_id for _ in range(6)]
        await env.run(BEFORE_INDEX)
        assert await index_jobs(env) == {"queued": len(ids)}

        await kill_mid_job(env, start_worker, data_dir, env_vars)
        # The dead worker's leases would expire in a minute: backdate them instead.
        await env.pool.execute(
            "UPDATE stage_jobs SET lease_expires_at = now() - interval '1 second' "
            "WHERE state = 'running'"
        )
        await env.run(("index",))

        jobs = await index_jobs(env)
        assert jobs == {"succeeded": len(ids)}, jobs
        lost = await env.pool.fetchval("SELECT sum(lost) FROM stage_jobs WHERE stage = 'index'")
        assert lost >= 1  # the rescued job(s): the kill did land mid-job
        await assert_all_indexed(env, ids)


@pytest.mark.parametrize("slice_points", [index_stage.SLICE_POINTS, 4])
async def test_shrinking_reprocess_leaves_no_orphan_points(
    dsn: str,
    tmp_path: Path,
    fake_cohere: TimedCohere,
    monkeypatch: pytest.MonkeyPatch,
    slice_points: int,
) -> None:
    """Also when the index stage streams each document in slices (4 points here): the
    new generation's last slice drops the old one's points."""
    monkeypatch.setattr(index_stage, "SLICE_POINTS", slice_points)
    read: list[int] = []
    chunk_vectors = checkpoints.chunk_vectors

    async def counted(*args: Any, **kwargs: Any) -> list[checkpoints.ChunkVector]:
        rows = await chunk_vectors(*args, **kwargs)
        read.append(len(rows))
        return rows

    monkeypatch.setattr(checkpoints, "chunk_vectors", counted)
    small = {"RAGLINE_CHUNK_TOKENS": "300", "RAGLINE_CHUNK_OVERLAP_TOKENS": "30"}
    async with pipeline_env(dsn, tmp_path / "d", **cohere_env(fake_cohere, **small)) as env:
        paths = [
            sample("rust-borrow-checker.pdf"),
            copy_sample("sourdough.pdf", tmp_path / "s.pdf"),
        ]
        ids = await env.submit_all(paths)
        await env.run()
        await assert_all_indexed(env, ids)
        target = ids[0]
        old = {r.id for r in await env.points(target)}

        await env.docs.reprocess(target, "chunk")
        await env.run(env={"RAGLINE_CHUNK_TOKENS": "3000", "RAGLINE_CHUNK_OVERLAP_TOKENS": "0"})

        new = {r.id for r in await env.points(target)}
        chunks = await env.chunks(target)
        assert new == {point_id(target, c.ordinal) for c in chunks}
        assert len(new) < len(old) and new < old  # ids are per ordinal: a strict subset
        everything = await env.probe.index.scan(env.probe.vector_collection)
        assert {r.document_id for r in everything} == {str(i) for i in ids}
        assert not [r for r in everything if r.id in old - new]
        await assert_all_indexed(env, ids)
        stages = [(j.stage, j.state) for j in await env.stage_jobs(target)]
        assert stages.count(("parse", JobState.SUCCEEDED)) == 1
        # Never more rows read at once than a slice.
        assert max(read) <= slice_points


async def test_an_index_job_of_a_replaced_generation_leaves_the_new_points_alone(
    dsn: str, tmp_path: Path, fake_cohere: TimedCohere
) -> None:
    async with pipeline_env(dsn, tmp_path / "d", **cohere_env(fake_cohere)) as env:
        [doc_id] = await env.submit_all([sample("sourdough.pdf")])
        await env.run()
        await env.enqueue_index(doc_id)
        # Another worker claims that generation-1 index job and is slow to start it...
        [zombie] = await env.jobs.claim("index", "elsewhere:1:zombie", 1, 60.0, None)
        # ...while the document is reprocessed from index (cancelling the job) and the
        # new generation is indexed by this worker.
        assert await env.docs.reprocess(doc_id, "index") == 2
        await env.run(("index",))
        await env.assert_indexed(doc_id)

        # The old job's process() now runs on (its heartbeat has not noticed yet). Its
        # outcome can never commit; the index must not suffer either. (The probe lets the
        # shard go first, or the job would snooze before reaching its lease check.)
        await env.probe.index.aclose()
        with contextlib.suppress(LeaseLost):
            await IndexStage(env.services()).process(Context(zombie, env.jobs, pool=env.jobs.pool))

        assert (await env.doc(doc_id)).status == DocumentStatus.READY
        await env.assert_indexed(doc_id)
