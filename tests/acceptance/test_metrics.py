"""A worker started with --metrics-port serves Prometheus metrics that move with its work."""

from __future__ import annotations

import signal
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.harness.fleet import submit_jobs
from bench.harness.procs import WorkerProcess, wait_for, workers
from bench.harness.serve import free_port


def scrape(port: int) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
            return str(r.read().decode())
    except OSError:
        return ""


def metric(text: str, name: str, stage: str) -> float:
    for line in text.splitlines():
        if line.startswith(f'{name}{{stage="{stage}"') and not line.startswith("#"):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


@pytest.fixture
def worker(dsn: str, tmp_path: Path) -> Iterator[tuple[WorkerProcess, int, list[uuid.UUID]]]:
    ids = submit_jobs(dsn, 4)
    port = free_port()
    with workers(tmp_path) as start:
        proc = start(dsn, "--metrics-port", str(port), "--poll", "0.2", "--grace", "0.5")
        yield proc, port, ids


def test_metrics_count_jobs_per_stage(worker: tuple[WorkerProcess, int, list[uuid.UUID]]) -> None:
    proc, port, ids = worker
    wait_for(
        lambda: metric(scrape(port), "ragline_jobs_succeeded_total", "index") >= len(ids),
        what="all documents to be indexed, as the metrics see it",
    )
    text = scrape(port)
    for stage in ("parse", "chunk", "vision", "embed", "index"):
        assert metric(text, "ragline_jobs_claimed_total", stage) >= len(ids)
        assert metric(text, "ragline_jobs_succeeded_total", stage) == len(ids)
    assert "ragline_job_duration_seconds_bucket" in text
    wait_for(lambda: "ragline_queue_depth" in scrape(port), what="the queue-depth gauge")
    proc.signal(signal.SIGTERM)
    assert proc.wait(20) == 0, proc.output()
