"""The blocking client: :class:`Client` over ``httpx.Client``.

Every answer is decoded into the struct the server encoded it from
(:mod:`stages.ports.http`); every error answer raises the exception of its problem kind
(:mod:`stages.client.errors`). 429 and 503 are asked again after ``Retry-After`` (or a
backoff), and so is a request whose connection failed before it was sent; an upload, a
read or a delete is also sent again when its connection broke midway (an upload carries
an ``Idempotency-Key``, so the server makes one document of both). :mod:`stages.client.aio`
is the same client for asyncio.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Self, TypeVar

import httpx

from stages.client import _core
from stages.client._core import DocumentRef, RetryPolicy, document_id, path_of
from stages.client.errors import (
    ClientError,
    ConnectionFailed,
    EventsPruned,
    StreamEnded,
    WaitTimeout,
)
from stages.ports.http import (
    Accepted,
    Answer,
    DocumentDetail,
    DocumentEvent,
    DocumentOut,
    DocumentPage,
    Reprocessing,
    Requeued,
    StageOut,
)

T = TypeVar("T")
#: What ``upload`` takes: a path, the bytes, or a binary file open for reading.
Source = Path | str | bytes | IO[bytes]
Content = bytes | Iterator[bytes] | None


class _NoEvents(Exception):
    """The events stream cannot be had here (a proxy that does not pass it, an old server)."""


class Client:
    """ragline's HTTP API, blocking. ``Client("http://127.0.0.1:8000", token=...)``; use it
    as a context manager (or call :meth:`close`) to close its connections."""

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8000",
        *,
        token: str | None = None,
        timeout_s: float = 30.0,
        retry: RetryPolicy | None = None,
        sse_read_timeout_s: float = 60.0,
        http: httpx.Client | None = None,
    ) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.retry_policy = retry or RetryPolicy()
        #: Seconds without a byte (not even a heartbeat) before an event stream is dropped
        #: and opened again (the server sends a heartbeat every RAGLINE_SSE_HEARTBEAT_S).
        self.sse_read_timeout_s = sse_read_timeout_s
        self._http = http or httpx.Client(base_url=base_url, timeout=timeout_s)
        self._http.headers.update(headers)

    # -- lifecycle ---------------------------------------------------------------------------

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- documents ---------------------------------------------------------------------------

    def upload(
        self,
        source: Source,
        *,
        filename: str | None = None,
        collection: str | None = None,
        readers: Sequence[str] | str | None = None,
        meta: Mapping[str, str] | None = None,
        idempotency_key: str | None = None,
    ) -> Accepted:
        """Upload a file, streamed (never read whole), under an ``Idempotency-Key`` (a new
        one unless given): a retry after a broken connection, by the client or by the
        caller with the same key, makes no second document. ``created`` is False when the
        same bytes (or the same key) were there already. ``readers``: who may read it
        (``"*"``: every caller); ``meta``: its metadata."""
        key = idempotency_key or _core.new_idempotency_key()
        name = filename or _name_of(source)
        headers = {
            "Idempotency-Key": key,
            "Content-Type": "application/octet-stream",
            "Content-Disposition": _core.disposition(name),
        }
        body = _body_of(source)
        size = _size_of(source)
        if size is not None:
            headers["Content-Length"] = str(size)
        params = _core.upload_params(collection, readers, meta)
        response = self._send(
            "POST", "/v1/documents", params=params, headers=headers, content=body, resend=True
        )
        return _core.decoded(response, Accepted)

    def get(self, document: DocumentRef) -> DocumentDetail:
        """A document: status, stage timeline with attempts, counts, why it waits."""
        return self._get(path_of(document), DocumentDetail)

    def list_documents(
        self,
        *,
        status: str | None = None,
        stage: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> DocumentPage:
        """One page of documents, newest first; ``next_cursor`` asks for the next."""
        params = _drop_none(status=status, stage=stage, limit=limit, cursor=cursor)
        return self._get("/v1/documents", DocumentPage, params=params)

    def documents(
        self, *, status: str | None = None, stage: str | None = None, page_size: int = 100
    ) -> Iterator[DocumentOut]:
        """Every document (that the caller may read), newest first, page by page."""
        cursor: str | None = None
        while True:
            page = self.list_documents(status=status, stage=stage, limit=page_size, cursor=cursor)
            yield from page.documents
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def retry(self, document: DocumentRef) -> list[Requeued]:
        """Run a failed document's failed stage again (a fresh attempt budget); a
        :class:`Conflict` when nothing of it failed."""
        response = self._send("POST", path_of(document) + "/retry")
        return _core.decoded(response, list[Requeued])

    def reprocess(
        self,
        from_stage: str,
        *,
        ids: Sequence[DocumentRef] | None = None,
        all: bool = False,
        model: str | None = None,
        collection: str | None = None,
    ) -> Reprocessing:
        """Run documents again from ``from_stage``: those of ``ids``, ``all`` of them, or
        those without vectors of ``model``; only ``collection``'s when given."""
        body: dict[str, Any] = {"from": from_stage, "all": all}
        if ids is not None:
            body["ids"] = [str(document_id(d)) for d in ids]
        body.update(_drop_none(model=model, collection=collection))
        response = self._send("POST", "/v1/reprocess", json=body)
        return _core.decoded(response, Reprocessing)

    def delete(self, document: DocumentRef) -> None:
        """Delete a document: rows, stored files, vector points. A :class:`NotFound` when
        there is none, except after a broken connection: the first try deleted it."""
        response, resent = self._exchange("DELETE", path_of(document), resend=True)
        if response.status_code == 404 and resent:
            return
        _core.checked(response)

    def stages(self) -> list[StageOut]:
        """Per stage: queue depth, backing off, running, failed, oldest ages, workers."""
        return self._get("/v1/stages", list[StageOut])

    # -- search ------------------------------------------------------------------------------

    def search(
        self,
        q: str,
        *,
        k: int = 5,
        collection: str | None = None,
        mode: str | None = None,
        documents: Sequence[DocumentRef] = (),
        source: str | None = None,
        path: str | None = None,
        types: Sequence[str] = (),
        since: str | datetime | None = None,
        until: str | datetime | None = None,
        meta: Mapping[str, str] | None = None,
        pages: str | int | None = None,
        section: str | None = None,
    ) -> list[Answer]:
        """The ``k`` best chunks for ``q`` (``mode``: hybrid, dense or keyword), only those
        every filter allows (the names of ``ragline search``'s options): each with its
        score, file, uri, pages, section, text and the document's metadata."""
        params = _core.search_params(
            q,
            k,
            collection=collection,
            mode=mode,
            documents=[document_id(d) for d in documents],
            source=source,
            path=path,
            types=types,
            since=since,
            until=until,
            meta=meta,
            pages=pages,
            section=section,
        )
        return self._get("/v1/search", list[Answer], params=params)

    # -- waiting and events ------------------------------------------------------------------

    def wait(
        self,
        document: DocumentRef,
        *,
        timeout_s: float | None = None,
        raise_on_failure: bool = True,
        poll_s: float = 1.0,
        use_events: bool = True,
    ) -> DocumentDetail:
        """Block until the document is ready (or failed) and return it. It listens to the
        server's event stream and reads the document when an event says it changed;
        where the stream cannot be had it reads the document every ``poll_s``. A failed
        document raises :class:`DocumentFailed` (unless ``raise_on_failure`` is False), a
        deleted one :class:`DocumentDeleted`, and ``timeout_s`` passing
        :class:`WaitTimeout`. A provider outage only makes it wait longer."""
        doc_id = document_id(document)
        deadline = _core.Deadline(timeout_s)
        while not deadline.passed():
            if use_events:
                try:
                    found = self._wait_over_events(doc_id, deadline, raise_on_failure)
                except _NoEvents:
                    use_events = False
                    continue
            else:
                found = _core.finished(self.get(doc_id), raise_on_failure)
            if found is not None:
                return found
            time.sleep(deadline.cap(poll_s))  # polling, or the stream dropped: not at once
        raise WaitTimeout(f"document {doc_id} not ready after {timeout_s} s")

    def events(
        self, last_event_id: int | None = None, *, reconnect_timeout_s: float | None = 120.0
    ) -> EventStream:
        """Document state changes, as they happen: an iterator of
        :class:`~stages.ports.http.DocumentEvent`. When the connection drops (the server
        restarts, a proxy times out) it reconnects with ``Last-Event-ID`` and goes on
        from the event after the last one it gave, so none is lost or seen twice; it
        gives up after ``reconnect_timeout_s`` of failed reconnects (None: never; 0: no
        reconnect, :class:`StreamEnded` instead). Start from ``last_event_id`` to resume
        an earlier stream (``EventStream.last_event_id``)."""
        return EventStream(self, last_event_id, reconnect_timeout_s)

    # -- internals ---------------------------------------------------------------------------

    def _get(self, url: str, type_: type[T], params: Any = None) -> T:
        response = self._send("GET", url, params=params, resend=True)
        return _core.decoded(response, type_)

    def _send(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        return self._exchange(method, url, **kwargs)[0]

    def _exchange(
        self,
        method: str,
        url: str,
        *,
        resend: bool = False,
        content: Callable[[], Content] | None = None,
        **kwargs: Any,
    ) -> tuple[httpx.Response, bool]:
        """Send, and again after a 429 or 503, or a connection that failed before the
        request went out; with ``resend``, also after one that broke midway (the request
        may have been carried out: only for reads, deletes and keyed uploads). The answer,
        and whether it came after such a break."""
        attempt, broke = 0, False
        while True:
            body = content() if content is not None else None
            try:
                response = self._http.request(method, url, content=body, **kwargs)
            except _core.NOT_SENT as exc:
                delay = self.retry_policy.delay(attempt, None)
                if delay is None:
                    raise _core.unreachable(str(self._http.base_url), exc) from exc
            except _core.CUT as exc:
                delay = self.retry_policy.delay(attempt, None) if resend else None
                if delay is None:
                    raise _core.unreachable(str(self._http.base_url), exc) from exc
                broke = True
            else:
                delay = (
                    self.retry_policy.delay(attempt, response)
                    if _core.should_retry(response)
                    else None
                )
                if delay is None:
                    return response, broke
                response.close()
            _core.log.info("%s %s: asking again in %.1f s", method, url, delay)
            time.sleep(delay)
            attempt += 1

    @contextlib.contextmanager
    def _event_stream(
        self, last_event_id: int | None, read_timeout_s: float
    ) -> Iterator[Iterator[_core.SseMessage]]:
        """``GET /v1/events`` open, as its messages; :class:`_NoEvents` when the answer is
        not an event stream (a 401 raises: waiting longer will not help)."""
        timeout = httpx.Timeout(self._http.timeout.connect, read=read_timeout_s)
        headers = _core.events_headers(last_event_id)
        try:
            with self._http.stream("GET", "/v1/events", headers=headers, timeout=timeout) as r:
                if r.status_code == 401:
                    r.read()
                    raise _core.error_of(r)
                if not _core.is_event_stream(r):
                    raise _NoEvents(f"GET /v1/events answered {r.status_code}")
                yield _messages(r)
        except _core.NOT_SENT as exc:
            raise _NoEvents(str(exc)) from exc

    def _wait_over_events(
        self, doc_id: Any, deadline: _core.Deadline, raise_on_failure: bool
    ) -> DocumentDetail | None:
        """Subscribe, read the document, then read it again on each event that may end
        the wait. None: the stream ended or went quiet (or the deadline passed)."""
        read_s = deadline.cap(self.sse_read_timeout_s) or 0.001
        try:
            with self._event_stream(None, read_s) as messages:
                if next(messages, None) is None:  # the server's first comment: subscribed
                    return None
                found = _core.finished(self.get(doc_id), raise_on_failure)
                while found is None and not deadline.passed():
                    msg = next(messages, None)
                    if msg is None:  # the stream ended
                        return None
                    if msg.event == "document" and _core.ends_wait(
                        _core.document_event(msg), doc_id
                    ):
                        found = _core.finished(self.get(doc_id), raise_on_failure)
                return found
        except (*_core.CUT, httpx.StreamError):
            return None


class EventStream:
    """An iterator of document events that reconnects by itself (see
    :meth:`Client.events`). ``last_event_id`` is the id of the last event it gave."""

    def __init__(
        self, client: Client, last_event_id: int | None, reconnect_timeout_s: float | None
    ) -> None:
        self.client = client
        self.last_event_id = last_event_id
        self.reconnect_timeout_s = reconnect_timeout_s
        #: Streams subscribed so far (1 + reconnects).
        self.connections = 0
        self._retry_s = 2.0
        self._gen = self._run()

    def __iter__(self) -> Self:
        return self

    def __next__(self) -> DocumentEvent:
        while True:
            item = next(self._gen)
            if item is not None:  # None: a connection subscribed
                return item

    def subscribe(self) -> Self:
        """Connect now, and return once the server has subscribed this stream: every
        event from here on will be delivered (iterating connects by itself, but a change
        made before its first ``next`` may then go unseen)."""
        if self.connections == 0 and next(self._gen) is not None:
            raise RuntimeError("an event before the subscription")  # pragma: no cover
        return self

    def close(self) -> None:
        self._gen.close()

    def __enter__(self) -> Self:
        return self.subscribe()

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _run(self) -> Generator[DocumentEvent | None, None, None]:
        failing_since: float | None = None
        while True:
            try:
                with self.client._event_stream(
                    self.last_event_id, self.client.sse_read_timeout_s
                ) as messages:
                    failing_since = None
                    yield from self._events(messages)
            except (_NoEvents, *_core.CUT, httpx.StreamError) as exc:
                _core.log.info("events stream dropped (%s); reconnecting", type(exc).__name__)
            failing_since = failing_since or time.monotonic()
            self._pause(failing_since)

    def _events(self, messages: Iterator[_core.SseMessage]) -> Iterator[DocumentEvent | None]:
        first = True
        for msg in messages:
            if first:  # the server's opening comment: subscribed from here on
                self.connections, first = self.connections + 1, False
                yield None
            if msg.retry_ms is not None:
                self._retry_s = msg.retry_ms / 1000
            if msg.event == "reset":
                raise EventsPruned()
            if msg.event == "document":
                event = _core.document_event(msg)
                self.last_event_id = event.id
                yield event

    def _pause(self, failing_since: float) -> None:
        limit = self.reconnect_timeout_s
        if limit == 0:
            raise StreamEnded()
        if limit is not None and time.monotonic() - failing_since > limit:
            url = self.client._http.base_url
            raise ConnectionFailed(f"events stream of {url}: no connection for {limit} s")
        time.sleep(self._retry_s)


def _messages(response: httpx.Response) -> Iterator[_core.SseMessage]:
    parser = _core.SseParser()
    for line in response.iter_lines():
        msg = parser.feed(line)
        if msg is not None:
            yield msg


def _drop_none(**values: Any) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}


