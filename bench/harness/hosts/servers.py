"""The shared services of a multi-host run, each started inside its own host: a
PostgreSQL listening only on its host's address, and an S3 server (moto)."""

from __future__ import annotations

import contextlib
import glob
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from bench.harness.netns import Host, Network

PG_PORT = 5432
S3_PORT = 5000
#: The cluster's superuser (trusted from the switch's subnet: a throwaway cluster).
PG_USER = "ragline"
#: initdb and postgres refuse to run as root; the distribution's postgres user runs them.
PG_OS_USER = "postgres"
S3_KEY = "testing"


def pg_bin() -> Path | None:
    """The newest PostgreSQL binaries installed on the machine, if any."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"), key=_version)
    return Path(found[-1]).parent if found else None


def _version(path: str) -> int:
    part = Path(path).parts[-3]
    return int(part) if part.isdigit() else 0


def wait_listening(address: str, port: int, timeout_s: float, what: str) -> None:
    """Until a TCP connect to ``address:port`` (from the controller) succeeds."""
    deadline = time.monotonic() + timeout_s
    while True:
        with contextlib.suppress(OSError), socket.create_connection((address, port), 0.5):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} did not listen on {address}:{port}")
        time.sleep(0.1)


def _as_postgres(*argv: str) -> list[str]:
    return ["setpriv", f"--reuid={PG_OS_USER}", f"--regid={PG_OS_USER}", "--clear-groups", *argv]


@contextlib.contextmanager
def postgres_on(net: Network, host: Host, log: Path) -> Iterator[str]:
    """A fresh cluster served on ``host``'s address only; yields its DSN."""
    binaries = pg_bin()
    if binaries is None:
        raise RuntimeError("no PostgreSQL binaries under /usr/lib/postgresql/*/bin")
    # Outside the caller's tree: its parents may not let the postgres user in.
    data = Path(tempfile.mkdtemp(prefix="ragline-hosts-pg-"))
    shutil.chown(data, PG_OS_USER, PG_OS_USER)
    proc: subprocess.Popen[bytes] | None = None
    try:
        initdb = [str(binaries / "initdb"), "-D", str(data), "-U", PG_USER, "--auth=trust"]
        subprocess.run(
            _as_postgres(*initdb, "--no-sync", "-E", "UTF8"), check=True, capture_output=True
        )
        with (data / "pg_hba.conf").open("a") as hba:
            hba.write(f"host all all {net.subnet}.0/24 trust\n")
        argv = [str(binaries / "postgres"), "-D", str(data), "-p", str(PG_PORT)]
        argv += ["-c", f"listen_addresses={host.address}", "-c", f"unix_socket_directories={data}"]
        argv += ["-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "max_connections=200"]
        with log.open("wb") as out:
            proc = net.popen(host, _as_postgres(*argv), stdout=out, stderr=subprocess.STDOUT)
        wait_listening(host.address, PG_PORT, 30, "PostgreSQL")
        yield f"postgresql://{PG_USER}@{host.address}:{PG_PORT}/postgres"
    finally:
        if proc is not None:
            _stop(proc)
        shutil.rmtree(data, ignore_errors=True)


@contextlib.contextmanager
def s3_on(net: Network, host: Host, log: Path) -> Iterator[str]:
    """A moto S3 server on ``host``; yields its ``host:port`` endpoint."""
    argv = [sys.executable, "-m", "moto.server", "-H", host.address, "-p", str(S3_PORT)]
    with log.open("wb") as out:
        proc = net.popen(host, argv, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_listening(host.address, S3_PORT, 30, "moto")
        yield f"{host.address}:{S3_PORT}"
    finally:
        _stop(proc)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGINT (PostgreSQL's fast shutdown; SIGTERM's smart one waits for its clients),
    then SIGKILL if it lingers."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
