"""A fleet of worker processes calling one Cohere-compatible server through the engine's
provider gate (``bench.harness.pipelines:provider_plugin``: one embed call per job), for
the shared-budget test and ``bench/provider.py``."""

from __future__ import annotations

import asyncio
import json
import urllib.request
import uuid
from collections.abc import Mapping
from pathlib import Path

import asyncpg
import msgspec

from bench.harness.fake_cohere import Stats
from bench.harness.procs import WorkerProcess, worker_env
from runtime.jobs.documents import DocumentRepository
from runtime.models import NewDocument

PROVIDER_PIPELINE = "bench.harness.pipelines:provider_plugin"


class FleetRun(msgspec.Struct, frozen=True, kw_only=True):
    """A fleet's run: its size and budget, and the fake server's counters afterwards."""

    processes: int
    rpm: float
    stats: Stats

    @property
    def calls(self) -> int:
        return self.stats.requests.get("embed", 0)

    @property
    def rate_limited(self) -> int:
        return self.stats.statuses.get("429", 0)

    @property
    def span_s(self) -> float:
        """First to last call."""
        return self.stats.last_request_at - self.stats.first_request_at

    @property
    def calls_per_min(self) -> float:
        return 60.0 * (self.calls - 1) / self.span_s if self.span_s > 0 else 0.0

    @property
    def share_of_budget(self) -> float:
        return self.calls_per_min / self.rpm

    @property
    def share_429(self) -> float:
        return self.rate_limited / self.calls if self.calls else 0.0


def submit_jobs(dsn: str, n: int, stage: str = "parse") -> list[uuid.UUID]:
    """``n`` stand-in documents queued at ``stage`` (for pipelines that never read them)."""

    async def go() -> list[uuid.UUID]:
        async with asyncpg.create_pool(dsn, min_size=1, max_size=2) as pool:
            docs = DocumentRepository(pool)
            out = []
            for i in range(n):
                new = NewDocument(
                    filename=f"doc{i}.pdf",
                    media_type="application/pdf",
                    byte_size=1,
                    sha256=uuid.uuid4().hex,
                )
                out.append((await docs.submit(new, stage)).document_id)
            return out

    return asyncio.run(go())


def reset_server(base_url: str) -> None:
    request = urllib.request.Request(f"{base_url}/_reset", data=b"{}", method="POST")
    with urllib.request.urlopen(request, timeout=10):
        pass


def server_stats(base_url: str) -> Stats:
    with urllib.request.urlopen(f"{base_url}/_stats", timeout=10) as answer:
        return msgspec.convert(json.load(answer), Stats)


def start_fleet(
    dsn: str, base_url: str, processes: int, log_dir: Path, **env: str
) -> list[WorkerProcess]:
    """``processes`` × ``python -m runtime --stages embed --exit-when-idle``."""
    settings = {
        "RAGLINE_PIPELINE": PROVIDER_PIPELINE,
        "COHERE_BASE_URL": base_url,
        "RAGLINE_CONCURRENCY": "embed=4",
        "RAGLINE_EXIT_WHEN_IDLE": "true",
        **env,
    }
    return [
        WorkerProcess(
            ["--stages", "embed"], worker_env(dsn, **settings), log_dir / f"fleet-{i}.log"
        )
        for i in range(processes)
    ]


def run_fleet(
    dsn: str,
    base_url: str,
    *,
    processes: int,
    rpm: float,
    jobs: int,
    log_dir: Path,
    timeout_s: float = 180,
    env: Mapping[str, str] | None = None,
) -> FleetRun:
    """Queue ``jobs`` embed jobs, run the fleet until they are done, and read the
    server's counters (calls, 429s, first to last call)."""
    submit_jobs(dsn, jobs, "embed")
    reset_server(base_url)
    fleet = start_fleet(
        dsn, base_url, processes, log_dir, RAGLINE_EMBED_RPM=f"{rpm:g}", **dict(env or {})
    )
    try:
        for proc in fleet:
            code = proc.wait(timeout_s)
            if code != 0:
                raise RuntimeError(f"worker exited {code}: {proc.output()[-2000:]}")
    finally:
        for proc in fleet:
            proc.stop()
    return FleetRun(processes=processes, rpm=rpm, stats=server_stats(base_url))
