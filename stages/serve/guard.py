"""Writes need intent: the server answers only the hosts it serves, and a browser may
change state only from the server's own pages.

Three checks, in an ASGI middleware in front of everything else:

- **Host.** The ``Host`` header must name a host the server serves (``RAGLINE_ALLOWED_HOSTS``;
  by default the bound address and, on a loopback address, the loopback names), so a page
  that rebinds its own DNS name to 127.0.0.1 cannot reach it (400).
- **Origin.** A write (any method but GET, HEAD, OPTIONS) that a browser sends carries
  ``Origin`` (and ``Sec-Fetch-Site``): it must be the server's own origin or one of
  ``RAGLINE_CORS_ORIGINS`` (403). A page on another site, or on the same host at another
  port (``same-site``, which a SameSite cookie does not stop), is refused. Clients that are
  not browsers send neither header and are not affected.
- **CSRF token.** A browser's write that is not authenticated by a bearer header must also
  carry ``X-CSRF-Token``: an HMAC, under a secret of this server process, of the login
  cookie (empty without tokens). The web view's pages carry it (:func:`csrf_token`) and
  ``app.js`` sends it; the sign-in form, which has nothing to send it with, relies on the
  origin check.

JSON routes also take only ``application/json`` bodies (415): a cross-site ``text/plain``
body, which needs no preflight, is never read as JSON.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
from collections.abc import Iterable
from typing import Any

import msgspec
from litestar.types import ASGIApp, Receive, Scope, Send

from stages.serve.auth import presented_cookie
from stages.serve.problems import PROBLEM_JSON, Problem

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
CSRF_HEADER = "x-csrf-token"
#: The sign-in form: a plain HTML form, guarded by the origin check alone.
LOGIN = "/login"
#: Writes whose bodies are not JSON: uploads (multipart or a raw file) and the sign-in form.
NOT_JSON = frozenset({("POST", "/v1/documents"), ("POST", LOGIN)})
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1", "ip6-localhost"})
_WILDCARDS = frozenset({"0.0.0.0", "::", ""})


def allowed_hosts(bound: str, configured: Iterable[str]) -> frozenset[str] | None:
    """The host names the server answers; None: any (bound to every address without a
    list: a server behind a proxy names its hosts with ``RAGLINE_ALLOWED_HOSTS``)."""
    names = {h.strip().lower().strip("[]") for h in configured if h.strip()}
    if "*" in names:
        return None
    if names:
        return frozenset(names)
    host = bound.strip().lower().strip("[]")
    if host in _WILDCARDS:
        return None
    if host in LOOPBACK_NAMES or _is_loopback(host):
        return LOOPBACK_NAMES | {host}
    return frozenset({host})


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def host_name(header: str) -> str:
    """The host of a ``Host`` header, without its port, lower-case (IPv6 unbracketed)."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:].partition("]")[0]
    return header.rpartition(":")[0] if header.count(":") == 1 else header


class CsrfSecret:
    """The secret the CSRF tokens of this server process are made with."""

    def __init__(self, key: bytes | None = None) -> None:
        self._key = key or secrets.token_bytes(32)

    def token(self, cookie: str | None) -> str:
        return hmac.new(self._key, (cookie or "").encode(), hashlib.sha256).hexdigest()

    def holds(self, given: str | None, cookie: str | None) -> bool:
        if given is None:
            return False
        return hmac.compare_digest(given.encode(), self.token(cookie).encode())


class RequestGuard:
    """ASGI middleware: the host, origin, CSRF and content-type checks above."""

    def __init__(
        self,
        app: ASGIApp,
        hosts: frozenset[str] | None,
        trusted_origins: Iterable[str],
        secret: CsrfSecret,
    ) -> None:
        self.app = app
        self.hosts = hosts
        self.trusted = frozenset(o.rstrip("/") for o in trusted_origins)
        self.secret = secret

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http",):  # websockets and lifespan pass
            await self.app(scope, receive, send)
            return
        refusal = self.refusal(scope)
        if refusal is None:
            await self.app(scope, receive, send)
            return
        status, title, detail = refusal
        body = msgspec.json.encode(Problem(title=title, status=status, detail=detail))
        await _respond(send, status, body)

    def refusal(self, scope: Any) -> tuple[int, str, str] | None:
        """Why this HTTP request is refused (status, title, detail), or None."""
        headers = {k.lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        host = headers.get(b"host", "")
        if self.hosts is not None and host_name(host) not in self.hosts:
            refused = f"host {host!r} is not served here (RAGLINE_ALLOWED_HOSTS)"
            return 400, "Bad Request", refused
        method = scope["method"]
        if method in SAFE_METHODS:
            return None
        return self._cross_site(headers, host) or self._unintended(scope, headers, method)

    def _cross_site(self, headers: dict[bytes, str], host: str) -> tuple[int, str, str] | None:
        origin = headers.get(b"origin")
        site = headers.get(b"sec-fetch-site")
        if origin is not None:
            own = {f"http://{host}", f"https://{host}"}
            origin = origin.rstrip("/")
            if origin in own or origin in self.trusted or "*" in self.trusted:
                return None
            return 403, "Forbidden", f"a write from another origin ({origin}) is refused"
        if site not in (None, "same-origin", "none"):
            return 403, "Forbidden", f"a {site} write is refused"
        return None

    def _unintended(
        self, scope: Any, headers: dict[bytes, str], method: str
    ) -> tuple[int, str, str] | None:
        path = scope["path"]
        browser = b"origin" in headers or b"sec-fetch-site" in headers
        bearer = headers.get(b"authorization", "").lower().startswith("bearer ")
        if browser and not bearer and path != LOGIN:
            cookie = presented_cookie(headers.get(b"cookie"))
            if not self.secret.holds(headers.get(CSRF_HEADER.encode()), cookie):
                return 403, "Forbidden", "missing or wrong X-CSRF-Token (use the web view's pages)"
        if (method, path) in NOT_JSON:
            return None
        kind = headers.get(b"content-type", "").partition(";")[0].strip().lower()
        has_body = headers.get(b"content-length", "0") != "0" or b"transfer-encoding" in headers
        if has_body and kind != "application/json":
            sent = kind or "no type"
            return 415, "Unsupported Media Type", f"send Content-Type: application/json, not {sent}"
        return None


async def _respond(send: Send, status: int, body: bytes) -> None:
    headers = [
        (b"content-type", PROBLEM_JSON.encode()),
        (b"content-length", str(len(body)).encode()),
    ]
    start: Any = {"type": "http.response.start", "status": status, "headers": headers}
    await send(start)
    end: Any = {"type": "http.response.body", "body": body}
    await send(end)
