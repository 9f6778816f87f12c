"""What the CLI exits with where a user trips: bad search arguments, a bad pipeline name
and an unmigrated database under ``--no-auto-migrate`` are one line and exit 2; Ctrl-C
during a database outage (a real TCP proxy between ingest and PostgreSQL, cut mid-run)
exits 130; ``ingest`` runs every stage whatever ``RAGLINE_STAGES`` says."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from bench.harness.cli import Cli
from bench.harness.db import Databases, sql
from bench.harness.procs import wait_for
from runtime.cli.common import EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE
from tests.support.tcp_proxy import TcpProxy, through, upstream


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        (("search", "-k", "-5", "lens"), {}, "-k/--limit must be from 1"),
        (("search", "-k", "0", "lens"), {}, "-k/--limit must be from 1"),
        (("search", "   "), {}, "the query is empty"),
        (("search", os.fsdecode(b"caf\xe9")), {}, "not valid UTF-8: caf\\xe9"),
        (("ingest", "samples/"), {"RAGLINE_PIPELINE": "bad:x"}, "cannot import pipeline module"),
    ],
)
def test_refused_with_one_line(
    dsn: str, tmp_path: Path, args: tuple[str, ...], env: dict[str, str], expected: str
) -> None:
    result = Cli(dsn, tmp_path / "data", tmp_path / "logs", **env).run(*args)
    assert result.code == EXIT_USAGE, result
    assert len(result.err_lines) == 1 and expected in result.err, result
    assert "Traceback" not in result.err


def test_ctrl_c_during_a_database_outage_exits_130(dsn: str, tmp_path: Path) -> None:
    with TcpProxy(upstream(dsn)) as proxy:
        cli = Cli(through(proxy, dsn), tmp_path / "data", tmp_path / "logs")
        running = cli.start("ingest", "samples/", log_level="info", RAGLINE_GRACE_S="1")
        try:
            done = "SELECT count(*) FROM stage_jobs WHERE state = 'succeeded'"
            wait_for(lambda: sql(dsn, done)[0][0] >= 1, 90, "a first finished job")
            proxy.cut()
            wait_for(lambda: "database unavailable" in running.stderr(), 30, "the outage")
            running.signal(signal.SIGINT)
            result = running.wait(60)
        finally:
            running.kill()
    assert result.code == EXIT_INTERRUPTED, result
    assert "Traceback" not in result.err
    assert "interrupted: run the same command again to resume" in result.err, result


def test_no_auto_migrate_on_an_unmigrated_database(databases: Databases, tmp_path: Path) -> None:
    with databases.fresh(migrated=False) as dsn:
        cli = Cli(dsn, tmp_path / "data", tmp_path / "logs")
        result = cli.run("--no-auto-migrate", "status")
        assert result.code == EXIT_USAGE, result
        assert len(result.err_lines) == 1 and "run 'ragline migrate'" in result.err, result


def test_ingest_runs_every_stage_whatever_ragline_stages_says(dsn: str, tmp_path: Path) -> None:
    """An environment shared with a split-stage deployment used to make ingest hang."""
    cli = Cli(dsn, tmp_path / "data", tmp_path / "logs", RAGLINE_STAGES="parse")
    result = cli.run("ingest", "samples/sourdough.pdf", timeout_s=90)
    assert result.code == EXIT_OK, result
    assert "ready: 1  failed: 0" in result.out, result
