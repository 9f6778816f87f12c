"""The MCP server driven by the official SDK's own client, as an agent drives it: over stdio
(``python -m runtime mcp`` started by the client as a subprocess) and over streamable HTTP
(``python -m runtime serve``'s ``/mcp``, behind its bearer tokens). Each lists the tools,
submits documents (by path, by content), lets a worker (``--exit-when-idle``) make them
ready, then searches, reads a document, a chunk and a page; bad arguments and a bad token
get MCP errors of one line. Real PostgreSQL, real subprocesses, no fakes."""

from __future__ import annotations

import base64
import contextlib
import io
import json
import re
import signal
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from bench.harness.cli import Cli, cli_env
from bench.harness.db import Databases
from bench.harness.serve import Server, running_server
from tests.support.embedded_helpers import EmbeddedCli, postmaster_pid, wait_for_exit

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "mcp.md"
SAMPLES = REPO / "samples"
TOOLS = {
    "search",
    "get_document",
    "list_documents",
    "read_chunk",
    "read_page",
    "submit",
    "pipeline_status",
}
#: Tokens of the HTTP server: one that reads everything, alice's and bob's.
TOKENS = "tok-all,tok-alice:alice,tok-bob:bob"

pytestmark = pytest.mark.anyio


@pytest.fixture
def cli(databases: Databases, tmp_path: Path) -> Iterator[Cli]:
    with databases.fresh() as dsn:
        yield Cli(dsn, tmp_path / "data", tmp_path / "logs")


@contextlib.asynccontextmanager
async def stdio_client_of(cli: Cli, *args: str) -> AsyncIterator[Client]:
    """The SDK's client over stdio, starting ``python -m runtime mcp`` on the test's
    database (the server's stderr, its logs, to a file: stdout is the protocol's)."""
    [exe, *argv] = cli.argv("mcp", *args)
    params = StdioServerParameters(command=exe, args=argv, env=cli_env(), cwd=str(REPO))
    with (cli.logs / "mcp-stdio.err").open("w") as errlog:
        async with Client(stdio_client(params, errlog=errlog)) as client:
            yield client


@contextlib.asynccontextmanager
async def http_client(server: Server, token: str) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx2.AsyncClient(headers=headers, timeout=60) as http:
        transport = streamable_http_client(server.url + "/mcp", http_client=http)
        async with Client(transport) as client:
            yield client


async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    """A tool's structured result; the test fails with the tool's error if it has one."""
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content
    assert isinstance(result.structured_content, dict), result
    return result.structured_content


async def refused(client: Client, tool: str, **arguments: Any) -> str:
    """The one line of a tool error."""
    result = await client.call_tool(tool, arguments)
    assert result.is_error, result
    [content] = result.content
    text: str = getattr(content, "text", "")
    assert text and "\n" not in text and "Traceback" not in text, text
    return text


async def work(cli: Cli) -> None:
    """Workers over every stage until nothing is left (a separate process, as in use)."""
    done = await anyio.to_thread.run_sync(lambda: cli.run("--exit-when-idle", timeout_s=110))
    assert done.code == 0, done


async def check_tools(client: Client) -> None:
    listed = await client.list_tools()
    assert {t.name for t in listed.tools} == TOOLS
    for tool in listed.tools:  # described for a model to choose
        assert tool.description and len(tool.description) > 80, tool
    search = next(t for t in listed.tools if t.name == "search")
    filters = {"document_ids", "source", "path", "media_types", "since", "until", "metadata"}
    assert filters | {"pages", "section", "mode", "collection", "k"} <= set(
        search.input_schema["properties"]
    )


