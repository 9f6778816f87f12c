"""Fixtures and helpers for tests of the embedded PostgreSQL (runtime.db.embedded)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec

from bench.harness.cli import Cli
from bench.harness.db import sql
from runtime.db.embedded import EmbeddedPostgres
from runtime.db.embedded._accounts import account
from runtime.db.embedded._proc import proc_identity

REPO_ROOT = Path(__file__).resolve().parents[2]


class EmbeddedCli(Cli):
    """``python -m runtime`` on the embedded PostgreSQL of its data dir."""

    def argv(self, *args: str, log_level: str = "warning") -> list[str]:
        full = super().argv(*args, log_level=log_level)
        at = full.index("--database-url")
        return full[:at] + full[at + 2 :]


# A second ragline process: acquires the cluster, reports its DSN, then releases on demand.
_CHILD_CODE = """
import json, pathlib, sys
from runtime.db.embedded import EmbeddedPostgres
cluster = EmbeddedPostgres(pathlib.Path(sys.argv[1]))
print(json.dumps({"dsn": cluster.acquire()}), flush=True)
for line in sys.stdin:
    if line.strip() == "release":
        cluster.release()
        print(json.dumps({"released": True}), flush=True)
"""


class UnprivilegedPython(msgspec.Struct, frozen=True):
    """A Python that user postgres can run, and the PYTHONPATH that gives it our packages."""

    executable: str
    path: str


def python_for_postgres_user() -> UnprivilegedPython | None:
    """This Python, or the system's of the same minor version with this venv's packages
    (the same ABI), if user postgres can run it and import ragline; else None.

    Often this interpreter lives under /root (mode 0700), out of postgres's reach.
    """
    if os.geteuid() != 0 or shutil.which("runuser") is None:
        return None
    packages = os.pathsep.join(
        dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib"))
    )
    system = f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"
    for candidate in (UnprivilegedPython(sys.executable, ""), UnprivilegedPython(system, packages)):
        if _postgres_can_import(candidate):
            return candidate
    return None


def _postgres_can_import(python: UnprivilegedPython) -> bool:
    path = os.pathsep.join(filter(None, [str(REPO_ROOT), python.path]))
    code = "import asyncpg, msgspec, runtime.db.embedded"
    with contextlib.suppress(OSError):
        probe = subprocess.run(
            ["runuser", "-u", "postgres", "--", python.executable, "-c", code],
            cwd="/",
            env={**os.environ, "PYTHONPATH": path},
            capture_output=True,
            check=False,
            timeout=30,
        )
        return probe.returncode == 0
    return False


def run_python_as_postgres(
    python: UnprivilegedPython, code: str, *args: str
) -> subprocess.CompletedProcess[str]:
    """Run ``code`` as user postgres with ``python`` (see ``python_for_postgres_user``)."""
    path = os.pathsep.join(filter(None, [str(REPO_ROOT), python.path]))
    return subprocess.run(
        ["runuser", "-u", "postgres", "--", python.executable, "-c", code, *args],
        cwd="/",
        env={**os.environ, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


class Child:
    """A subprocess using the cluster under ``data_dir`` (see ``_CHILD_CODE``)."""

    def __init__(
        self,
        data_dir: Path,
        *,
        wait: bool = True,
        python: UnprivilegedPython | None = None,
        **popen: Any,
    ) -> None:
        executable, path = (python.executable, python.path) if python else (sys.executable, "")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), path]))}
        self.proc = subprocess.Popen(
            [executable, "-c", _CHILD_CODE, str(data_dir)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd="/",
            env=env,
            **popen,
        )
        self.dsn = ""
        if wait:
            self.wait_ready()

    def wait_ready(self) -> str:
        """Wait for the child's acquire to return; its DSN."""
        self.dsn = self._read()["dsn"]
        return self.dsn

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line, f"child exited with {self.proc.wait()} before answering"
        message: dict[str, Any] = json.loads(line)
        return message

    def release(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("release\n")
        self.proc.stdin.flush()
        assert self._read() == {"released": True}

    def kill(self) -> None:
        """SIGKILL: the child dies without releasing (a crash)."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.kill()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()


def wait_for_exit(pid: int, timeout_s: float = 10.0) -> None:
    """Poll until process ``pid`` is gone (it is not our child, so it cannot be waited for)."""
    deadline = time.monotonic() + timeout_s
    while proc_identity(pid) is not None:
        assert time.monotonic() < deadline, f"process {pid} still alive after {timeout_s} s"
        time.sleep(0.02)


def postmaster_pid(data_dir: Path) -> int:
    """The pid the running server wrote to its postmaster.pid."""
    return int((cluster_dir(data_dir) / "data" / "postmaster.pid").read_text().split()[0])


def process_uid(pid: int) -> int:
    """The real uid of process ``pid``."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[1])
    raise AssertionError(f"no Uid line for process {pid}")


def user_exists(name: str) -> bool:
    return account(name) is not None


def outside_location(data_dir: Path) -> Path:
    """Where the README says the cluster goes when its user cannot reach ``data_dir``."""
    digest = hashlib.sha256(os.fsencode(os.path.realpath(data_dir))).hexdigest()[:16]
    return Path("/var/tmp") / f"ragline-pg-{digest}"


def cluster_dir(data_dir: Path) -> Path:
    """The cluster's directory: the one ``pg.location`` records, else ``<data_dir>/pg``."""
    location = data_dir / "pg.location"
    return Path(location.read_text().strip()) if location.exists() else data_dir / "pg"


def discard_cluster(data_dir: Path) -> None:
    """Stop the cluster of ``data_dir`` and remove any directory it had outside it."""
    EmbeddedPostgres(data_dir).stop()
    for outside in {cluster_dir(data_dir), outside_location(data_dir)}:
        if outside.parent == Path("/var/tmp"):
            shutil.rmtree(outside, ignore_errors=True)


def fetchval(dsn: str, query: str) -> Any:
    """The first value ``query`` returns on a fresh connection to ``dsn`` (None if no row)."""
    rows = sql(dsn, query)
    return rows[0][0] if rows else None


@contextlib.contextmanager
def scratch_base() -> Iterator[Path]:
    # pytest's tmp_path lives under /tmp/pytest-of-root (mode 0700): as root, the server
    # runs as user postgres, who could not reach a data dir there.
    # tmpfs when there is one: initdb's fsyncs and copying clusters are much faster there.
    shm = "/dev/shm" if os.access("/dev/shm", os.W_OK | os.X_OK) else None
    base = Path(tempfile.mkdtemp(prefix="ragline-embedded-", dir=shm))
    base.chmod(0o711)
    try:
        yield base
    finally:
        # Every data dir, at any depth (some tests put one under a locked directory).
        for lock in sorted(base.rglob("lock")):
            discard_cluster(lock.parent)
        shutil.rmtree(base)


class LockedPgserver(msgspec.Struct, frozen=True):
    """A copy of the pgserver package that only root can reach, and where ragline copies it."""

    #: Put first on a child's PYTHONPATH, it makes the child use this pgserver.
    site_packages: Path
    #: The copy under /var/tmp that the README says ragline makes and runs.
    copy: Path


def pginstall_leftovers(copy: Path) -> list[Path]:
    """Temporary or replaced copies next to ``copy`` (there should be none)."""
    return sorted(copy.parent.glob(f".{copy.name}*"))


def executable_of(pid: int) -> Path:
    """The program file process ``pid`` runs."""
    return Path(os.readlink(f"/proc/{pid}/exe"))
