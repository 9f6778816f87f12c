"""One budget for the fleet: three worker processes share ``RAGLINE_EMBED_RPM`` against a
Cohere-compatible server that answers 429 above it. The fleet calls at the budget (±10%),
not three times it, and almost never learns the limit from a 429."""

from __future__ import annotations

from pathlib import Path

from bench.harness.fake_cohere import FakeCohere
from bench.harness.fleet import run_fleet

RPM = 900.0
#: About 8 s of calls at the budget.
JOBS = 120


def test_three_processes_share_one_budget(dsn: str, tmp_path: Path) -> None:
    with FakeCohere(dims=8, rate_limit_per_s=RPM / 60) as server:
        run = run_fleet(dsn, server.base_url, processes=3, rpm=RPM, jobs=JOBS, log_dir=tmp_path)
    assert run.calls >= JOBS
    assert 0.90 <= run.share_of_budget <= 1.10, run
    assert run.share_429 <= 0.02, run
