"""Document events: recorded and NOTIFYd only while a listener is registered; the hub fans
them out, drops a subscriber that falls behind, and catches up after losing its connection."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import anyio
import asyncpg
import pytest

from runtime.jobs import events as events_mod
from runtime.jobs.documents import DocumentRepository
from runtime.jobs.events import DocumentEvent, EventHub
from runtime.jobs.postgres import JobRepository
from runtime.models import NewDocument

pytestmark = pytest.mark.anyio  # on uvloop (conftest), as the server runs


@pytest.fixture
async def pool(dsn: str) -> AsyncIterator[asyncpg.Pool[Any]]:
    p = await asyncpg.create_pool(dsn, min_size=1, max_size=4)
    try:
        yield p
    finally:
        await p.close()


async def submit(pool: asyncpg.Pool[Any], name: str) -> uuid.UUID:
    doc = NewDocument(filename=name, media_type="application/pdf", byte_size=1, sha256=name)
    return (await DocumentRepository(pool).submit(doc, "parse")).document_id


async def event_rows(pool: asyncpg.Pool[Any]) -> int:
    return int(await pool.fetchval("SELECT count(*) FROM document_events"))


async def next_event(stream: Any) -> DocumentEvent:
    with anyio.fail_after(10):
        event: DocumentEvent = await stream.receive()
        return event


async def test_nothing_is_recorded_without_a_listener(pool: asyncpg.Pool[Any]) -> None:
    doc = await submit(pool, "quiet")
    await DocumentRepository(pool).reprocess(doc, "chunk")
    assert await event_rows(pool) == 0
    # A listener that stopped heartbeating (a dead server) no longer counts either.
    await pool.execute(
        "INSERT INTO event_listeners (id, last_seen_at) VALUES ('dead', now() - interval '31 s')"
    )
    await DocumentRepository(pool).reprocess(doc, "embed")
    assert await event_rows(pool) == 0


async def test_hub_streams_changes_and_replays_them(dsn: str, pool: asyncpg.Pool[Any]) -> None:
    hub = EventHub(dsn, pool)
    async with anyio.create_task_group() as tg:
        await tg.start(hub.run)
        with hub.subscribe() as stream:
            doc = await submit(pool, "live.pdf")
            docs = DocumentRepository(pool)
            await JobRepository(pool).retry_failed(None, None, [doc])  # nothing failed: no event
            await docs.reprocess(doc, "embed")
            await docs.delete([doc])
            got = [await next_event(stream) for _ in range(3)]
        tg.cancel_scope.cancel()
    assert [(e.status, e.stage, e.generation) for e in got] == [
        ("pending", "parse", 1),
        ("pending", "embed", 2),
        ("deleted", "embed", 2),
    ]
    assert {e.document_id for e in got} == {doc} and got[0].filename == "live.pdf"
    assert [e.id for e in await hub.replay(got[0].id)] == [got[1].id, got[2].id]
    # The hub unregistered as it stopped: changes are no longer recorded.
    assert await pool.fetchval("SELECT count(*) FROM event_listeners") == 0
    await submit(pool, "after.pdf")
    assert await event_rows(pool) == 3


async def test_a_subscriber_that_falls_behind_is_dropped(
    dsn: str, pool: asyncpg.Pool[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(events_mod, "SUBSCRIBER_BUFFER", 2)
    hub = EventHub(dsn, pool)
    async with anyio.create_task_group() as tg:
        await tg.start(hub.run)
        with hub.subscribe() as slow, hub.subscribe() as fast:
            for i in range(4):
                await submit(pool, f"many-{i}")
                await next_event(fast)
            # The slow one keeps what fit, then its stream ends: it resumes by replay.
            assert [(await next_event(slow)).filename for _ in range(2)] == ["many-0", "many-1"]
            with pytest.raises(anyio.EndOfStream):
                await next_event(slow)
        tg.cancel_scope.cancel()


async def test_hub_catches_up_after_its_connection_is_killed(
    dsn: str, pool: asyncpg.Pool[Any]
) -> None:
    hub = EventHub(dsn, pool, heartbeat_s=600)
    async with anyio.create_task_group() as tg:
        await tg.start(hub.run)
        with hub.subscribe() as stream:
            await submit(pool, "before.pdf")
            assert (await next_event(stream)).filename == "before.pdf"
            killed = await pool.fetchval(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                # the hub's own connection: the last thing it ran was its registration
                "WHERE query LIKE '%INSERT INTO event_listeners%' AND pid <> pg_backend_pid() "
                "AND datname = current_database()"
            )
            assert killed == 1
            # Committed while nobody listens (the row is still fresh, so it is recorded).
            await submit(pool, "meanwhile.pdf")
            assert (await next_event(stream)).filename == "meanwhile.pdf"
            assert hub.listening
        tg.cancel_scope.cancel()
