"""Worker subprocesses for acceptance tests: ``python -m runtime`` as a user runs it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TEST_PIPELINE = "bench.harness.pipelines:plugin"


class WorkerProcess:
    """``python -m runtime *args`` with its output in ``log``."""

    def __init__(self, args: Sequence[str], env: dict[str, str], log: Path) -> None:
        self.log = log
        self._out = log.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "runtime", *args],
            cwd=REPO,
            env=env,
            stdout=self._out,
            stderr=subprocess.STDOUT,
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def signal(self, signum: int) -> None:
        self.proc.send_signal(signum)

    def wait(self, timeout_s: float = 30) -> int:
        code = self.proc.wait(timeout_s)
        self._out.close()
        return code

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self._out.close()


def worker_env(dsn: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGLINE_")}
    env.update(
        DATABASE_URL=dsn,
        RAGLINE_PIPELINE=TEST_PIPELINE,
        PYTHONPATH=str(REPO),
        RAGLINE_LOG_LEVEL="info",
    )
    env.update(extra)
    return env


#: Starts a worker process: ``start(dsn, *args, **env)``.
StartWorker = Callable[..., WorkerProcess]


@contextmanager
def workers(tmp: Path) -> Iterator[StartWorker]:
    """A factory of worker processes, all killed at the end."""
    started: list[WorkerProcess] = []

    def start(dsn: str, *args: str, **env: str) -> WorkerProcess:
        log = tmp / f"worker-{len(started)}.log"
        proc = WorkerProcess(args, worker_env(dsn, **env), log)
        started.append(proc)
        return proc

    try:
        yield start
    finally:
        for proc in started:
            proc.stop()


def wait_for(check: Callable[[], bool], timeout_s: float = 30, what: str = "condition") -> None:
    """Poll ``check`` (a cheap database read) until true."""
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.05)
