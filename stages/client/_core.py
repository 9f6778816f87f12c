"""What the sync and the async client share, without I/O: the retry policy, how an answer
becomes a struct or an exception, search's query string, and the SSE parser."""

from __future__ import annotations

import logging
import random
import time
import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar

import httpx
import msgspec

from runtime.api import parse_retry_after
from stages.client.errors import (
    BY_STATUS,
    ApiError,
    BadRequest,
    ConnectionFailed,
    DocumentDeleted,
    DocumentFailed,
)
from stages.ports.http import (
    Accepted,
    Answer,
    DocumentDetail,
    DocumentEvent,
    DocumentOut,
    Problem,
)

log = logging.getLogger("stages.client")

T = TypeVar("T")

PROBLEM_JSON = "application/problem+json"
#: Statuses that say "later": the client waits (``Retry-After`` when given) and asks again.
RETRY_STATUSES = frozenset({429, 503})
#: A document's states that end a wait.
TERMINAL = frozenset({"ready", "failed"})
#: Bytes per read of a file being uploaded.
UPLOAD_CHUNK = 1 << 20
#: Transport errors after which the request surely never reached the server's handler.
NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
#: Transport errors in the middle of an exchange: the server may or may not have acted.
CUT = (httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError, httpx.ReadTimeout)


class RetryPolicy(msgspec.Struct, frozen=True, kw_only=True):
    """How often and how long the client asks again after a 429, a 503 or a connection
    that failed. Delays double from ``backoff_s`` up to ``max_backoff_s`` (with jitter);
    a ``Retry-After`` the server sends is the delay instead, unless it is over
    ``max_retry_after_s``, when the client raises at once."""

    retries: int = 5
    backoff_s: float = 0.5
    max_backoff_s: float = 10.0
    max_retry_after_s: float = 120.0

    def backoff(self, attempt: int) -> float:
        delay: float = min(self.max_backoff_s, self.backoff_s * 2**attempt)
        return delay * (0.5 + random.random() / 2)

    def delay(self, attempt: int, response: httpx.Response | None) -> float | None:
        """Seconds to wait before attempt ``attempt + 1``; None: give up."""
        if attempt >= self.retries:
            return None
        after = retry_after_s(response) if response is not None else None
        if after is None:
            return self.backoff(attempt)
        return after if after <= self.max_retry_after_s else None


def retry_after_s(response: httpx.Response) -> float | None:
    """``Retry-After`` in seconds: a number of seconds or an HTTP date; None if absent
    or unreadable."""
    return parse_retry_after(response.headers.get("retry-after"))


def should_retry(response: httpx.Response) -> bool:
    return response.status_code in RETRY_STATUSES


def error_of(response: httpx.Response) -> ApiError:
    """The exception for an error answer: its status's class, the problem's one line."""
    problem = _problem(response)
    cls = BY_STATUS.get(response.status_code, ApiError)
    if problem is not None:
        return cls(problem.detail, problem=problem)
    line = response.text.strip().splitlines()[0][:200] if response.text.strip() else ""
    said = f": {line}" if line else ""
    error = cls(f"HTTP {response.status_code} {response.reason_phrase}{said}")
    error.status = response.status_code
    return error


def _problem(response: httpx.Response) -> Problem | None:
    if not response.headers.get("content-type", "").startswith(PROBLEM_JSON):
        return None
    try:
        return msgspec.json.decode(response.content, type=Problem)
    except msgspec.ValidationError:
        return None


def decoded(response: httpx.Response, type_: type[T]) -> T:
    """The answer's body as ``type_``; the exception of its status if it is an error."""
    if response.is_error:
        raise error_of(response)
    return msgspec.json.decode(response.content, type=type_)


def checked(response: httpx.Response) -> None:
    if response.is_error:
        raise error_of(response)


def unreachable(url: str, exc: Exception) -> ConnectionFailed:
    return ConnectionFailed(f"cannot reach {url}: {type(exc).__name__}: {exc}".rstrip(": "))


def new_idempotency_key() -> str:
    return f"ragline-client-{uuid.uuid4()}"


def disposition(filename: str) -> str:
    """``Content-Disposition`` for a raw upload; a name that is not plain ASCII goes in
    RFC 5987 form too (the server keeps the display name only)."""
    ascii_name = filename.encode("ascii", "replace").decode().replace('"', "_").replace("\\", "_")
    header = f'attachment; filename="{ascii_name}"'
    if ascii_name != filename:
        from urllib.parse import quote

        header += f"; filename*=UTF-8''{quote(filename)}"
    return header


def upload_params(
    collection: str | None, readers: Sequence[str] | str | None, meta: Mapping[str, str] | None
) -> list[tuple[str, str]]:
    params: list[tuple[str, str]] = []
    if collection:
        params.append(("collection", collection))
    if readers is not None:
        params.append(("readers", readers if isinstance(readers, str) else ",".join(readers)))
    params += [("meta", f"{k}={v}") for k, v in (meta or {}).items()]
    return params


def search_params(
    q: str,
    k: int,
    *,
    collection: str | None = None,
    mode: str | None = None,
    documents: Sequence[uuid.UUID | str] = (),
    source: str | None = None,
    path: str | None = None,
    types: Sequence[str] = (),
    since: str | datetime | None = None,
    until: str | datetime | None = None,
    meta: Mapping[str, str] | None = None,
    pages: str | int | None = None,
    section: str | None = None,
) -> list[tuple[str, str]]:
    """``GET /v1/search``'s query string: the filters by the names of ``search``'s
    options (each repeatable one repeated)."""
    params: list[tuple[str, str]] = [("q", q), ("k", str(k))]
    single = {
        "collection": collection,
        "mode": mode,
        "source": source,
        "path": path,
        "since": _when(since),
        "until": _when(until),
        "pages": None if pages is None else str(pages),
        "section": section,
    }
    params += [(name, value) for name, value in single.items() if value is not None]
    params += [("document", str(d)) for d in documents]
    params += [("type", t) for t in types]
    params += [("meta", f"{k}={v}") for k, v in (meta or {}).items()]
    return params