async def test_stdio_lists_submits_searches_and_reads(cli: Cli) -> None:
    async with stdio_client_of(cli) as client:
        await check_tools(client)
        sourdough = str(SAMPLES / "sourdough.pdf")
        by_path = await call(client, "submit", path=sourdough, readers=["alice"])
        assert by_path["created"] is True and by_path["status"] == "pending"
        tides = base64.b64encode((SAMPLES / "tides.md").read_bytes()).decode()
        sent = await call(
            client, "submit", content_base64=tides, filename="tides.md", metadata=["topic=sea"]
        )
        assert sent["created"] is True and sent["filename"] == "tides.md"
        again = await call(client, "submit", content_base64=tides, filename="copy.md")
        assert again == {**sent, "created": False}  # the same bytes: the same document

        pending = await call(client, "get_document", document_id=by_path["document_id"])
        assert pending["status"] == "pending" and pending["waiting"]

        await work(cli)

        doc = await call(client, "get_document", document_id=by_path["document_id"])
        assert doc["status"] == "ready" and doc["error"] is None, doc
        assert doc["counts"]["chunks"] > 0 and doc["counts"]["pages"] > 0
        assert [line.split()[0] for line in doc["timeline"]] == [
            "parse", "chunk", "vision", "embed", "index",
        ]  # fmt: skip
        assert all("succeeded" in line for line in doc["timeline"]), doc["timeline"]

        listed = await call(client, "list_documents", status="ready")
        names = {d["filename"] for d in listed["documents"]}
        assert names == {"sourdough.pdf", "tides.md"} and listed["next_cursor"] is None

        found = await call(client, "search", query="spring and neap tides", k=3)
        top = found["hits"][0]
        assert top["filename"] == "tides.md" and top["document_id"] == sent["document_id"]
        assert top["cite"].startswith("tides.md, p") and sent["document_id"] in top["cite"]
        assert top["section"] and top["metadata"] == {"topic": "sea"}
        narrowed = await call(client, "search", query="tides", metadata=["topic=none"])
        assert narrowed["hits"] == []
        only_pdf = await call(client, "search", query="tides", media_types=["application/pdf"])
        assert {h["filename"] for h in only_pdf["hits"]} <= {"sourdough.pdf"}

        passage = await call(
            client, "read_chunk", document_id=top["document_id"], ordinal=top["ordinal"]
        )
        ordinals = [c["ordinal"] for c in passage["chunks"]]
        assert top["ordinal"] in ordinals and ordinals == sorted(ordinals)
        assert 1 < len(ordinals) <= 3 and passage["filename"] == "tides.md"

        page = await call(client, "read_page", document_id=by_path["document_id"], page=1)
        assert page["page"] == 1 and page["text"] and "sourdough.pdf, p. 1" in page["cite"]

        status = await call(client, "pipeline_status")
        assert [s["stage"] for s in status["stages"]] == [
            "parse", "chunk", "vision", "embed", "index",
        ]  # fmt: skip

        # Bad arguments: one line each, naming what is wrong.
        assert "k:" in await refused(client, "search", query="tides", k=0)
        assert "since:" in await refused(client, "search", query="tides", since="yesterday")
        assert "query" in await refused(client, "search", query="  ")
        assert "not a document id" in await refused(client, "get_document", document_id="x1")
        missing = "00000000-0000-0000-0000-000000000001"
        assert "no document" in await refused(client, "get_document", document_id=missing)
        assert "no page 999" in await refused(
            client, "read_page", document_id=by_path["document_id"], page=999
        )
        assert "not base64" in await refused(client, "submit", content_base64="@@@")
        assert "not a file" in await refused(client, "submit", path="/dev/null")
        empty = cli.logs / "empty.pdf"
        empty.write_bytes(b"")
        assert "empty file" in await refused(client, "submit", path=str(empty))
        assert "cannot read" in await refused(client, "submit", path=str(cli.logs / "none.pdf"))
        assert "either path or content_base64" in await refused(client, "submit")
        assert "Unknown tool" in await refused(client, "no_such_tool")

    # --as: a caller with principals; the sourdough PDF is alice's alone.
    async with stdio_client_of(cli, "--as", "bob") as bob:
        listed = await call(bob, "list_documents")
        assert [d["filename"] for d in listed["documents"]] == ["tides.md"]
        found = await call(bob, "search", query="sourdough starter", k=10)
        assert by_path["document_id"] not in {h["document_id"] for h in found["hits"]}
        assert "no document" in await refused(
            bob, "read_page", document_id=by_path["document_id"], page=1
        )


