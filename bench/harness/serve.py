"""``ragline serve`` as a subprocess on a free port, for API, browser and bench runs."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from bench.harness.cli import Cli, Running

#: Seconds a fresh server may take to import, migrate and listen (a busy 2-core machine).
START_TIMEOUT_S = 60.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    def __init__(self, proc: Running, url: str, log: Path) -> None:
        self.proc = proc
        self.url = url
        self.log = log

    def client(self, **kwargs: object) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=30, **kwargs)  # type: ignore[arg-type]

    def output(self) -> str:
        return self.proc.stderr() + self.proc.stdout()


def wait_ready(url: str, proc: Running) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"serve exited early:\n{proc.stderr()}")
        try:
            if httpx.get(url + "/readyz", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"serve not ready after {START_TIMEOUT_S} s:\n{proc.stderr()}")


@contextmanager
def running_server(cli: Cli, *args: str, **env: str) -> Iterator[Server]:
    """Start ``serve`` on ``cli``'s database and data dir; stop it (SIGKILL) afterwards."""
    port = free_port()
    proc = cli.start("serve", "--port", str(port), *args, log_level="info", **env)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, proc)
        yield Server(proc, url, cli.logs)
    finally:
        proc.kill()
