"""The asyncio client: :class:`AsyncClient` over ``httpx.AsyncClient``.

The same client as :class:`stages.client.sync.Client`, method for method, with ``await``
(and ``async for`` over :meth:`AsyncClient.events`); the docstrings there say what each
does. The parts without I/O (retry policy, decoding, errors, the SSE parser) are shared
(:mod:`stages.client._core`).
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar

import anyio
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
#: What ``upload`` takes: a path or the bytes.
Source = Path | str | bytes
Content = bytes | AsyncIterator[bytes] | None


class _NoEvents(Exception):
    """The events stream cannot be had here."""


class AsyncClient:
    """ragline's HTTP API for asyncio: ``async with AsyncClient(url, token=...) as c``."""

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8000",
        *,
        token: str | None = None,
        timeout_s: float = 30.0,
        retry: RetryPolicy | None = None,
        sse_read_timeout_s: float = 60.0,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        self.retry_policy = retry or RetryPolicy()
        self.sse_read_timeout_s = sse_read_timeout_s
        self._http = http or httpx.AsyncClient(base_url=base_url, timeout=timeout_s)
        if token:
            self._http.headers["Authorization"] = f"Bearer {token}"

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    # -- documents ---------------------------------------------------------------------------

    async def upload(
        self,
        source: Source,
        *,
        filename: str | None = None,
        collection: str | None = None,
        readers: Sequence[str] | str | None = None,
        meta: Mapping[str, str] | None = None,
        idempotency_key: str | None = None,
    ) -> Accepted:
        key = idempotency_key or _core.new_idempotency_key()
        body = _body_of(source)
        name = filename or (Path(source).name if isinstance(source, str | Path) else "upload")
        size = (
            len(source) if isinstance(source, bytes) else (await anyio.Path(source).stat()).st_size
        )
        headers = {
            "Idempotency-Key": key,
            "Content-Type": "application/octet-stream",
            "Content-Disposition": _core.disposition(name),
            "Content-Length": str(size),
        }
        params = _core.upload_params(collection, readers, meta)
        response = await self._send(
            "POST", "/v1/documents", params=params, headers=headers, content=body, resend=True
        )
        return _core.decoded(response, Accepted)

    async def get(self, document: DocumentRef) -> DocumentDetail:
        return await self._get(path_of(document), DocumentDetail)

    async def list_documents(
        self,
        *,
        status: str | None = None,
        stage: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> DocumentPage:
        params = _drop_none(status=status, stage=stage, limit=limit, cursor=cursor)
        return await self._get("/v1/documents", DocumentPage, params=params)

    async def documents(
        self, *, status: str | None = None, stage: str | None = None, page_size: int = 100
    ) -> AsyncIterator[DocumentOut]:
        cursor: str | None = None
        while True:
            page = await self.list_documents(
                status=status, stage=stage, limit=page_size, cursor=cursor
            )
            for doc in page.documents:
                yield doc
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    async def retry(self, document: DocumentRef) -> list[Requeued]:
        response = await self._send("POST", path_of(document) + "/retry")
        return _core.decoded(response, list[Requeued])

    async def reprocess(
        self,
        from_stage: str,
        *,
        ids: Sequence[DocumentRef] | None = None,
        all: bool = False,
        model: str | None = None,
        collection: str | None = None,
    ) -> Reprocessing:
        body: dict[str, Any] = {"from": from_stage, "all": all}
        if ids is not None:
            body["ids"] = [str(document_id(d)) for d in ids]
        body.update(_drop_none(model=model, collection=collection))
        response = await self._send("POST", "/v1/reprocess", json=body)
        return _core.decoded(response, Reprocessing)

    async def delete(self, document: DocumentRef) -> None:
        response, resent = await self._exchange("DELETE", path_of(document), resend=True)
        if response.status_code == 404 and resent:
            return
        _core.checked(response)

    async def stages(self) -> list[StageOut]:
        return await self._get("/v1/stages", list[StageOut])

    async def search(
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
        return await self._get("/v1/search", list[Answer], params=params)

    # -- waiting and events ------------------------------------------------------------------

    async def wait(
        self,
        document: DocumentRef,
        *,
        timeout_s: float | None = None,
        raise_on_failure: bool = True,
        poll_s: float = 1.0,
        use_events: bool = True,
    ) -> DocumentDetail:
        doc_id = document_id(document)
        deadline = _core.Deadline(timeout_s)
        while not deadline.passed():
            if use_events:
                try:
                    found = await self._wait_over_events(doc_id, deadline, raise_on_failure)
                except _NoEvents:
                    use_events = False
                    continue
            else:
                found = _core.finished(await self.get(doc_id), raise_on_failure)
            if found is not None:
                return found
            await anyio.sleep(deadline.cap(poll_s))
        raise WaitTimeout(f"document {doc_id} not ready after {timeout_s} s")

    def events(
        self, last_event_id: int | None = None, *, reconnect_timeout_s: float | None = 120.0
    ) -> AsyncEventStream:
        return AsyncEventStream(self, last_event_id, reconnect_timeout_s)

    # -- internals ---------------------------------------------------------------------------

    async def _get(self, url: str, type_: type[T], params: Any = None) -> T:
        response = await self._send("GET", url, params=params, resend=True)
        return _core.decoded(response, type_)

    async def _send(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        return (await self._exchange(method, url, **kwargs))[0]

    async def _exchange(
        self,
        method: str,
        url: str,
        *,
        resend: bool = False,
        content: Callable[[], Content] | None = None,
        **kwargs: Any,
    ) -> tuple[httpx.Response, bool]:
        attempt, broke = 0, False
        while True:
            body = content() if content is not None else None
            try:
                response = await self._http.request(method, url, content=body, **kwargs)
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
                retry = _core.should_retry(response)
                delay = self.retry_policy.delay(attempt, response) if retry else None
                if delay is None:
                    return response, broke
                await response.aclose()
            _core.log.info("%s %s: asking again in %.1f s", method, url, delay)
            await anyio.sleep(delay)
            attempt += 1

    @contextlib.asynccontextmanager
    async def _event_stream(
        self, last_event_id: int | None, read_timeout_s: float
    ) -> AsyncIterator[AsyncIterator[_core.SseMessage]]:
        timeout = httpx.Timeout(self._http.timeout.connect, read=read_timeout_s)
        headers = _core.events_headers(last_event_id)
        try:
            async with self._http.stream(
                "GET", "/v1/events", headers=headers, timeout=timeout
            ) as r:
                if r.status_code == 401:
                    await r.aread()
                    raise _core.error_of(r)
                if not _core.is_event_stream(r):
                    raise _NoEvents(f"GET /v1/events answered {r.status_code}")
                yield _messages(r)
        except _core.NOT_SENT as exc:
            raise _NoEvents(str(exc)) from exc

    async def _wait_over_events(
        self, doc_id: uuid.UUID, deadline: _core.Deadline, raise_on_failure: bool
    ) -> DocumentDetail | None:
        read_s = deadline.cap(self.sse_read_timeout_s) or 0.001
        try:
            async with self._event_stream(None, read_s) as messages:
                if await anext(messages, None) is None:  # the first comment: subscribed
                    return None
                found = _core.finished(await self.get(doc_id), raise_on_failure)
                while found is None and not deadline.passed():
                    msg = await anext(messages, None)
                    if msg is None:  # the stream ended
                        return None
                    if msg.event == "document" and _core.ends_wait(
                        _core.document_event(msg), doc_id
                    ):
                        found = _core.finished(await self.get(doc_id), raise_on_failure)
                return found
        except (*_core.CUT, httpx.StreamError):
            return None


class AsyncEventStream:
    """An async iterator of document events that reconnects by itself (see
    :meth:`stages.client.sync.Client.events`)."""

    def __init__(
        self, client: AsyncClient, last_event_id: int | None, reconnect_timeout_s: float | None
    ) -> None:
        self.client = client
        self.last_event_id = last_event_id
        self.reconnect_timeout_s = reconnect_timeout_s
        self.connections = 0
        self._retry_s = 2.0
        self._gen = self._run()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> DocumentEvent:
        while True:
            item = await anext(self._gen)
            if item is not None:  # None: a connection subscribed
                return item

    async def subscribe(self) -> Self:
        """Connect now, and return once the server has subscribed this stream (see
        :meth:`stages.client.sync.EventStream.subscribe`)."""
        if self.connections == 0 and await anext(self._gen) is not None:
            raise RuntimeError("an event before the subscription")  # pragma: no cover
        return self

    async def aclose(self) -> None:
        await self._gen.aclose()

    async def __aenter__(self) -> Self:
        return await self.subscribe()

    async def __aexit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def _run(self) -> AsyncGenerator[DocumentEvent | None, None]:
        failing_since: float | None = None
        while True:
            try:
                async with self.client._event_stream(
                    self.last_event_id, self.client.sse_read_timeout_s
                ) as messages:
                    failing_since = None
                    async for event in self._events(messages):
                        yield event
            except (_NoEvents, *_core.CUT, httpx.StreamError) as exc:
                _core.log.info("events stream dropped (%s); reconnecting", type(exc).__name__)
            failing_since = failing_since or time.monotonic()
            await self._pause(failing_since)

    async def _events(
        self, messages: AsyncIterator[_core.SseMessage]
    ) -> AsyncIterator[DocumentEvent | None]:
        first = True
        async for msg in messages:
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

    async def _pause(self, failing_since: float) -> None:
        limit = self.reconnect_timeout_s
        if limit == 0:
            raise StreamEnded()
        if limit is not None and time.monotonic() - failing_since > limit:
            url = self.client._http.base_url
            raise ConnectionFailed(f"events stream of {url}: no connection for {limit} s")
        await anyio.sleep(self._retry_s)


async def _messages(response: httpx.Response) -> AsyncIterator[_core.SseMessage]:
    parser = _core.SseParser()
    async for line in response.aiter_lines():
        msg = parser.feed(line)
        if msg is not None:
            yield msg


def _drop_none(**values: Any) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}


def _body_of(source: Source) -> Callable[[], Content]:
    """A fresh body for each try: the file read again from its start, in chunks."""
    if isinstance(source, bytes):
        return lambda: source
    path = Path(source)
    if not path.is_file():
        raise ClientError(f"{path}: no such file")
    return lambda: _chunks_of_path(path)


async def _chunks_of_path(path: Path) -> AsyncIterator[bytes]:
    async with await anyio.open_file(path, "rb") as f:
        while chunk := await f.read(_core.UPLOAD_CHUNK):
            yield chunk
