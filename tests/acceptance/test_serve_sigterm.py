"""``serve`` stopped by SIGTERM cleans up as on Ctrl-C (issue 39, item 12): on the
embedded defaults (no ``DATABASE_URL``) it leaves neither its registration as a user of
the cluster nor the embedded PostgreSQL it started running, and its event listener row
is gone. Real processes: ``python -m runtime serve`` and a real SIGTERM."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from bench.harness.db import sql
from bench.harness.serve import free_port, wait_ready
from runtime.db.embedded._proc import proc_identity
from tests.support.embedded_helpers import (
    Child,
    EmbeddedCli,
    cluster_dir,
    postmaster_pid,
    wait_for_exit,
)


@pytest.fixture
def cli(embedded_base: Path, tmp_path: Path) -> Iterator[EmbeddedCli]:
    yield EmbeddedCli("", embedded_base / "data", tmp_path / "logs")


def registrations(data_dir: Path) -> list[str]:
    users = data_dir / "users"
    return sorted(p.name for p in users.iterdir()) if users.is_dir() else []


def serve_then_sigterm(cli: EmbeddedCli) -> tuple[int, str, int]:
    """Start ``serve``, wait until it is ready, SIGTERM it; its exit code, its stderr and
    the pid of the postmaster it ran on."""
    port = free_port()
    running = cli.start("serve", "--port", str(port), log_level="info")
    try:
        wait_ready(f"http://127.0.0.1:{port}", running)
        assert httpx.get(f"http://127.0.0.1:{port}/healthz").json()["events"] is True
        postmaster = postmaster_pid(cli.data_dir)
        assert len(registrations(cli.data_dir)) >= 1
        running.signal(signal.SIGTERM)
        result = running.wait(60)
    finally:
        running.kill()
    return result.code, result.err, postmaster


def test_sigterm_stops_the_embedded_postgres_it_started(cli: EmbeddedCli) -> None:
    code, err, postmaster = serve_then_sigterm(cli)
    # Dies by the signal it was sent (after cleaning up), as service managers expect.
    assert code == -signal.SIGTERM, err
    assert "Application shutdown complete" in err and "Traceback" not in err
    assert registrations(cli.data_dir) == [], "its registration as a user is gone"
    assert proc_identity(postmaster) is None, "the embedded PostgreSQL it started runs on"
    assert not (cluster_dir(cli.data_dir) / "data" / "postmaster.pid").exists()


def test_sigterm_with_another_user_leaves_the_cluster_and_no_listener(cli: EmbeddedCli) -> None:
    """Another process uses the cluster too: SIGTERM removes only this server's traces
    (its registration, its event listener row); the cluster stays up for the other."""
    cli.data_dir.mkdir(parents=True, exist_ok=True)
    other = Child(cli.data_dir)
    try:
        before = registrations(cli.data_dir)
        code, err, postmaster = serve_then_sigterm(cli)
        assert code == -signal.SIGTERM, err
        assert registrations(cli.data_dir) == before
        assert postmaster_pid(cli.data_dir) == postmaster
        assert sql(other.dsn, "SELECT count(*) FROM event_listeners")[0][0] == 0
        other.release()
        wait_for_exit(postmaster, 30)
    finally:
        other.close()
