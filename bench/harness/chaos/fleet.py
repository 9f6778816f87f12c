"""The chaos run's worker processes: one per role at any time, plus the ones on their way out."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import time
from pathlib import Path

import msgspec

from bench.harness.chaos.config import PIPELINE, ROLES, ChaosConfig
from bench.harness.procs import WorkerProcess
from runtime.errors import one_line


class ChaosProcess(msgspec.Struct, kw_only=True):
    """One worker process of the fleet and the role it plays."""

    role: str
    proc: WorkerProcess
    #: The driver sent it SIGKILL or SIGTERM: its exit is expected.
    signalled: bool = False

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.proc.poll() is None


class Fleet:
    """The worker processes: one per role at any time, plus the ones on their way out."""

    def __init__(self, config: ChaosConfig, env: dict[str, str], logs: Path) -> None:
        self.config = config
        self.env = env
        self.logs = logs
        self.current: dict[str, ChaosProcess] = {}
        self.every: list[ChaosProcess] = []

    def args(self, role: str) -> list[str]:
        c = self.config
        args = ["--pipeline", PIPELINE]
        if ROLES[role]:
            args += ["--stages", str(ROLES[role])]
        args += ["--lease", str(c.lease_s), "--heartbeat", str(c.heartbeat_s)]
        args += ["--rescue-every", str(c.rescue_every_s), "--poll", str(c.poll_s)]
        return [*args, "--grace", str(c.grace_s), "--retry-base", str(c.retry_base_s)]

    def start(self, role: str) -> ChaosProcess:
        log = self.logs / f"worker-{len(self.every):03d}-{role}.log"
        worker = ChaosProcess(role=role, proc=WorkerProcess(self.args(role), dict(self.env), log))
        self.current[role] = worker
        self.every.append(worker)
        return worker

    def start_all(self) -> None:
        for role in ROLES:
            self.start(role)

    def by_pid(self, pid: int) -> ChaosProcess | None:
        return next((w for w in self.current.values() if w.pid == pid), None)

    def stop_all(self, timeout_s: float = 30.0) -> dict[int, int | None]:
        """SIGTERM every live worker and wait; SIGKILL what does not exit. pid → exit code."""
        for worker in self.every:
            if worker.alive():
                with contextlib.suppress(ProcessLookupError):
                    worker.proc.signal(signal.SIGCONT)
                    worker.proc.signal(signal.SIGTERM)
        codes: dict[int, int | None] = {}
        deadline = time.monotonic() + timeout_s
        for worker in self.every:
            try:
                codes[worker.pid] = worker.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:  # killed below
                codes[worker.pid] = None
            worker.proc.stop()
        return codes

    def kill_all(self) -> None:
        for worker in self.every:
            worker.proc.stop()


def last_error(worker: ChaosProcess) -> str:
    """The last line of a worker's log that names an exception, for the crash report."""
    lines = [ln.strip() for ln in worker.proc.output().splitlines()]
    named = [ln for ln in lines if "Error" in ln or "Exception" in ln]
    return one_line(named[-1] if named else (lines[-1] if lines else "no output"))[:300]
