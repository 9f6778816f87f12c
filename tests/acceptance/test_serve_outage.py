"""The HTTP API through a database outage: a request that finds PostgreSQL out of reach
is answered 503 with ``Retry-After`` (not 500), the server lives on and serves again once
the database is back, and the project's client, which asks again after a 503, rides the
outage out; an MCP tool says the same in one line; an upload whose commit's answer is
lost keeps its bytes. A real TCP proxy stands between the server and PostgreSQL, cut and
resumed (or losing one answer).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx
import httpx2
import pytest
from mcp import Client as McpClient
from mcp.client.streamable_http import streamable_http_client

from bench.harness.cli import Cli
from bench.harness.db import sql
from bench.harness.procs import wait_for
from bench.harness.serve import Server, running_server
from stages.client import Client
from stages.serve.problems import DATABASE_RETRY_AFTER_S, UNAVAILABLE
from tests.support.tcp_proxy import TcpProxy, through, upstream

SAMPLE = Path(__file__).resolve().parents[2] / "samples" / "tides.md"
DOORS = [
    ("/v1/documents", "get"),
    ("/v1/documents", "post"),
    ("/v1/documents/{doc}", "get"),
    ("/v1/search", "get"),
    ("/v1/stages", "get"),
]


@pytest.fixture
def proxied(dsn: str, tmp_path: Path) -> Iterator[tuple[TcpProxy, Server]]:
    with TcpProxy(upstream(dsn)) as proxy:
        cli = Cli(through(proxy, dsn), tmp_path / "data", tmp_path / "logs")
        with running_server(cli) as server:
            yield proxy, server


def upload(http: httpx.Client, path: Path) -> httpx.Response:
    disposition = {"Content-Disposition": f'attachment; filename="{path.name}"'}
    return http.post("/v1/documents", content=path.read_bytes(), headers=disposition)


def test_a_request_during_an_outage_is_503_with_retry_after(
    proxied: tuple[TcpProxy, Server],
) -> None:
    proxy, server = proxied
    with server.client() as http:
        assert http.get("/v1/documents").status_code == 200
        # The schema says so of every route that reads the database.
        paths = http.get("/v1/schema/openapi.json").json()["paths"]
        for path, method in DOORS:
            said = paths[path][method]["responses"]["503"]["description"]
            assert "Retry-After" in said, (path, method, said)
        assert "503" not in paths["/healthz"]["get"]["responses"]
        proxy.cut()
        answers = {
            "list": http.get("/v1/documents"),
            "read": http.get(f"/v1/documents/{uuid.uuid4()}"),
            "search": http.get("/v1/search", params={"q": "tides"}),
            "upload": upload(http, SAMPLE),
        }
        for door, r in answers.items():
            assert r.status_code == 503, (door, r.status_code, r.text)
            assert r.headers["retry-after"] == str(DATABASE_RETRY_AFTER_S), door
            assert r.json()["detail"] == UNAVAILABLE, door
        proxy.resume()
        wait_for(lambda: http.get("/v1/documents").status_code == 200, 30, "the database back")
        accepted = upload(http, SAMPLE)
        assert accepted.status_code == 202 and accepted.json()["created"], accepted.text
    assert server.proc.poll() is None
    output = server.output()
    assert "database unavailable (" in output, output[-3000:]
    assert "Traceback" not in output and " failed: " not in output, output[-3000:]


def test_the_client_rides_out_an_outage(proxied: tuple[TcpProxy, Server]) -> None:
    proxy, server = proxied
    with Client(server.url) as client:
        proxy.cut()
        back = threading.Timer(2 * DATABASE_RETRY_AFTER_S, proxy.resume)
        back.start()
        try:
            accepted = client.upload(SAMPLE)
        finally:
            back.join()
        assert client.get(accepted.id).filename == SAMPLE.name
        assert [d.id for d in client.documents()] == [accepted.id]
    # The upload met the outage (and was answered 503) before it went through.
    assert "POST /v1/documents: database unavailable (" in server.output()


def test_an_mcp_tool_during_an_outage_says_so_in_one_line(
    proxied: tuple[TcpProxy, Server],
) -> None:
    proxy, server = proxied

    async def call(tool: str) -> tuple[bool, str]:
        async with (
            httpx2.AsyncClient(timeout=60) as http,
            McpClient(streamable_http_client(server.url + "/mcp", http_client=http)) as client,
        ):
            result = await client.call_tool(tool, {})
        return result.is_error, getattr(result.content[0], "text", "")

    failed, _ = anyio.run(call, "list_documents")
    assert not failed
    proxy.cut()
    assert anyio.run(call, "list_documents") == (True, f"list_documents: {UNAVAILABLE}")
    proxy.resume()
    wait_for(lambda: not anyio.run(call, "list_documents")[0], 30, "the database back")


def test_an_upload_whose_commit_answer_is_lost_keeps_its_file(dsn: str, tmp_path: Path) -> None:
    """The document's COMMIT reaches PostgreSQL and its answer is lost: the server cannot
    know whether the document exists, answers 503, and keeps the uploaded bytes, so the
    upload asked again finds the document whole and it is processed."""
    with TcpProxy(upstream(dsn)) as proxy:
        cli = Cli(through(proxy, dsn, tls=False), tmp_path / "data", tmp_path / "logs")
        with running_server(cli) as server, server.client() as http:
            proxy.lose_reply_after(b"COMMIT")
            lost = upload(http, SAMPLE)
            assert lost.status_code == 503, lost.text
            again = upload(http, SAMPLE)
            assert again.status_code == 200 and not again.json()["created"], again.text
            doc = again.json()["id"]
        assert cli.run("--exit-when-idle", timeout_s=110).code == 0
        [row] = sql(dsn, "SELECT status::text, error FROM documents WHERE id = $1::uuid", doc)
    assert row["status"] == "ready", dict(row)
