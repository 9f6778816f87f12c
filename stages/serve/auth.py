"""Bearer tokens: ``Authorization: Bearer <token>``, or the web view's cookie.

Tokens come from ``RAGLINE_API_TOKENS``; every candidate is compared in constant time
(``hmac.compare_digest`` against each configured token, no early exit). With no tokens
configured (only allowed on a loopback address, see :mod:`stages.serve.config`)
everything is open. Health probes and the static files are always open.
"""

from __future__ import annotations

import hmac
from collections.abc import Sequence
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import quote

import msgspec
from litestar.types import ASGIApp, Receive, Scope, Send

from stages.serve.problems import PROBLEM_JSON, Problem

COOKIE = "ragline_token"
OPEN_PATHS = frozenset({"/healthz", "/readyz", "/login", "/favicon.ico"})
OPEN_PREFIXES = ("/static/",)


def token_ok(candidate: str | None, tokens: Sequence[str]) -> bool:
    if candidate is None:
        return False
    given = candidate.encode()
    ok = False
    for token in tokens:
        ok |= hmac.compare_digest(given, token.encode())
    return ok


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

    def __init__(self, app: ASGIApp, tokens: Sequence[str]) -> None:
        self.app = app
        self.tokens = tuple(tokens)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or not self.tokens:
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        if path in OPEN_PATHS or path.startswith(OPEN_PREFIXES):
            await self.app(scope, receive, send)
            return
        if token_ok(presented_token(scope), self.tokens):
            await self.app(scope, receive, send)
            return
        if path.startswith("/v1/") or path == "/metrics":
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
