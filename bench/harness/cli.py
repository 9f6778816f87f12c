"""Driving ``python -m runtime`` as a user does: subprocesses, exit codes, stdout, stderr.

:class:`Cli` binds one database and one data dir; ``cli.run("status", "--json")`` runs a
command to completion, ``cli.start(...)`` leaves it running (to signal it), and
``cli.run_all(...)`` runs independent commands side by side (each process spends ~3 s
importing, so on two cores running read-only commands in pairs halves the wait).
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec

from bench.harness.procs import REPO

#: Variables that would point a child at other services than the test's own.
_FOREIGN_ENV = (
    "DATABASE_URL",
    "COHERE_API_KEY",
    "COHERE_BASE_URL",
    "QDRANT_URL",
    "QDRANT_API_KEY",
    "MINIO_ENDPOINT",
)

#: Seconds a command may take before the test gives up on it (below pytest's 120 s per
#: test; raise both, e.g. ``-o timeout=600``, on a machine busy with other work).
DEFAULT_TIMEOUT_S = float(os.environ.get("RAGLINE_TEST_CLI_TIMEOUT_S", "100"))


class Result(msgspec.Struct, frozen=True):
    """A finished command: its arguments, exit code and captured output."""

    args: tuple[str, ...]
    code: int
    out: str
    err: str

    def json(self) -> Any:
        """stdout parsed as one JSON document."""
        return json.loads(self.out)

    @property
    def out_lines(self) -> list[str]:
        return self.out.splitlines()

    @property
    def err_lines(self) -> list[str]:
        return [line for line in self.err.splitlines() if line.strip()]

    def __str__(self) -> str:
        # What an assertion message shows when a command did not do what was expected.
        return (
            f"$ {' '.join(self.args)}\n[exit {self.code}]\n"
            f"--- stdout\n{self.out}--- stderr\n{self.err}"
        )


class Running:
    """A command still running; stdout and stderr go to files so nothing blocks on a pipe."""

    def __init__(self, args: Sequence[str], env: dict[str, str], logs: Path, n: int) -> None:
        self.args = tuple(args)
        self._out_path = logs / f"cmd-{n}.out"
        self._err_path = logs / f"cmd-{n}.err"
        with self._out_path.open("wb") as out, self._err_path.open("wb") as err:
            self.proc = subprocess.Popen(args, cwd=REPO, env=env, stdout=out, stderr=err)

    def signal(self, signum: int) -> None:
        self.proc.send_signal(signum)

    def poll(self) -> int | None:
        return self.proc.poll()

    def wait(self, timeout_s: float = DEFAULT_TIMEOUT_S) -> Result:
        try:
            code = self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise
        return Result(self.args, code, self.stdout(), self.stderr())

    def stdout(self) -> str:
        return self._out_path.read_text(errors="replace")

    def stderr(self) -> str:
        return self._err_path.read_text(errors="replace")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


def cli_env(**extra: str) -> dict[str, str]:
    """The caller's environment without ragline settings or service URLs, plus ``extra``."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("RAGLINE_") and k not in _FOREIGN_ENV
    }
    env.update(PYTHONPATH=str(REPO), RAGLINE_VISION="none")
    env.update(extra)
    return env


class Cli:
    """``python -m runtime`` with global options for one database and one data dir."""

    def __init__(self, dsn: str, data_dir: Path, logs: Path, **env: str) -> None:
        self.dsn = dsn
        self.data_dir = data_dir
        self.logs = logs
        self.env = env
        self._count = itertools.count()
        logs.mkdir(parents=True, exist_ok=True)

    def argv(self, *args: str, log_level: str = "warning") -> list[str]:
        return [
            sys.executable,
            "-m",
            "runtime",
            "--database-url",
            self.dsn,
            "--data-dir",
            str(self.data_dir),
            "--log-level",
            log_level,
            *args,
        ]

    def start(self, *args: str, log_level: str = "warning", **env: str) -> Running:
        """Start a command; ``env`` adds variables (e.g. ``RAGLINE_VISION="ocr"``)."""
        full_env = cli_env(**{**self.env, **env})
        return Running(
            self.argv(*args, log_level=log_level), full_env, self.logs, next(self._count)
        )

    def run(
        self,
        *args: str,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        log_level: str = "warning",
        **env: str,
    ) -> Result:
        """Run a command to completion."""
        return self.start(*args, log_level=log_level, **env).wait(timeout_s)

    def run_all(
        self, *commands: Sequence[str], timeout_s: float = DEFAULT_TIMEOUT_S
    ) -> list[Result]:
        """Run independent commands side by side, at most one per CPU (their cost is CPU:
        imports), each within ``timeout_s``; results in the order given."""
        width = os.cpu_count() or 2
        running: list[Running] = []
        results: list[Result] = []
        try:
            for cmd in commands:
                if len(running) - len(results) >= width:
                    results.append(running[len(results)].wait(timeout_s))
                running.append(self.start(*cmd))
            results += [r.wait(timeout_s) for r in running[len(results) :]]
            return results
        finally:
            for r in running:
                r.kill()
