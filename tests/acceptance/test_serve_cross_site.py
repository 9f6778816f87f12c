"""No cross-site writes against the default server: a page on another origin (the same
host at another port, and another host name for the same address), opened in headless
Chromium, tries every write a page can send without a preflight; nothing changes. And the
server answers only the hosts it serves (DNS rebinding).

``ragline serve`` runs in a subprocess on its defaults (no tokens, 127.0.0.1); the
attacker's page is served by a plain HTTP server started by the test.
"""

from __future__ import annotations

import http.server
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.harness.cli import Cli
from bench.harness.db import sql
from bench.harness.procs import REPO
from bench.harness.serve import Server, running_server
from runtime.cli.common import EXIT_OK
from tests.support.browser import needs_chromium

SAMPLES = REPO / "samples"

ATTACK = """<!doctype html><html><body><script>
const target = "%(target)s";
async function attack() {
  const tries = [
    fetch(target + "/v1/reprocess", {method: "POST", mode: "no-cors",
      headers: {"Content-Type": "text/plain"},
      body: JSON.stringify({"from": "embed", "all": true})}),
    fetch(target + "/v1/documents/%(doc)s/retry", {method: "POST", mode: "no-cors"}),
    (() => { const form = new FormData();
      form.append("file", new Blob(["planted by another site"], {type: "text/plain"}),
                  "planted.txt");
      return fetch(target + "/v1/documents", {method: "POST", mode: "no-cors", body: form}); })(),
    fetch(target + "/v1/documents?collection=planted", {method: "POST", mode: "no-cors",
      headers: {"Content-Type": "text/plain"}, body: "planted by another site"}),
  ];
  await Promise.allSettled(tries);
  document.title = "done";
}
attack();
</script></body></html>"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class AttackerSite:
    """A page on ``http://127.0.0.1:<its own port>``: another origin, the same site."""

    def __init__(self, page: str) -> None:
        body = page.encode()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                return None

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def cli(dsn: str, tmp_path: Path) -> Cli:
    return Cli(dsn, tmp_path / "data", tmp_path / "logs")


def state(dsn: str) -> list[Any]:
    """Every document and job, as a tuple each: any write shows here."""
    docs = sql(dsn, "SELECT id, filename, generation, status::text FROM documents ORDER BY id")
    jobs = sql(dsn, "SELECT id, stage, state::text, generation FROM stage_jobs ORDER BY id")
    return [tuple(r) for r in docs] + [tuple(r) for r in jobs]


@pytest.fixture
def stack(cli: Cli) -> Iterator[Server]:
    done = cli.run("submit", str(SAMPLES / "sourdough.pdf"), str(SAMPLES / "tides.md"))
    assert done.code == EXIT_OK, done
    with running_server(cli) as server:
        yield server


@needs_chromium
@pytest.mark.parametrize("target_host", ["127.0.0.1", "localhost"])
def test_a_page_of_another_origin_changes_nothing(
    driver: Any, stack: Server, dsn: str, target_host: str
) -> None:
    from selenium.webdriver.support.ui import WebDriverWait

    doc = sql(dsn, "SELECT id::text FROM documents LIMIT 1")[0][0]
    target = stack.url.replace("127.0.0.1", target_host)
    before = state(dsn)
    site = AttackerSite(ATTACK % {"target": target, "doc": doc})
    try:
        driver.get(site.url)
        WebDriverWait(driver, 30).until(lambda d: d.title == "done")
    finally:
        site.close()
    assert state(dsn) == before


def raw_status(server: Server, host: str) -> int:
    port = int(server.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(f"GET /v1/stages HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        head = s.recv(64).decode("latin-1")
    return int(head.split()[1])


def test_only_the_hosts_it_serves_are_answered(stack: Server) -> None:
    port = stack.url.rsplit(":", 1)[1]
    assert raw_status(stack, f"127.0.0.1:{port}") == 200
    assert raw_status(stack, f"localhost:{port}") == 200
    assert raw_status(stack, f"[::1]:{port}") == 200
    assert raw_status(stack, f"rebound.example:{port}") == 400
    assert raw_status(stack, "rebound.example") == 400


def test_writes_from_its_own_pages_and_from_scripts_still_work(stack: Server, dsn: str) -> None:
    """The web view's own origin with its token, and a client that is not a browser."""
    import re

    with stack.client() as http:
        page = http.get("/").text
        token = re.search(r'name="csrf-token" content="([0-9a-f]+)"', page)
        assert token is not None, page[:500]
        own = {"Origin": stack.url, "Sec-Fetch-Site": "same-origin"}
        body = {"from": "chunk", "all": True}
        assert http.post("/v1/reprocess", json=body, headers=own).status_code == 403
        with_token = {**own, "X-CSRF-Token": token.group(1)}
        assert http.post("/v1/reprocess", json=body, headers=with_token).status_code == 202
        assert http.post("/v1/reprocess", json=body).status_code == 202  # curl, a script
        as_text = http.post(
            "/v1/reprocess",
            content=b'{"from": "chunk", "all": true}',
            headers={"Content-Type": "text/plain"},
        )
        assert as_text.status_code == 415, as_text.text
    assert {r[0] for r in sql(dsn, "SELECT generation FROM documents")} == {3}
