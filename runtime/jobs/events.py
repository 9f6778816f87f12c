"""Document events: every change of a document's status or stage, live, for any listener.

A trigger on ``documents`` (migration 0005) records each change in ``document_events`` and
NOTIFYs ``ragline_events``, only while some process is registered in ``event_listeners``
(a NOTIFY takes a global lock until its commit is flushed). :class:`EventHub` is that
listener: it keeps its row fresh, LISTENs and fans each event out to bounded streams; a
subscriber that falls behind is dropped and resumes with :meth:`EventHub.replay`, as an
SSE client does with Last-Event-ID. More: docs/architecture.md, "Serving over HTTP".
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import socket
import uuid
from collections import deque
from collections.abc import Iterator
from typing import Any

import anyio
import asyncpg
import msgspec
from anyio.abc import TaskStatus
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

import schema
from runtime.db.connect import connect
from runtime.db.errors import CONNECTION_ERRORS
from runtime.jobs.postgres import Pool, to_struct
from runtime.providers.backoff import Reconnect

log = logging.getLogger(__name__)

E = schema.load("events")

CHANNEL = "ragline_events"
#: Seconds between a hub's listener heartbeats; the trigger trusts a row for 30 s.
DEFAULT_HEARTBEAT_S = 10.0
#: Events are kept this long for resuming streams.
DEFAULT_RETENTION_S = 3600.0
#: Events a subscriber may have pending before it is dropped.
SUBSCRIBER_BUFFER = 1000
#: Listener rows older than this belong to servers that died.
STALE_LISTENER_S = 300.0
_RECENT = 4096


class DocumentEvent(msgspec.Struct, frozen=True, kw_only=True):
    """A document's new state: ``status`` is its status, or ``deleted``."""

    id: int
    document_id: uuid.UUID
    status: str
    stage: str | None
    error: str | None
    filename: str
    generation: int


_decode = msgspec.json.Decoder(DocumentEvent)


class EventHub:
    """Listens for document events and hands them to subscribers."""

    def __init__(
        self,
        dsn: str,
        pool: Pool,
        *,
        heartbeat_s: float = DEFAULT_HEARTBEAT_S,
        retention_s: float = DEFAULT_RETENTION_S,
    ) -> None:
        self.dsn = dsn
        self.pool = pool
        self.heartbeat_s = heartbeat_s
        self.retention_s = retention_s
        self.id = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"
        self.listening = False
        self._subscribers: set[MemoryObjectSendStream[DocumentEvent]] = set()
        self._recent: deque[int] = deque(maxlen=_RECENT)
        self._last_id = 0

    @property
    def subscribers(self) -> int:
        return len(self._subscribers)

    def end_streams(self) -> None:
        """End every subscriber's stream (the server is shutting down)."""
        for send in list(self._subscribers):
            send.close()
        self._subscribers.clear()

    @contextlib.contextmanager
    def subscribe(self) -> Iterator[MemoryObjectReceiveStream[DocumentEvent]]:
        send, receive = anyio.create_memory_object_stream[DocumentEvent](SUBSCRIBER_BUFFER)
        self._subscribers.add(send)
        try:
            with receive:
                yield receive
        finally:
            self._subscribers.discard(send)
            send.close()

    async def replay(self, after_id: int, limit: int = 10_000) -> list[DocumentEvent]:
        rows = await self.pool.fetch(E["events_after"], after_id, limit)
        return [to_struct(DocumentEvent, r) for r in rows]

    async def oldest_id(self) -> int | None:
        value = await self.pool.fetchval(E["oldest_event_id"])
        return int(value) if value is not None else None

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Listen until cancelled, reconnecting when the database goes away."""
        reconnect = Reconnect()
        started = False
        try:
            while True:
                try:
                    await self._listen_once(reconnect, task_status if not started else None)
                except CONNECTION_ERRORS as exc:
                    log.warning("event listener lost the database: %s", exc)
                self.listening = False
                started = True
                await anyio.sleep(reconnect.next_s())
        finally:
            with anyio.CancelScope(shield=True), contextlib.suppress(*CONNECTION_ERRORS):
                await self.pool.execute(E["unregister_listener"], self.id)

    async def _listen_once(
        self, reconnect: Reconnect, task_status: TaskStatus[None] | None
    ) -> None:
        conn = await connect(self.dsn)
        try:
            closed = anyio.Event()
            conn.add_termination_listener(lambda _c: closed.set())
            await conn.add_listener(CHANNEL, self._on_notify)
            await conn.execute(E["register_listener"], self.id)
            reconnect.reset()
            self.listening = True
            await self._catch_up()
            if task_status is not None:
                task_status.started()
            while not conn.is_closed():
                with anyio.move_on_after(self.heartbeat_s):
                    await closed.wait()
                if not conn.is_closed():
                    await self._heartbeat(conn)
        finally:
            with anyio.CancelScope(shield=True), contextlib.suppress(*CONNECTION_ERRORS):
                await conn.close(timeout=2)

    async def _heartbeat(self, conn: asyncpg.Connection[Any]) -> None:
        await conn.execute(E["register_listener"], self.id)
        await conn.execute(E["prune_listeners"], STALE_LISTENER_S)
        await conn.execute(E["prune_events"], self.retention_s)

    async def _catch_up(self) -> None:
        """Events committed while the listener was away (after a reconnect)."""
        if self._last_id:
            for event in await self.replay(self._last_id):
                self._dispatch(event)

    def _on_notify(self, _conn: object, _pid: int, _channel: str, payload: object) -> None:
        try:
            event = _decode.decode(str(payload))
        except msgspec.DecodeError:
            log.warning("ignoring a malformed document event: %.200s", payload)
            return
        self._dispatch(event)

    def _dispatch(self, event: DocumentEvent) -> None:
        if event.id in self._recent:
            return
        self._recent.append(event.id)
        self._last_id = max(self._last_id, event.id)
        for send in list(self._subscribers):
            try:
                send.send_nowait(event)
            except anyio.WouldBlock:
                log.warning("dropping a slow event subscriber (it may resume)")
                self._subscribers.discard(send)
                send.close()
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                self._subscribers.discard(send)
