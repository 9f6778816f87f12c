"""stages.serve.guard: which hosts are answered, and which writes are refused and why."""

from __future__ import annotations

from typing import Any

import pytest

from stages.serve.guard import CsrfSecret, RequestGuard, allowed_hosts, host_name

OWN = "127.0.0.1:8800"


def scope(method: str, path: str, host: str = OWN, **headers: str) -> dict[str, Any]:
    raw = [(b"host", host.encode())] + [
        (k.replace("_", "-").encode(), v.encode()) for k, v in headers.items()
    ]
    return {"type": "http", "method": method, "path": path, "headers": raw}


async def _app(scope: Any, receive: Any, send: Any) -> None:
    return None


SECRET = CsrfSecret(b"k" * 32)
GUARD = RequestGuard(_app, allowed_hosts("127.0.0.1", ()), (), SECRET)


@pytest.mark.parametrize(
    ("header", "name"),
    [("127.0.0.1:8800", "127.0.0.1"), ("LocalHost", "localhost"), ("[::1]:80", "::1"),
     ("example.com", "example.com")],
)  # fmt: skip
def test_host_names_lose_their_port(header: str, name: str) -> None:
    assert host_name(header) == name


def test_the_hosts_answered_by_default() -> None:
    assert allowed_hosts("127.0.0.1", ()) == frozenset(
        {"localhost", "127.0.0.1", "::1", "ip6-localhost"}
    )
    assert allowed_hosts("10.0.0.5", ()) == frozenset({"10.0.0.5"})
    assert allowed_hosts("0.0.0.0", ()) is None
    assert allowed_hosts("0.0.0.0", ("rag.example.com",)) == frozenset({"rag.example.com"})
    assert allowed_hosts("127.0.0.1", ("*",)) is None


def status(s: dict[str, Any]) -> int | None:
    refused = GUARD.refusal(s)
    return None if refused is None else refused[0]


def test_reads_pass_and_foreign_hosts_do_not() -> None:
    assert status(scope("GET", "/v1/stages", origin="https://evil.example")) is None
    assert status(scope("GET", "/v1/stages", host="evil.example:8800")) == 400


def test_browser_writes_need_the_own_origin_and_the_token() -> None:
    token = SECRET.token(None)
    own = {"origin": f"http://{OWN}", "sec_fetch_site": "same-origin"}
    json = {"content_type": "application/json", "content_length": "20"}
    assert status(scope("POST", "/v1/reprocess", **own, **json, x_csrf_token=token)) is None
    assert status(scope("POST", "/v1/reprocess", **own, **json)) == 403
    assert status(scope("POST", "/v1/reprocess", **own, **json, x_csrf_token="0" * 64)) == 403
    other = {"origin": "http://127.0.0.1:3000", "x_csrf_token": token}
    assert status(scope("POST", "/v1/reprocess", **other, **json)) == 403
    assert status(scope("DELETE", "/v1/documents/x", sec_fetch_site="same-site")) == 403
    assert status(scope("POST", "/login", **own)) is None  # the sign-in form: origin only
    assert status(scope("POST", "/login", origin="http://evil.example")) == 403


def test_the_token_follows_the_login_cookie() -> None:
    cookie = "ragline_token=secret"
    own = {"origin": f"http://{OWN}", "cookie": cookie}
    assert status(scope("POST", "/v1/documents/x/retry", **own)) == 403
    assert (
        status(scope("POST", "/v1/documents/x/retry", **own, x_csrf_token=SECRET.token(None)))
        == 403
    )
    good = SECRET.token("secret")
    assert status(scope("POST", "/v1/documents/x/retry", **own, x_csrf_token=good)) is None


def test_scripts_write_json_only_and_need_no_token() -> None:
    assert status(scope("POST", "/v1/reprocess", content_type="application/json",
                        content_length="9")) is None  # fmt: skip
    assert status(scope("POST", "/v1/reprocess", content_type="text/plain",
                        content_length="9")) == 415  # fmt: skip
    assert status(scope("POST", "/v1/documents/x/retry")) is None  # no body
    assert status(scope("POST", "/v1/documents", content_type="application/pdf",
                        content_length="9")) is None  # an upload  # fmt: skip
    assert status(scope("POST", "/v1/reprocess", authorization="Bearer t",
                        origin=f"http://{OWN}", content_type="application/json",
                        content_length="9")) is None  # fmt: skip
