"""Storage full is transient for the job: handed back without counting an attempt, one
clear line, a metric; the worker backs off and finishes once space is back (issue 10,
defect 4).

Real full filesystems: a PostgreSQL tablespace on a 1 MB tmpfs holding the ``chunks``
table (asyncpg ``DiskFullError``, SQLSTATE 53100, from the completion that writes them),
and the asset store on a full tmpfs (ENOSPC when parse stores an image). Both need root
(mount) and a PostgreSQL on this host; elsewhere they skip, saying why.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.harness.cli import Cli, Result, Running
from bench.harness.db import Databases, sql
from bench.harness.procs import wait_for
from runtime.cli.common import EXIT_OK

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")


@contextlib.contextmanager
def tmpfs(path: Path, size: str, owner: str | None = None) -> Iterator[Path]:
    path.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        if owner:
            entry = pwd.getpwnam(owner)
            os.chown(path, entry.pw_uid, entry.pw_gid)
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)
        # The mount point too (one under /tmp outlived every run).
        with contextlib.suppress(OSError):
            path.rmdir()


def fill(directory: Path) -> Path:
    """Write a file until the filesystem is full; returns it (delete it to free space)."""
    filler = directory / "filler"
    with contextlib.suppress(OSError), filler.open("wb") as f:
        while True:
            f.write(b"\0" * 65536)
            f.flush()
    return filler


def storage_full_seen(dsn: str) -> bool:
    rows = sql(dsn, "SELECT count(*) FROM stage_jobs WHERE error_kind = 'storage_full'")
    return bool(rows[0][0])


def free_space_once_full(dsn: str, running: Running, filler: Path, what: str) -> Result:
    """Once a job is handed back as storage full (``what``), delete ``filler`` and let the
    command finish; its result."""
    try:
        wait_for(lambda: storage_full_seen(dsn), 90, what)
        filler.unlink()
        return running.wait()
    finally:
        running.kill()


def nothing_lost(dsn: str) -> None:
    [row] = sql(
        dsn,
        "SELECT count(*) FILTER (WHERE status = 'ready') AS ready, count(*) AS docs FROM documents",
    )
    assert row["ready"] == row["docs"] == 4, dict(row)  # samples/: 3 PDFs, 1 Markdown
    [jobs] = sql(
        dsn, "SELECT max(attempts) AS most, coalesce(sum(lost), 0) AS lost FROM stage_jobs"
    )
    assert jobs["most"] == 1 and jobs["lost"] == 0, dict(jobs)


def test_database_disk_full(databases: Databases, tmp_path: Path) -> None:
    if "127.0.0.1" not in databases.server and "localhost" not in databases.server:
        pytest.skip("the test's PostgreSQL is not on this host: no tablespace on a tmpfs")
    space = f"ragline_full_{secrets.token_hex(3)}"
    name = databases.clone()
    dsn = databases.dsn(name)
    try:
        with tmpfs(Path(f"/tmp/{space}"), "1m", owner="postgres") as mount:
            (mount / "pg").mkdir()
            shutil.chown(mount / "pg", "postgres", "postgres")
            sql(databases.server, f"CREATE TABLESPACE {space} LOCATION '{mount / 'pg'}'")
            try:
                sql(dsn, f"ALTER TABLE chunks SET TABLESPACE {space}")
                filler = fill(mount)
                cli = Cli(dsn, tmp_path / "data", tmp_path / "logs")
                running = cli.start(
                    "ingest", "samples/", log_level="info", RAGLINE_RETRY_BASE_S="0.2"
                )
                result = free_space_once_full(
                    dsn, running, filler, "a job handed back on disk full"
                )
            finally:
                sql(dsn, "ALTER TABLE chunks SET TABLESPACE pg_default")
                sql(databases.server, f"DROP TABLESPACE IF EXISTS {space}")
        assert result.code == EXIT_OK, result
        assert "Traceback" not in result.err
        assert "storage full, output not written" in result.err or "storage full:" in result.err
        assert "attempt not counted" in result.err, result
        nothing_lost(dsn)
    finally:
        databases.drop(name)


def test_asset_store_full(dsn: str, tmp_path: Path) -> None:
    cli = Cli(dsn, tmp_path / "data", tmp_path / "logs")
    with tmpfs(tmp_path / "data" / "assets", "4m") as assets:
        submitted = cli.run("submit", "samples/")
        assert submitted.code == EXIT_OK, submitted
        filler = fill(assets)
        worker = cli.start("--exit-when-idle", log_level="info", RAGLINE_RETRY_BASE_S="0.2")
        result = free_space_once_full(dsn, worker, filler, "a parse handed back on ENOSPC")
        assert result.code == EXIT_OK, result
        assert "storage full: OSError: [Errno 28] No space left on device" in result.err, result
        assert "Traceback" not in result.err
        nothing_lost(dsn)


def test_submit_into_a_full_asset_store(dsn: str, tmp_path: Path) -> None:
    cli = Cli(dsn, tmp_path / "data", tmp_path / "logs")
    with tmpfs(tmp_path / "data" / "assets", "1m") as assets:
        fill(assets)
        result = cli.run("submit", "samples/")
        assert result.code == 1, result
        assert len(result.err_lines) == 1 and "storage full while storing" in result.err, result
        assert "Traceback" not in result.err
        left = [p.name for p in assets.rglob("*") if p.is_file() and p.name != "filler"]
        assert left == [], left  # the unfinished write was removed
    assert sql(dsn, "SELECT count(*) FROM documents")[0][0] == 0


def test_vector_index_disk_full(dsn: str, tmp_path: Path) -> None:
    """qdrant-edge writes through sparse memory mappings: on a full disk that write was
    SIGBUS, which killed the worker and cost its jobs an attempt. Now the index job waits
    for space like any other storage-full job."""
    cli = Cli(dsn, tmp_path / "data", tmp_path / "logs")
    with tmpfs(tmp_path / "data" / "qdrant", "400m") as index:
        first = cli.run("ingest", "samples/sourdough.pdf")
        assert first.code == EXIT_OK, first
        filler = fill(index)
        rest = [f"samples/{n}" for n in ("lighthouses.pdf", "rust-borrow-checker.pdf", "tides.md")]
        assert cli.run("submit", *rest).code == EXIT_OK
        worker = cli.start("--exit-when-idle", log_level="info", RAGLINE_RETRY_BASE_S="0.2")
        result = free_space_once_full(dsn, worker, filler, "an index job handed back, disk full")
    assert result.code == EXIT_OK, result
    assert "Traceback" not in result.err
    assert "the embedded vector index needs" in result.err, result
    nothing_lost(dsn)
