"""Processes run on a host: a stage worker (``python -m runtime --stages ...``) and the
CLI (``submit``), each with its output in a log."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec

from bench.harness.netns import Host, Network
from bench.harness.procs import REPO, kill_and_reap


class HostProcess:
    """``python -m runtime *args`` inside ``host``."""

    def __init__(
        self, net: Network, host: Host, args: Sequence[str], env: dict[str, str], log: Path
    ) -> None:
        self.host = host
        self.log = log
        self._out = log.open("wb")
        argv = [sys.executable, "-m", "runtime", *args]
        self.proc = net.popen(
            host, argv, cwd=REPO, env=env, stdout=self._out, stderr=subprocess.STDOUT
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def terminate(self, timeout_s: float = 15.0) -> int | None:
        """SIGTERM, wait; SIGKILL what does not exit. The exit code (None: killed)."""
        if self.alive():
            self.proc.terminate()
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            return None
        finally:
            self.stop()

    def stop(self) -> None:
        kill_and_reap(self.proc)
        self._out.close()

    def output(self) -> str:
        return self.log.read_text(errors="replace")


class Submitted(msgspec.Struct, frozen=True, kw_only=True):
    """What ``submit --json`` said: the documents that went in, the files refused."""

    ids: list[str]
    refused: list[str]
    code: int


def submit_from(
    net: Network,
    host: Host,
    env: dict[str, str],
    paths: Sequence[Path],
    log: Path,
    timeout_s: float = 120.0,
) -> Submitted:
    """``submit --json paths`` run on ``host``."""
    proc = HostProcess(net, host, ["submit", "--json", *map(str, paths)], env, log)
    try:
        code = proc.proc.wait(timeout_s)
    finally:
        proc.stop()
    said: dict[str, Any] = {}
    for line in reversed(proc.output().splitlines()):
        with contextlib.suppress(ValueError):
            said = json.loads(line)
            break
    return Submitted(
        ids=[str(d["document_id"]) for d in said.get("submitted", [])],
        refused=[str(r) for r in said.get("refused", [])],
        code=code,
    )
