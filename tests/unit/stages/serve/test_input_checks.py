"""What serve accepts from its configuration and its requests: bind rules and tokens,
upload file names, idempotency keys, lengths and types, list cursors, SSE event ids."""

from __future__ import annotations

import base64
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
from litestar.exceptions import HTTPException

from runtime.errors import ConfigurationError
from stages.serve import http_api as api
from stages.serve import sse as events
from stages.serve import uploads
from stages.serve.auth import presented_token, token_ok
from stages.serve.config import ServeConfig, api_tokens, is_loopback, parse_tokens


@pytest.mark.parametrize("host", ["127.0.0.1", "127.9.9.9", "::1", "[::1]", "localhost"])
def test_loopback_hosts_need_no_tokens(host: str) -> None:
    assert is_loopback(host)
    assert ServeConfig(host=host).tokens == ()


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.0.0.5", "example.org"])
def test_other_hosts_refuse_to_start_without_tokens(host: str) -> None:
    with pytest.raises(ConfigurationError, match="without RAGLINE_API_TOKENS"):
        ServeConfig(host=host)
    assert ServeConfig(host=host, tokens=("t",)).host == host


def test_tokens_parse_and_compare() -> None:
    assert parse_tokens(" a, ,b ,") == ("a", "b")
    assert parse_tokens(None) == ()
    tokens = api_tokens(("a", "b"))
    assert token_ok("b", tokens) and not token_ok("c", tokens)
    assert not token_ok(None, tokens) and not token_ok("", tokens)


def test_token_from_header_or_cookie() -> None:
    bearer = {"type": "http", "headers": [(b"authorization", b"Bearer abc")]}
    cookie = {"type": "http", "headers": [(b"cookie", b"x=1; ragline_token=xyz")]}
    basic = {"type": "http", "headers": [(b"authorization", b"Basic abc")]}
    assert presented_token(bearer) == "abc"  # type: ignore[arg-type]
    assert presented_token(cookie) == "xyz"  # type: ignore[arg-type]
    assert presented_token(basic) is None  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("report.pdf", "report.pdf"),
        ("../../etc/passwd", "passwd"),
        ("C:\\Users\\me\\cv.pdf", "cv.pdf"),
        ("a\x00b\nc.pdf", "abc.pdf"),
        ("..", "upload.pdf"),
        (None, "upload.pdf"),
        ("x" * 300 + ".pdf", "x" * 255),
    ],
)
def test_file_names_are_display_names_never_paths(raw: str | None, clean: str) -> None:
    assert uploads.clean_filename(raw) == clean


def test_idempotency_keys_and_lengths() -> None:
    assert uploads.check_idempotency_key(None) is None
    assert uploads.check_idempotency_key("order-42") == "order-42"
    for bad in ("", "with space", "x" * 201, "é"):
        with pytest.raises(HTTPException):
            uploads.check_idempotency_key(bad)
    uploads.check_length(None, 10)
    uploads.check_length("10", 10)
    with pytest.raises(HTTPException) as too_big:
        uploads.check_length("11", 10)
    assert too_big.value.status_code == 413
    with pytest.raises(HTTPException):
        uploads.check_length("ten", 10)


def test_upload_checks_match_submit(tmp_path: Path) -> None:
    def check(name: str, data: bytes) -> str:
        path = tmp_path / "spool"
        path.write_bytes(data)
        return uploads.check_type(name, len(data), path)

    assert check("a.pdf", b"%PDF-1.7\n") == "application/pdf"
    assert check("a.pdf", b"\xef\xbb\xbfjunk %PDF-1.4") == "application/pdf"  # in the first KiB
    assert check("a.txt", b"hello") == "text/plain"  # the formats submit reads
    with pytest.raises(HTTPException) as empty:
        check("a.pdf", b"")
    assert empty.value.status_code == 400
    with pytest.raises(HTTPException) as other:
        check("a.bin", b"\x00\x01\x02 binary")
    assert other.value.status_code == 415 and "a.bin: not a type ragline reads" in str(
        other.value.detail
    )
    with pytest.raises(HTTPException) as mislabelled:
        check("a.pdf", b"hello")
    assert "a.pdf: not a PDF" in str(mislabelled.value.detail)


def test_cursor_round_trip_and_garbage() -> None:
    doc = api.DocumentOut(
        id=uuid.uuid4(),
        filename="f",
        status="ready",
        stage="index",
        error=None,
        generation=1,
        byte_size=1,
        sha256="0" * 64,
        created_at=datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC),
        updated_at=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
        url="/",
    )
    assert api.decode_cursor(api.encode_cursor(doc)) == (doc.created_at, doc.id)
    for bad in ("!!", "bm90IGEgY3Vyc29y", ""):
        with pytest.raises(HTTPException):
            api.decode_cursor(bad)


@pytest.mark.parametrize(
    "moment", ["0001-01-01T00:00:00+05:00", "9999-12-31T23:59:59-05:00", "2026-01-01T00:00:00"]
)
def test_cursor_with_a_time_postgres_cannot_take_is_refused(moment: str) -> None:
    """Out of range once in UTC (asyncpg's DataError, a 500 before), or without a zone."""
    raw = f"{moment}|{uuid.UUID(int=1)}".encode()
    with pytest.raises(HTTPException) as refused:
        api.decode_cursor(base64.urlsafe_b64encode(raw).decode())
    assert refused.value.status_code == 400


def test_last_event_id_is_a_number_or_nothing() -> None:
    assert events.parse_last_id(None) is None and events.parse_last_id("") is None
    assert events.parse_last_id("42") == 42
    # "²" and "¹" are what the bytes 0xb2 and 0xb9 of a header decode to (latin-1):
    # str.isdigit() takes them, int() does not.
    for bad in ("-1", "1e3", "x", "9" * 19, "\u00b2", "1\u00b9", "\u0663"):
        with pytest.raises(HTTPException):
            events.parse_last_id(bad)
