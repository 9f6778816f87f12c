"""``GET /v1/events``: document state changes as Server-Sent Events.

Each event is ``event: document``, ``id: <event id>`` and a JSON ``data`` line naming the
document and its new status and stage. A client that reconnects with ``Last-Event-ID``
(browsers' EventSource does it by itself) first gets the events it missed, from
``document_events``; if some were already pruned it gets ``event: reset`` (reload the
list). Comment lines every ``RAGLINE_SSE_HEARTBEAT_S`` keep proxies from closing an idle
stream. The events come from LISTEN/NOTIFY through the server's one
:class:`runtime.jobs.events.EventHub`, never from polling. A caller with principals gets
only the events of documents it may read (:class:`stages.serve.access.EventTrim`).
"""

from __future__ import annotations

import re
from collections.abc import AsyncGenerator
from typing import Annotated, Any

import anyio
import msgspec
from litestar import Request, get
from litestar.datastructures import State
from litestar.params import Parameter
from litestar.response import ServerSentEvent, ServerSentEventMessage

from runtime.api import DocumentEvent, EventHub
from stages.serve.access import EventTrim
from stages.serve.auth import caller_of
from stages.serve.context import ServeContext
from stages.serve.problems import problem, problems

#: Browsers reconnect after this many milliseconds when the stream drops.
RETRY_MS = 2000
_encode = msgspec.json.Encoder()


def message(event: DocumentEvent) -> ServerSentEventMessage:
    return ServerSentEventMessage(
        data=_encode.encode(event).decode(), event="document", id=str(event.id)
    )


async def resume(
    hub: EventHub, last_id: int, trim: EventTrim
) -> AsyncGenerator[ServerSentEventMessage, None]:
    oldest = await hub.oldest_id()
    if oldest is not None and last_id < oldest - 1:
        yield ServerSentEventMessage(data="events were pruned; reload", event="reset")
    for event in await trim.allowed(await hub.replay(last_id)):
        yield message(event)


async def stream(
    hub: EventHub, last_id: int | None, heartbeat_s: float, trim: EventTrim
) -> AsyncGenerator[ServerSentEventMessage, None]:
    with hub.subscribe() as live:
        yield ServerSentEventMessage(data=None, comment="ragline document events", retry=RETRY_MS)
        replayed: set[int] = set()
        if last_id is not None:
            async for msg in resume(hub, last_id, trim):
                if msg.id is not None:
                    replayed.add(int(msg.id))
                yield msg
        while True:
            with anyio.move_on_after(heartbeat_s) as waited:
                try:
                    event = await live.receive()
                except anyio.EndOfStream:  # dropped as too slow: reconnect and resume
                    return
            if waited.cancelled_caught:
                yield ServerSentEventMessage(data=None, comment="heartbeat")
            elif event.id not in replayed:
                for shown in await trim.allowed([event]):
                    yield message(shown)


#: An event id as this server writes them (ASCII digits only: ``str.isdigit`` also takes
#: "²", which a header's byte 0xb2 decodes to, and ``int`` refuses it).
_EVENT_ID = re.compile(r"[0-9]{1,18}")


def parse_last_id(raw: str | None) -> int | None:
    """The event id to resume after; None for none. Anything else is a 400 (not ignored:
    ids come only from this server, so another value is a client's mistake to show)."""
    if raw is None or raw == "":
        return None
    if not _EVENT_ID.fullmatch(raw):
        raise problem(400, "Last-Event-ID must be an event id this server sent")
    return int(raw)


@get(
    "/v1/events",
    tags=["events"],
    media_type="text/event-stream",
    response_description="The stream: `event: document` messages, heartbeat comments",
    responses=problems(400, 401),
)
async def events(
    state: State,
    request: Request[Any, Any, Any],
    last_event_id: Annotated[
        str | None,
        Parameter(header="Last-Event-ID", schema_extra={"pattern": "^[0-9]{0,18}$"}),
    ] = None,
) -> ServerSentEvent:
    """Document state changes, live (SSE); resumable with Last-Event-ID. Only events of
    documents the caller may read (with a token that has principals)."""
    ctx: ServeContext = state.ctx
    last_id = parse_last_id(last_event_id)
    trim = EventTrim(ctx.pool, caller_of(request))
    return ServerSentEvent(stream(ctx.hub, last_id, ctx.config.sse_heartbeat_s, trim))
