"""Bearer tokens: ``Authorization: Bearer <token>``, or the web view's cookie.

Tokens come from ``RAGLINE_API_TOKENS``; every candidate is compared in constant time
(``hmac.compare_digest`` against each configured token, no early exit). With no tokens
configured (only allowed on a loopback address, see :mod:`stages.serve.config`)
everything is open. Health probes and the static files are always open.

A token names its caller (:class:`Caller`): ``TOKEN`` one who may read every document,
``TOKEN:alice+team`` one who may read documents without readers and those whose readers
include alice or team. The middleware puts the caller in the request's scope
(:func:`caller_of`); the cookie holds the token itself, so the web view's caller is the
same. A request that reached a handler without passing the check (none should) is
treated as a caller with no principals, never as one who may read everything.
"""

from __future__ import annotations

import hmac
from collections.abc import Sequence
from http.cookies import SimpleCookie
from typing import Any, cast
from urllib.parse import quote

import msgspec
from litestar import Request
from litestar.types import ASGIApp, Receive, Scope, Send

from stages.serve.config import ApiToken
from stages.serve.problems import PROBLEM_JSON, Problem

COOKIE = "ragline_token"
OPEN_PATHS = frozenset({"/healthz", "/readyz", "/login", "/favicon.ico"})
OPEN_PREFIXES = ("/static/",)


#: Where ``serve`` mounts the MCP server (its callers get JSON-RPC errors, not problems).
MCP_PATH = "/mcp"
#: The JSON-RPC error code of a refused MCP request (the implementation-defined range).
UNAUTHORIZED_RPC = -32001

#: Where the middleware leaves the caller in the ASGI scope.
_CALLER = "ragline.caller"


class Caller(msgspec.Struct, frozen=True):
    """Who asks: ``principals`` None may read every document; else only documents without
    readers and those whose readers include one of them (the rule search applies in
    PostgreSQL, ``schema/queries/search.sql``)."""

    principals: tuple[str, ...] | None = None

    @property
    def restricted(self) -> bool:
        return self.principals is not None

    def may_read(self, readers: Sequence[str] | None) -> bool:
        if self.principals is None or readers is None:
            return True
        return not set(readers).isdisjoint(self.principals)


#: A caller who may read everything: no tokens configured, or a token without principals.
EVERYONE = Caller()
#: What a request that never passed the token check counts as: documents without readers.
NOBODY = Caller(())


def token_match(candidate: str | None, tokens: Sequence[ApiToken]) -> ApiToken | None:
    """The configured token ``candidate`` is, compared with every one in constant time."""
    if candidate is None:
        return None
    given = candidate.encode()
    found = None
    for token in tokens:
        if hmac.compare_digest(given, token.secret.encode()):
            found = token
    return found


def token_ok(candidate: str | None, tokens: Sequence[ApiToken]) -> bool:
    return token_match(candidate, tokens) is not None


def caller_of(request: Request[Any, Any, Any]) -> Caller:
    """The caller the middleware found for this request."""
    return caller_in(cast("dict[str, Any]", request.scope))


def caller_in(scope: dict[str, Any]) -> Caller:
    """The caller the middleware left in an ASGI scope (one handed on to a mounted app,
    such as the MCP server's transport, too)."""
    found = scope.get(_CALLER)
    return found if isinstance(found, Caller) else NOBODY


def _let_in(scope: Scope, caller: Caller) -> None:
    cast("dict[str, Any]", scope)[_CALLER] = caller


def _headers(scope: Scope) -> dict[bytes, bytes]:
    return {k.lower(): v for k, v in scope.get("headers", [])}


def presented_token(scope: Scope) -> str | None:
    headers = _headers(scope)
    auth = headers.get(b"authorization", b"").decode("latin-1")
    scheme, _, value = auth.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    raw = headers.get(b"cookie")
    return presented_cookie(raw.decode("latin-1") if raw else None)


def presented_cookie(header: str | None) -> str | None:
    """The web view's token cookie in a ``Cookie`` header, if there is one."""
    if not header:
        return None
    jar: SimpleCookie = SimpleCookie()
    try:
        jar.load(header)
    except Exception:  # a malformed cookie header is just no token
        return None
    return jar[COOKIE].value if COOKIE in jar else None


class TokenAuth:
    """ASGI middleware: 401 problem for the API, a redirect to /login for pages."""

    def __init__(self, app: ASGIApp, tokens: Sequence[ApiToken]) -> None:
        self.app = app
        self.tokens = tuple(tokens)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        if not self.tokens:
            _let_in(scope, EVERYONE)
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        if path in OPEN_PATHS or path.startswith(OPEN_PREFIXES):
            await self.app(scope, receive, send)
            return
        found = token_match(presented_token(scope), self.tokens)
        if found is not None:
            _let_in(scope, Caller(found.principals))
            await self.app(scope, receive, send)
            return
        if path == MCP_PATH or path.startswith(MCP_PATH + "/"):
            await _mcp_unauthorized(send, bool(presented_token(scope)))
        elif path.startswith("/v1/") or path == "/metrics":
            await _unauthorized(send, bool(presented_token(scope)))
        else:
            await _redirect(send, "/login?next=" + quote(path))


async def _unauthorized(send: Send, had_token: bool) -> None:
    detail = "wrong token" if had_token else "missing bearer token (Authorization: Bearer ...)"
    body = msgspec.json.encode(Problem(title="Unauthorized", status=401, detail=detail))
    headers = [
        (b"content-type", PROBLEM_JSON.encode()),
        (b"www-authenticate", b'Bearer realm="ragline"'),
    ]
    await _respond(send, 401, headers, body)


async def _mcp_unauthorized(send: Send, had_token: bool) -> None:
    """A 401 an MCP client reads as a JSON-RPC error (the SDK surfaces its message)."""
    detail = "wrong token" if had_token else "missing bearer token (Authorization: Bearer ...)"
    error = {"code": UNAUTHORIZED_RPC, "message": f"unauthorized: {detail}"}
    body = msgspec.json.encode({"jsonrpc": "2.0", "id": None, "error": error})
    headers = [
        (b"content-type", b"application/json"),
        (b"www-authenticate", b'Bearer realm="ragline"'),
    ]
    await _respond(send, 401, headers, body)


async def _redirect(send: Send, location: str) -> None:
    await _respond(send, 303, [(b"location", location.encode())], b"")


async def _respond(
    send: Send, status: int, headers: list[tuple[bytes, bytes]], body: bytes
) -> None:
    headers = [*headers, (b"content-length", str(len(body)).encode())]
    start: Any = {"type": "http.response.start", "status": status, "headers": headers}
    await send(start)
    end: Any = {"type": "http.response.body", "body": body}
    await send(end)
