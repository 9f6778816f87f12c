"""The embedded PostgreSQL is supervised: killed mid-ingest it comes back and nothing is
lost; killed under ``serve`` it comes back and the server answers again (503 meanwhile);
``db stop`` does not pull it from under live workers (issue 10, defect 3).

These run on the embedded defaults (no ``DATABASE_URL``), with real processes and a
postmaster killed with SIGKILL.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from bench.harness.db import sql, try_sql
from bench.harness.procs import wait_for
from bench.harness.serve import running_server
from runtime.cli.common import EXIT_FAILED, EXIT_OK
from runtime.db.embedded import EmbeddedPostgres
from tests.support.embedded_helpers import EmbeddedCli, postmaster_pid


@pytest.fixture
def cli(embedded_base: Path, tmp_path: Path) -> Iterator[EmbeddedCli]:
    data = embedded_base / "data"
    yield EmbeddedCli("", data, tmp_path / "logs")


def query(data_dir: Path, statement: str) -> list[asyncpg.Record] | None:
    """``statement`` on the embedded cluster, or None while it is down."""
    return try_sql(EmbeddedPostgres(data_dir).dsn, statement)


def jobs_done(data_dir: Path) -> int:
    rows = query(data_dir, "SELECT count(*) FROM stage_jobs WHERE state = 'succeeded'")
    return int(rows[0][0]) if rows else 0


def test_postmaster_killed_mid_ingest_comes_back_and_nothing_is_lost(cli: EmbeddedCli) -> None:
    running = cli.start("ingest", "samples/", "--json", log_level="info")
    try:
        wait_for(lambda: jobs_done(cli.data_dir) >= 1, 90, "a first finished job")
        crashed = postmaster_pid(cli.data_dir)
        os.kill(crashed, signal.SIGKILL)
        result = running.wait()
    finally:
        running.kill()
    assert result.code == EXIT_OK, result
    summary: dict[str, Any] = result.json()
    assert len(summary["ready"]) == 4 and not summary["failed"], result  # 3 PDFs, 1 Markdown
    assert "the embedded PostgreSQL is back" in result.err, result
    assert "Traceback" not in result.err
    # The server the run ended with is a new one, and the run stopped it when it ended.
    assert not EmbeddedPostgres(cli.data_dir).is_running()
    check = cli.run("status", "--json")  # starts it again, briefly, to look
    assert check.code == EXIT_OK, check
    rows = query_after(cli)
    assert rows["lost"] == 0 and rows["max_attempts"] == 1, rows


def test_postmaster_killed_under_serve_comes_back(cli: EmbeddedCli) -> None:
    with running_server(cli) as server, server.client() as http:
        assert http.get("/v1/documents").status_code == 200
        crashed = postmaster_pid(cli.data_dir)
        os.kill(crashed, signal.SIGKILL)
        answers: list[int] = []

        def served_again() -> bool:
            answers.append(http.get("/v1/documents").status_code)
            back = "the embedded PostgreSQL is back" in server.output()
            return answers[-1] == 200 and back and restarted(cli.data_dir, crashed)

        wait_for(served_again, 60, "the server answering from a new postmaster")
        output = server.output()
    assert set(answers) <= {200, 503}, (answers, output[-3000:])
    assert "Traceback" not in output and " failed: " not in output, output[-3000:]


def restarted(data_dir: Path, crashed: int) -> bool:
    try:
        return postmaster_pid(data_dir) != crashed
    except (OSError, ValueError, IndexError):  # its postmaster.pid is being written
        return False


def query_after(cli: EmbeddedCli) -> dict[str, int]:
    cluster = EmbeddedPostgres(cli.data_dir)
    dsn = cluster.acquire()
    try:
        [row] = sql(
            dsn,
            "SELECT coalesce(sum(lost), 0) AS lost, max(attempts) AS max_attempts FROM stage_jobs",
        )
        return {"lost": int(row["lost"]), "max_attempts": int(row["max_attempts"])}
    finally:
        cluster.release()


def test_db_stop_refuses_under_live_workers_and_force_stops_them_first(
    cli: EmbeddedCli,
) -> None:
    worker = cli.start("--stages", "parse", log_level="info")
    try:
        users = cli.data_dir / "users"
        wait_for(lambda: users.is_dir() and any(users.iterdir()), 60, "the worker to register")
        wait_for(lambda: "worker started" in worker.stderr(), 60, "the worker to start")
        refused = cli.run("db", "stop")
        assert refused.code == EXIT_FAILED, refused
        assert len(refused.err_lines) == 1 and "in use by 1 process" in refused.err, refused
        assert EmbeddedPostgres(cli.data_dir).is_running()
        assert len(list(users.iterdir())) == 1, "the users registry survives"
        forced = cli.run("db", "stop", "--force")
        assert forced.code == EXIT_OK and forced.out.strip() == "stopped", forced
        assert worker.wait(30).code == EXIT_OK  # SIGTERM: it stopped cleanly
        assert not EmbeddedPostgres(cli.data_dir).is_running()
    finally:
        worker.kill()
