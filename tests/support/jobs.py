"""Reading what worker processes did to the stand-in pipeline's jobs."""

from __future__ import annotations

import signal

from bench.harness.db import sql
from bench.harness.fleet import submit_jobs
from bench.harness.procs import StartWorker, WorkerProcess, wait_for


def job_state(dsn: str, stage: str) -> tuple[str, int, int]:
    """(state, attempts, lost) of the one job of ``stage``."""
    [row] = sql(dsn, "SELECT state::text, attempts, lost FROM stage_jobs WHERE stage = $1", stage)
    return row[0], row[1], row[2]


def effects(dsn: str) -> list[tuple[str, int]]:
    """(stage, pid) of each effect the scripted stages committed, in order."""
    return [(r[0], r[1]) for r in sql(dsn, "SELECT stage, pid FROM test_effects ORDER BY id")]


def running_chunk_job(
    dsn: str, start_worker: StartWorker, *flags: str, sleep_s: int
) -> WorkerProcess:
    """One chunk job, held by a new worker whose chunk stage sleeps ``sleep_s``: the worker,
    once the job runs."""
    submit_jobs(dsn, 1, stage="chunk")
    worker = start_worker(dsn, "--stages", "chunk", *flags, RAGLINE_TEST_SLEEP=f"chunk={sleep_s}")
    wait_for(lambda: job_state(dsn, "chunk")[0] == "running", what="the job to start")
    return worker


def kill_mid_chunk(dsn: str, start_worker: StartWorker, *flags: str, sleep_s: int) -> None:
    """A worker SIGKILLed (and reaped) while it runs the one chunk job."""
    doomed = running_chunk_job(dsn, start_worker, *flags, sleep_s=sleep_s)
    doomed.signal(signal.SIGKILL)
    doomed.wait()