async def test_stdio_on_the_embedded_defaults(embedded_base: Path, tmp_path: Path) -> None:
    """What a plain install runs (no DATABASE_URL): the server starts the embedded
    PostgreSQL, answers, and on leaving stops the cluster it started (its registration as
    a user is gone)."""
    cli = EmbeddedCli("", embedded_base / "data", tmp_path / "logs")
    async with stdio_client_of(cli) as client:
        await check_tools(client)
        sent = await call(client, "submit", path=str(SAMPLES / "tides.md"))
        await work(cli)
        found = await call(client, "search", query="why the sea rises twice a day", k=1)
        assert [h["document_id"] for h in found["hits"]] == [sent["document_id"]]
    users = cli.data_dir / "users"
    assert not (users.is_dir() and list(users.iterdir())), "a registration was left behind"


def test_sigterm_with_stdin_open_undoes_what_it_started(
    embedded_base: Path, tmp_path: Path
) -> None:
    """A client that stops its server with SIGTERM without closing the pipe first: the
    server still closes what it opened (its registration, the embedded PostgreSQL it
    started) and dies by the signal."""
    cli = EmbeddedCli("", embedded_base / "data", tmp_path / "logs")
    users = cli.data_dir / "users"
    pipe = subprocess.PIPE
    with subprocess.Popen(
        cli.argv("mcp"), stdin=pipe, stdout=pipe, env=cli_env(), cwd=REPO
    ) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        try:
            # An answer to initialize: it is in the stdio loop, blocked on the next read.
            proc.stdin.write(json.dumps(INITIALIZE).encode() + b"\n")
            proc.stdin.flush()
            answer = json.loads(proc.stdout.readline())
            assert answer["id"] == 1 and answer["result"]["serverInfo"]["name"] == "ragline"
            assert list(users.iterdir()), "not registered as a user of the cluster"
            postmaster = postmaster_pid(cli.data_dir)
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(60) == -signal.SIGTERM
        finally:
            proc.kill()
    assert not list(users.iterdir()), "its registration was left behind"
    wait_for_exit(postmaster, 30)


#: A client's first message (the handshake's, as the SDK's client sends it).
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "0"},
    },
}


async def test_http_behind_tokens_and_readers(cli: Cli) -> None:
    with running_server(cli, RAGLINE_API_TOKENS=TOKENS) as server:
        await _http_session(cli, server)


async def _http_session(cli: Cli, server: Server) -> None:
    async with http_client(server, "tok-alice") as alice:
        await check_tools(alice)
        pdf = base64.b64encode((SAMPLES / "lighthouses.pdf").read_bytes()).decode()
        mine = await call(alice, "submit", content_base64=pdf, filename="lighthouses.pdf")
        assert mine["created"] is True and mine["status"] == "pending"
        # Over HTTP a path names the server's disk: refused.
        assert "stdio" in await refused(alice, "submit", path=str(SAMPLES / "tides.md"))
    async with http_client(server, "tok-all") as everyone:
        tides = base64.b64encode((SAMPLES / "tides.md").read_bytes()).decode()
        public = await call(everyone, "submit", content_base64=tides, filename="tides.md")

    await work(cli)

    async with http_client(server, "tok-alice") as alice:
        doc = await call(alice, "get_document", document_id=mine["document_id"])
        assert doc["status"] == "ready", doc
        found = await call(alice, "search", query="lighthouse lamp keepers", k=5)
        assert mine["document_id"] in {h["document_id"] for h in found["hits"]}
        hit = next(h for h in found["hits"] if h["document_id"] == mine["document_id"])
        assert hit["cite"].startswith("lighthouses.pdf, p")
        assert "k:" in await refused(alice, "search", query="x", k=1000)
    async with http_client(server, "tok-bob") as bob:
        # alice's upload is hers (readers: alice): bob finds nothing of it.
        found = await call(bob, "search", query="lighthouse lamp keepers", k=5)
        assert mine["document_id"] not in {h["document_id"] for h in found["hits"]}
        listed = await call(bob, "list_documents")
        assert [d["document_id"] for d in listed["documents"]] == [public["document_id"]]
        said = await refused(bob, "get_document", document_id=mine["document_id"])
        assert said == f"get_document: no document {mine['document_id']}"
        assert "no document" in await refused(
            bob, "read_chunk", document_id=mine["document_id"], ordinal=0
        )

    for token in ("wrong", ""):
        with pytest.raises(BaseException) as caught:
            async with http_client(server, token) as client:
                await client.list_tools()
        error = mcp_error(caught.value)
        said = "wrong token" if token else "missing bearer token"
        assert error.error.code == -32001 and said in error.error.message
        assert "\n" not in error.error.message