def _when(value: str | datetime | None) -> str | None:
    return value.isoformat() if isinstance(value, datetime) else value


def finished(detail: DocumentDetail, raise_on_failure: bool) -> DocumentDetail | None:
    """The document if a wait ends with it (ready, or failed), else None."""
    if detail.status not in TERMINAL:
        return None
    if detail.status == "failed" and raise_on_failure:
        raise DocumentFailed(detail)
    return detail


def ends_wait(event: DocumentEvent, doc_id: uuid.UUID) -> bool:
    """Whether ``event`` may end a wait for ``doc_id`` (the document is then read again)."""
    if event.document_id != doc_id:
        return False
    if event.status == "deleted":
        raise DocumentDeleted(doc_id)
    return event.status in TERMINAL


class Deadline:
    """A wait's end, on the monotonic clock (None: never)."""

    def __init__(self, timeout_s: float | None) -> None:
        self.at = None if timeout_s is None else time.monotonic() + timeout_s

    def left_s(self) -> float | None:
        return None if self.at is None else max(0.0, self.at - time.monotonic())

    def passed(self) -> bool:
        return self.at is not None and time.monotonic() >= self.at

    def cap(self, delay_s: float) -> float:
        left = self.left_s()
        return delay_s if left is None else min(delay_s, left)


# -- Server-Sent Events ----------------------------------------------------------------------


class SseMessage(msgspec.Struct, frozen=True, kw_only=True):
    """One message of an event stream (a comment-only block has ``event`` None)."""

    event: str | None = None
    data: str = ""
    id: str | None = None
    retry_ms: int | None = None


class SseParser:
    """Lines in, messages out, as the HTML standard's event-stream interpretation reads
    them (only what ragline's server sends needs to be right; the rest is ignored)."""

    def __init__(self) -> None:
        self._event: str | None = None
        self._data: list[str] = []
        self._id: str | None = None
        self._retry: int | None = None
        self._seen = False

    def feed(self, line: str) -> SseMessage | None:
        """A line without its end; the message a blank line completes, if any."""
        if not line:
            return self._dispatch()
        self._seen = True
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        elif name == "id" and "\x00" not in value:
            self._id = value
        elif name == "retry" and value.isdigit():
            self._retry = int(value)
        return None

    def _dispatch(self) -> SseMessage | None:
        if not self._seen:
            return None
        msg = SseMessage(
            event=self._event or ("message" if self._data else None),
            data="\n".join(self._data),
            id=self._id,
            retry_ms=self._retry,
        )
        self._event, self._data, self._id, self._retry, self._seen = None, [], None, None, False
        return msg


_event_decoder = msgspec.json.Decoder(DocumentEvent)


def document_event(msg: SseMessage) -> DocumentEvent:
    return _event_decoder.decode(msg.data)


def events_headers(last_event_id: int | None) -> dict[str, str]:
    headers = {"Accept": "text/event-stream", "Cache-Control": "no-cache"}
    if last_event_id is not None:
        headers["Last-Event-ID"] = str(last_event_id)
    return headers


def is_event_stream(response: httpx.Response) -> bool:
    return response.status_code == 200 and response.headers.get("content-type", "").startswith(
        "text/event-stream"
    )


#: What names a document: its id (a UUID or its text), or a struct the API returned for it.
DocumentRef = uuid.UUID | str | Accepted | DocumentOut


def document_id(document: DocumentRef) -> uuid.UUID:
    """The id ``document`` names; a :class:`BadRequest` for text that is no UUID."""
    if isinstance(document, uuid.UUID):
        return document
    if isinstance(document, str):
        try:
            return uuid.UUID(document)
        except ValueError:
            raise BadRequest(f"not a document id: {document!r}") from None
    return document.id


#: Search's filters a retriever takes in ``filters`` (the keyword arguments of ``search``).
FILTERS = frozenset(
    {"documents", "source", "path", "types", "since", "until", "meta", "pages", "section"}
)


def checked_filters(filters: Mapping[str, Any]) -> dict[str, Any]:
    """``filters`` if each is one of search's, else a :class:`BadRequest` naming it."""
    unknown = sorted(set(filters) - FILTERS)
    if unknown:
        raise BadRequest(
            f"unknown search filter {unknown[0]!r}: one of {', '.join(sorted(FILTERS))}"
        )
    return dict(filters)


def citation(hit: Answer) -> dict[str, Any]:
    """A hit's citation, as the retrievers put it in a framework's document metadata:
    file, uri, pages, section, document and chunk ids, score, and the document's own
    metadata (under ``document_metadata``)."""
    pages = str(hit.page_start)
    if hit.page_end != hit.page_start:
        pages = f"{hit.page_start}-{hit.page_end}"
    return {
        "file": hit.filename,
        "uri": hit.uri,
        "page": hit.page_start,
        "page_end": hit.page_end,
        "pages": pages,
        "section": hit.section,
        "document_id": str(hit.document_id),
        "chunk_id": hit.chunk_id,
        "score": hit.score,
        "collection": hit.collection,
        "media_type": hit.media_type,
        "kind": hit.kind,
        "document_metadata": dict(hit.metadata),
    }


def path_of(document: DocumentRef) -> str:
    return f"/v1/documents/{document_id(document)}"
