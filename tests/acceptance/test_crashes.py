"""Crash recovery for real: worker subprocesses SIGKILLed, SIGSTOPped past their lease,
SIGTERMed mid-job, and cut off from PostgreSQL. Nothing is lost, nothing done twice."""

from __future__ import annotations

import signal
import time
from pathlib import Path

from bench.harness.db import sql
from bench.harness.fleet import submit_jobs
from bench.harness.procs import StartWorker, wait_for
from tests.support.jobs import effects, job_state

FAST = ("--lease", "1.5", "--heartbeat", "0.4", "--rescue-every", "0.3", "--poll", "0.2")


def test_sigkill_mid_job_another_worker_finishes_once(dsn: str, start_worker: StartWorker) -> None:
    submit_jobs(dsn, 1, stage="chunk")
    doomed = start_worker(dsn, "--stages", "chunk", *FAST, RAGLINE_TEST_SLEEP="chunk=60")
    wait_for(lambda: job_state(dsn, "chunk")[0] == "running", what="the job to start")
    doomed.signal(signal.SIGKILL)
    doomed.wait()
    rescuer = start_worker(dsn, "--stages", "chunk", "--exit-when-idle", *FAST)
    assert rescuer.wait(30) == 0, rescuer.output()
    assert effects(dsn) == [("chunk", rescuer.pid)]
    assert job_state(dsn, "chunk") == ("succeeded", 2, 1)
    assert job_state(dsn, "vision") == ("queued", 0, 0)  # next stage enqueued once


def test_sigstopped_worker_past_its_lease_commits_nothing(
    dsn: str, start_worker: StartWorker
) -> None:
    submit_jobs(dsn, 1, stage="chunk")
    paused = start_worker(dsn, "--stages", "chunk", *FAST, RAGLINE_TEST_SLEEP="chunk=2")
    wait_for(lambda: job_state(dsn, "chunk")[0] == "running", what="the job to start")
    paused.signal(signal.SIGSTOP)
    try:
        other = start_worker(dsn, "--stages", "chunk", "--exit-when-idle", *FAST)
        assert other.wait(30) == 0, other.output()
        assert job_state(dsn, "chunk") == ("succeeded", 2, 1)
    finally:
        paused.signal(signal.SIGCONT)
    # Awake again, the paused worker finishes its sleep and tries to commit: refused.
    wait_for(lambda: "lease lost" in paused.output(), what="the paused worker to notice")
    paused.signal(signal.SIGTERM)
    assert paused.wait(30) == 0
    assert effects(dsn) == [("chunk", other.pid)]
    assert len(sql(dsn, "SELECT 1 FROM stage_jobs WHERE stage = 'vision'")) == 1


def test_sigterm_releases_lease_for_another_worker_at_once(
    dsn: str, start_worker: StartWorker
) -> None:
    submit_jobs(dsn, 1, stage="embed")
    # A long lease: the job must move on because it was released, not because it expired.
    first = start_worker(
        dsn,
        "--stages",
        "embed",
        "--lease",
        "120",
        "--grace",
        "0.3",
        "--poll",
        "0.2",
        RAGLINE_TEST_SLEEP="embed=60",
    )
    wait_for(lambda: job_state(dsn, "embed")[0] == "running", what="the job to start")
    first.signal(signal.SIGTERM)
    assert first.wait(20) == 0, first.output()
    assert job_state(dsn, "embed") == ("queued", 0, 0)
    began = time.monotonic()
    second = start_worker(dsn, "--stages", "embed", "--exit-when-idle", "--poll", "0.2")
    assert second.wait(30) == 0, second.output()
    assert time.monotonic() - began < 60  # far below the 120 s lease
    assert effects(dsn) == [("embed", second.pid)]
    assert job_state(dsn, "embed") == ("succeeded", 1, 0)


def test_connections_killed_mid_run_worker_reconnects(dsn: str, start_worker: StartWorker) -> None:
    ids = submit_jobs(dsn, 40)
    worker = start_worker(
        dsn,
        "--exit-when-idle",
        "--concurrency",
        "2",
        *FAST,
        RAGLINE_TEST_SLEEP="parse=0.02,chunk=0.02,vision=0.02,embed=0.02,index=0.02",
    )
    killed = 0
    for threshold in (30, 80, 130):
        wait_for(lambda t=threshold: len(effects(dsn)) >= t, what="progress")  # type: ignore[misc]
        killed += len(
            sql(
                dsn,
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()",
            )
        )
    assert killed >= 3, "the worker had no connections to kill"
    assert worker.wait(60) == 0, worker.output()
    assert "database unavailable" in worker.output() or "lease lost" in worker.output()
    done = sql(dsn, "SELECT status::text, count(*) FROM documents GROUP BY 1")
    assert [(r[0], r[1]) for r in done] == [("ready", len(ids))]
    per_stage = sql(dsn, "SELECT document_id, stage, count(*) FROM test_effects GROUP BY 1, 2")
    assert len(per_stage) == 5 * len(ids) and {r[2] for r in per_stage} == {1}


def test_help_names_every_flag_and_its_variable(tmp_path: Path) -> None:
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "runtime", "--help"],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[2],
    ).stdout
    for flag, var in [
        ("--stages", "RAGLINE_STAGES"),
        ("--concurrency", "RAGLINE_CONCURRENCY"),
        ("--database-url", "DATABASE_URL"),
        ("--lease", "RAGLINE_LEASE_S"),
        ("--exit-when-idle", "RAGLINE_EXIT_WHEN_IDLE"),
    ]:
        assert flag in out and var in out


def test_unknown_stage_is_a_usage_error(dsn: str, start_worker: StartWorker) -> None:
    proc = start_worker(dsn, "--stages", "parse,bogus")
    assert proc.wait(30) == 2
    assert "unknown stage(s) bogus" in proc.output()