def mcp_error(exc: BaseException) -> MCPError:
    """The MCPError inside what the client raised (its task groups wrap it)."""
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    seen: BaseException | None = exc
    while seen is not None and not isinstance(seen, MCPError):
        seen = seen.__context__ or seen.__cause__
    assert isinstance(seen, MCPError), repr(exc)
    return seen


# -- the examples of docs/mcp.md, run as written ----------------------------------------


def doc_blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", DOC.read_text(), re.S)


async def test_the_documented_stdio_config_starts_a_server(cli: Cli, tmp_path: Path) -> None:
    """The ``mcpServers`` entry as a client runs it: its command on PATH (this venv's
    ``ragline``), its args, its env with the test's database for the example's."""
    entry = json.loads(doc_blocks("json")[0])["mcpServers"]["ragline"]
    assert entry["env"]["DATABASE_URL"].startswith("postgresql://")
    command = Path(sys.executable).parent / entry["command"]
    env = cli_env(**{**entry["env"], "DATABASE_URL": cli.dsn})
    params = StdioServerParameters(
        command=str(command), args=entry["args"], env=env, cwd=str(tmp_path)
    )
    with (cli.logs / "doc-stdio.err").open("w") as errlog:
        async with Client(stdio_client(params, errlog=errlog)) as client:
            await check_tools(client)
            status = await call(client, "pipeline_status")
            assert status["stages"][0]["stage"] == "parse"


async def test_the_documented_http_config_and_python_client(cli: Cli) -> None:
    entry = json.loads(doc_blocks("json")[1])["mcpServers"]["ragline"]
    assert entry["type"] == "http" and entry["url"].endswith("/mcp")
    [python] = doc_blocks("python")
    with running_server(cli, RAGLINE_API_TOKENS="TOKEN") as server:
        url = entry["url"].replace("https://ragline.example", server.url)
        async with (
            httpx2.AsyncClient(headers=entry["headers"]) as http,
            Client(streamable_http_client(url, http_client=http)) as client,
        ):
            await check_tools(client)
            tides = base64.b64encode((SAMPLES / "tides.md").read_bytes()).decode()
            await call(client, "submit", content_base64=tides, filename="tides.md")
        await work(cli)
        printed = await run_snippet(python.replace("https://ragline.example", server.url))
    assert printed.startswith("tides.md, p") and "› Spring and Neap Tides [document" in printed


async def run_snippet(code: str) -> str:
    """The README-style snippet (top-level ``await``) in a coroutine; what it printed."""
    lines = io.StringIO()
    body = textwrap.indent(code, "    ")
    namespace: dict[str, Any] = {"print": lambda *a: print(*a, file=lines)}
    exec(f"async def snippet():\n{body}", namespace)
    await namespace["snippet"]()
    return lines.getvalue().strip()
