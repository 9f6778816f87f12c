"""The MCP server's pieces that need no database: citations, clipping, one-line errors for
arguments that fail a tool's schema, who may read what is submitted, and the 401 an MCP
client gets for a wrong token (a JSON-RPC error, not a redirect or a problem document)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from mcp.server.mcpserver.exceptions import ToolError

from stages.serve import mcp
from stages.serve.auth import Caller, TokenAuth
from stages.serve.config import ApiToken

DOC = uuid.UUID(int=7)

pytestmark = pytest.mark.anyio


def test_a_citation_names_file_pages_section_and_document() -> None:
    assert mcp.cite("a.pdf", DOC, 3, 3, None) == f"a.pdf, p. 3 [document {DOC}]"
    assert mcp.cite("a.md", DOC, 2, 4, "Intro › Tides") == (
        f"a.md, pp. 2-4, § Intro › Tides [document {DOC}]"
    )


def test_long_text_is_clipped_and_says_so() -> None:
    assert mcp.clipped("short", 10) == ("short", False)
    text, cut = mcp.clipped("word " * 10, 12)
    assert cut and text.endswith(" …") and len(text) <= 14


@pytest.mark.parametrize(
    ("readers", "caller", "expected"),
    [
        (None, Caller(), None),  # an operator's submit: everyone's
        (None, Caller(("alice",)), ["alice"]),  # a restricted caller's: its own
        (["*"], Caller(("alice",)), None),  # named: everyone
        (["bob"], Caller(("alice",)), ["bob"]),
    ],
)
def test_who_reads_what_is_submitted(
    readers: list[str] | None, caller: Caller, expected: list[str] | None
) -> None:
    assert mcp._readers(readers, caller) == expected


def server() -> mcp.RaglineMcp:
    def no_pool() -> Any:
        raise AssertionError("arguments are checked before anything is asked")

    services: Any = object()
    door = mcp.Door(
        no_pool, services, ("parse",), upload_dir=Path("/nonexistent"), max_upload_bytes=1
    )
    return mcp.build_server(door)


@pytest.mark.parametrize(
    ("tool", "arguments", "said"),
    [
        ("search", {"query": "x", "k": 0}, "search: k: Input should be greater than or equal"),
        ("search", {"query": "x", "mode": "fuzzy"}, "search: mode: Input should be"),
        ("search", {}, "search: query: Field required"),
        ("read_chunk", {"document_id": "d", "ordinal": "x"}, "read_chunk: ordinal: Input"),
        ("read_page", {"document_id": "d", "page": 0}, "read_page: page: Input should be"),
        ("get_document", {"document_id": "not-a-uuid"}, "get_document: not a document id"),
        ("submit", {}, "submit: give either path or content_base64"),
        ("no_such_tool", {}, "Unknown tool"),
    ],
)
async def test_a_bad_argument_is_one_line(tool: str, arguments: dict[str, Any], said: str) -> None:
    with pytest.raises(ToolError) as caught:
        await server().call_tool(tool, arguments)
    text = str(caught.value)
    assert text.startswith(said) and "\n" not in text, text


async def test_the_tools_are_described_and_typed() -> None:
    tools = {t.name: t for t in await server().list_tools()}
    assert set(tools) == {name for name, _ in mcp.TOOLS}
    assert tools["search"].annotations is not None and tools["search"].annotations.read_only_hint
    assert tools["submit"].annotations is not None
    assert tools["submit"].annotations.read_only_hint is False
    assert "ctx" not in tools["search"].input_schema["properties"]
    assert tools["search"].input_schema["required"] == ["query"]


async def respond(
    app: TokenAuth, path: str, token: str | None
) -> tuple[int, dict[bytes, bytes], bytes]:
    sent: list[dict[str, Any]] = []

    async def send(message: Any) -> None:
        sent.append(message)

    async def receive() -> Any:
        return {"type": "http.request", "body": b""}

    headers = [(b"authorization", f"Bearer {token}".encode())] if token else []
    scope = {"type": "http", "path": path, "method": "POST", "headers": headers}
    await app(scope, receive, send)  # type: ignore[arg-type]
    start, body = sent
    return start["status"], dict(start["headers"]), body["body"]


async def test_an_mcp_client_with_a_wrong_token_gets_a_json_rpc_error() -> None:
    async def inner(scope: Any, receive: Any, send: Any) -> None:
        raise AssertionError("a refused request reached the app")

    app = TokenAuth(inner, [ApiToken("right")])
    for token, said in (("wrong", "wrong token"), (None, "missing bearer token")):
        status, headers, body = await respond(app, "/mcp", token)
        assert status == 401 and headers[b"content-type"] == b"application/json"
        assert headers[b"www-authenticate"].startswith(b"Bearer")
        error = json.loads(body)
        assert error["jsonrpc"] == "2.0" and error["id"] is None
        assert error["error"]["code"] == -32001 and said in error["error"]["message"]
    status, _, _ = await respond(app, "/v1/documents", "wrong")
    assert status == 401  # the API's problem document, as before
