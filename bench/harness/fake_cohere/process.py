"""The fake Cohere server in a child process (its JSON work then does not share the
caller's GIL); its counters and controls over HTTP."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import httpx


class FakeCohereProcess:
    """``python -m bench.harness.fake_cohere --port 0 *args``; ``url`` is where it listens."""

    def __init__(self, *args: str) -> None:
        cmd = [sys.executable, "-m", "bench.harness.fake_cohere", "--port", "0", *args]
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
        assert self.proc.stdout is not None
        self.url = self.proc.stdout.readline().strip()
        if not self.url.startswith("http"):
            self.proc.kill()
            raise RuntimeError("fake Cohere server did not start")
        self.http = httpx.Client(base_url=self.url, timeout=10)

    def stats(self) -> dict[str, Any]:
        stats: dict[str, Any] = self.http.get("/_stats").json()
        return stats

    def reset(self) -> None:
        self.http.post("/_reset", json={}).raise_for_status()

    def outage(self, status: int | None) -> None:
        self.http.post("/_outage", json={"status": status}).raise_for_status()

    def close(self) -> None:
        self.http.close()
        self.proc.terminate()
        self.proc.wait(timeout=10)
