"""The client's parts without I/O (:mod:`stages.client._core`): the SSE parser, the retry
policy and ``Retry-After``, errors from problem documents, search's query string, the
citation; and that importing the client loads no web framework or pipeline."""

from __future__ import annotations

import io
import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import httpx
import msgspec
import pytest

from stages.client import Client, _core
from stages.client.errors import (
    ApiError,
    BadRequest,
    ClientError,
    EventsPruned,
    IdempotencyKeyReused,
    NotFound,
    Unavailable,
)
from stages.client.sync import _body_of as sync_body_of
from stages.ports.http import Answer, Problem


def feed(lines: list[str]) -> list[_core.SseMessage]:
    parser = _core.SseParser()
    return [m for line in lines if (m := parser.feed(line)) is not None]


def test_sse_parser_reads_what_the_server_sends() -> None:
    got = feed(
        [
            ": ragline document events",
            "retry: 2000",
            "",
            ": heartbeat",
            "",
            "event: document",
            'data: {"id": 7}',
            "id: 7",
            "",
            "event: reset",
            "data: events were pruned; reload",
            "",
            "",  # a blank line alone dispatches nothing
        ]
    )
    assert [m.event for m in got] == [None, None, "document", "reset"]
    assert got[0].retry_ms == 2000
    assert got[2].data == '{"id": 7}' and got[2].id == "7"


def test_sse_data_lines_join_and_plain_messages_are_message() -> None:
    [msg] = feed(["data:a", "data: b", ""])
    assert msg.event == "message" and msg.data == "a\nb"


def response(
    status: int, headers: dict[str, str] | None = None, body: bytes = b""
) -> httpx.Response:
    return httpx.Response(status, headers=headers, content=body)


def test_retry_after_in_seconds_or_as_a_date() -> None:
    assert _core.retry_after_s(response(503, {"Retry-After": "3"})) == 3.0
    later = format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    seconds = _core.retry_after_s(response(503, {"Retry-After": later}))
    assert seconds is not None and 25 < seconds <= 30
    assert _core.retry_after_s(response(503, {"Retry-After": "soon"})) is None
    assert _core.retry_after_s(response(503)) is None


def test_retry_policy_waits_what_the_server_says_within_its_limits() -> None:
    policy = _core.RetryPolicy(retries=2, backoff_s=1, max_backoff_s=4, max_retry_after_s=60)
    assert policy.delay(0, response(429, {"Retry-After": "5"})) == 5
    assert policy.delay(0, response(429, {"Retry-After": "61"})) is None
    assert policy.delay(2, response(429, {"Retry-After": "1"})) is None  # out of retries
    backoff = policy.delay(1, None)
    assert backoff is not None and 1 <= backoff <= 2


def problem_response(status: int, detail: str) -> httpx.Response:
    body = msgspec.json.encode(Problem(title="t", status=status, detail=detail))
    return response(status, {"content-type": "application/problem+json"}, body)


@pytest.mark.parametrize(
    ("status", "cls"),
    [(400, BadRequest), (404, NotFound), (422, IdempotencyKeyReused), (503, Unavailable)],
)
def test_a_problem_becomes_its_kind(status: int, cls: type[ApiError]) -> None:
    error = _core.error_of(problem_response(status, "one line"))
    assert type(error) is cls and error.message == "one line" and error.status == status
    assert error.problem is not None and error.problem.detail == "one line"


def test_an_error_without_a_problem_document_still_says_what() -> None:
    error = _core.error_of(response(502, {"content-type": "text/html"}, b"<h1>Bad gateway</h1>\n"))
    assert type(error) is ApiError and error.status == 502
    assert error.message == "HTTP 502 Bad Gateway: <h1>Bad gateway</h1>"


def test_search_params_use_the_names_of_search_options() -> None:
    doc = uuid.uuid4()
    params = _core.search_params(
        "lens",
        3,
        documents=[doc],
        types=["application/pdf", "text/markdown"],
        meta={"team": "a"},
        since=datetime(2026, 1, 2, tzinfo=UTC),
        pages=2,
    )
    assert params == [
        ("q", "lens"),
        ("k", "3"),
        ("since", "2026-01-02T00:00:00+00:00"),
        ("pages", "2"),
        ("document", str(doc)),
        ("type", "application/pdf"),
        ("type", "text/markdown"),
        ("meta", "team=a"),
    ]


def test_citation_and_filters() -> None:
    hit = Answer(
        score=0.5,
        document_id=uuid.uuid4(),
        filename="a.pdf",
        collection="default",
        media_type="application/pdf",
        ordinal=4,
        generation=1,
        kind="text",
        page_start=3,
        page_end=4,
        text="t",
    )
    cited = _core.citation(hit)
    assert cited["pages"] == "3-4" and cited["chunk_id"] == f"{hit.document_id}:4"
    assert cited["file"] == "a.pdf" and cited["uri"] is None and cited["score"] == 0.5
    with pytest.raises(BadRequest, match="unknown search filter 'k'"):
        _core.checked_filters({"k": 3})


def test_document_id_refuses_text_that_is_no_uuid() -> None:
    with pytest.raises(BadRequest, match="not a document id"):
        _core.document_id("../etc")


def test_the_client_loads_no_web_framework_or_pipeline() -> None:
    code = (
        "import sys, stages.client; "
        "bad = [m for m in ('litestar', 'uvicorn', 'stages.serve', 'stages.actions', "
        "'stages.pipeline', 'pymupdf', 'cohere') if m in sys.modules]; print(bad)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def _stream_of(body: bytes, seen: list[httpx.Request]) -> httpx.MockTransport:
    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body)

    return httpx.MockTransport(answer)


def test_events_raise_when_the_server_pruned_what_was_missed() -> None:
    """``event: reset`` (the server no longer has the events after Last-Event-ID)."""
    seen: list[httpx.Request] = []
    body = b": hello\nretry: 10\n\nevent: reset\ndata: events were pruned; reload\n\n"
    http = httpx.Client(base_url="http://ragline.test", transport=_stream_of(body, seen))
    with Client(http=http) as client, pytest.raises(EventsPruned):
        next(iter(client.events(last_event_id=41)))
    assert seen[0].headers["last-event-id"] == "41"


def test_events_resume_from_the_last_one_given_after_a_drop() -> None:
    seen: list[httpx.Request] = []
    event = {
        "id": 5,
        "document_id": str(uuid.uuid4()),
        "status": "ready",
        "stage": None,
        "error": None,
        "filename": "a.md",
        "generation": 1,
    }
    data = msgspec.json.encode(event)
    body = b": hi\nretry: 1\n\nevent: document\nid: 5\ndata: " + data + b"\n\n"
    http = httpx.Client(base_url="http://ragline.test", transport=_stream_of(body, seen))
    with Client(http=http) as client:
        stream = client.events()
        assert next(stream).id == 5 and next(stream).id == 5  # the fake replays it
        stream.close()
    assert "last-event-id" not in seen[0].headers
    assert seen[1].headers["last-event-id"] == "5" and stream.connections == 2


def test_a_file_that_cannot_be_read_again_is_not_resent() -> None:
    class OneWay(io.RawIOBase):
        def readable(self) -> bool:
            return True

        def readinto(self, b: Any) -> int:
            return 0

    body = sync_body_of(io.BufferedReader(OneWay()))
    list(body())  # type: ignore[arg-type]
    with pytest.raises(ClientError, match="cannot be read again"):
        body()