def _name_of(source: Source) -> str:
    if isinstance(source, str | Path):
        return Path(source).name
    name = getattr(source, "name", None)
    return Path(name).name if isinstance(name, str) else "upload"


def _size_of(source: Source) -> int | None:
    if isinstance(source, str | Path):
        return Path(source).stat().st_size
    if isinstance(source, bytes):
        return len(source)
    return None


def _body_of(source: Source) -> Callable[[], Content]:
    """A fresh body for each try: the file read again from its start, in chunks."""
    if isinstance(source, bytes):
        return lambda: source
    if isinstance(source, str | Path):
        path = Path(source)
        if not path.is_file():
            raise ClientError(f"{path}: no such file")
        return lambda: _chunks_of_path(path)
    start = source.tell() if source.seekable() else None
    tries = iter(range(2))

    def again() -> Iterator[bytes]:
        if start is not None:
            source.seek(start)
        elif next(tries) > 0:
            raise ClientError("the upload broke off and its file cannot be read again")
        return _chunks_of_file(source)

    return again


def _chunks_of_path(path: Path) -> Iterator[bytes]:
    with path.open("rb") as f:
        yield from _chunks_of_file(f)


def _chunks_of_file(f: IO[bytes]) -> Iterator[bytes]:
    while chunk := f.read(_core.UPLOAD_CHUNK):
        yield chunk
