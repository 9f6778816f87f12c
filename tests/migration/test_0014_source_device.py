"""Migration 0014 on a database synced before it: the oldest synced document of each
content no ordinary document holds becomes ordinary (unforced: submit finds it); the
others stay as they were, and no document is made or lost."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import asyncpg
import pytest

import schema
from bench.harness.db import Databases


def day(n: int) -> datetime:
    return datetime(2024, 1, n, tzinfo=UTC)


#: (name, collection, sha256, source, forced, created): documents as syncs before 0014 made
#: them (forced) beside submitted ones.
BEFORE = [
    ("x-one", "default", "x", 1, True, day(1)),  # the oldest synced copy of x
    ("x-two", "default", "x", 2, True, day(2)),
    ("y-sub", "default", "y", None, False, day(1)),  # y was submitted too
    ("y-syn", "default", "y", 1, True, day(2)),
    ("x-bird", "birds", "x", 3, True, day(3)),  # another collection: its own
]


@pytest.fixture
def empty_dsn(databases: Databases) -> Iterator[str]:
    with databases.fresh(migrated=False) as dsn:
        yield dsn


async def forced_after_0014(dsn: str) -> dict[str, bool]:
    conn = await asyncpg.connect(dsn)
    try:
        for version, _, sql in schema.migrations():
            if version < 14:
                await conn.execute(sql)
        for i, collection in ((1, "default"), (2, "default"), (3, "birds")):
            await conn.execute(
                """INSERT INTO sources (id, uri, collection) OVERRIDING SYSTEM VALUE
                   VALUES ($1, $2, $3)""",
                i,
                f"/data/{i}",
                collection,
            )
        for name, collection, sha, source, forced, created in BEFORE:
            await conn.execute(
                """INSERT INTO documents (id, filename, media_type, byte_size, sha256, forced,
                       collection, source_id, source_uri, created_at)
                   VALUES ($1, $2, 'application/pdf', 1, $3, $4, $5, $6, $7, $8)""",
                uuid.uuid4(),
                name,
                sha,
                forced,
                collection,
                source,
                None if source is None else name,
                created,
            )
        await conn.execute(next(sql for v, _, sql in schema.migrations() if v == 14))
        rows = await conn.fetch("SELECT filename, forced FROM documents")
        return {r["filename"]: r["forced"] for r in rows}
    finally:
        await conn.close()


def test_0014_makes_one_synced_document_per_content_ordinary(empty_dsn: str) -> None:
    assert asyncio.run(forced_after_0014(empty_dsn)) == {
        "x-one": False,
        "x-two": True,
        "y-sub": False,
        "y-syn": True,
        "x-bird": False,
    }
