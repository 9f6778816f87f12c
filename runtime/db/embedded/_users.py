"""The flock that serializes start and stop, and the registry of processes using a cluster."""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path

from runtime.db.embedded._proc import proc_identity
from runtime.errors import DatabaseUnavailable

LOCK_POLL_S = 0.05


@contextlib.contextmanager
def file_lock(
    path: Path, timeout_s: float, holder: str = "starting or stopping the embedded PostgreSQL"
) -> Iterator[None]:
    # O_NOFOLLOW: the copy lock lives in /var/tmp, where anyone may plant a symlink.
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise DatabaseUnavailable(
                        f"timed out after {timeout_s:.0f} s waiting for {path}, held by "
                        f"another process {holder}"
                    ) from None
                time.sleep(LOCK_POLL_S)
        yield
    finally:
        os.close(fd)  # closing drops the lock


class Users:
    """The registry of processes using the cluster: one file per acquire."""

    def __init__(self, directory: Path) -> None:
        self._dir = directory

    def register(self, token: str) -> Path:
        self._dir.mkdir(mode=0o700, exist_ok=True)
        path = self._dir / f"{os.getpid()}.{token}"
        path.write_text(proc_identity(os.getpid()) or "")
        return path

    def prune(self) -> int:
        """Forget users whose process is gone; return how many remain."""
        live = 0
        for path in self._dir.glob("*.*"):
            if self._alive(path):
                live += 1
            else:
                path.unlink(missing_ok=True)
        return live

    def clear(self) -> None:
        for path in self._dir.glob("*.*"):
            path.unlink(missing_ok=True)

    def pids(self) -> list[int]:
        """The pids of registered users (call :meth:`prune` first for the live ones)."""
        found = {path.name.partition(".")[0] for path in self._dir.glob("*.*")}
        return sorted(int(pid) for pid in found if pid.isdigit())

    @staticmethod
    def _alive(path: Path) -> bool:
        pid_text = path.name.partition(".")[0]
        if not pid_text.isdigit():
            return False
        identity = proc_identity(int(pid_text))
        return identity is not None and identity == path.read_text().strip()
