"""document_counts (0022) equals a count of documents after every kind of write."""

from __future__ import annotations

import asyncpg
import pytest

pytestmark = pytest.mark.anyio

COUNTED = """SELECT collection, status::text, stage, sum(n)::int FROM document_counts
             GROUP BY 1, 2, 3 HAVING sum(n) <> 0 ORDER BY 1, 2, 3"""
COUNTED_BY_SCAN = """SELECT collection, status::text,
                            CASE WHEN status = 'failed' THEN coalesce(stage, '') ELSE '' END,
                            count(*)::int
                     FROM documents GROUP BY 1, 2, 3 ORDER BY 1, 2, 3"""
PER_SOURCE = """SELECT source_id, sum(n)::int FROM document_counts
                GROUP BY 1 HAVING sum(n) <> 0 ORDER BY 1"""
PER_SOURCE_BY_SCAN = """SELECT coalesce(source_id, 0), count(*)::int FROM documents
                        GROUP BY 1 ORDER BY 1"""
INSERT = """INSERT INTO documents (id, filename, media_type, byte_size, sha256, collection)
            SELECT gen_random_uuid(), 'f', 'text/plain', 1, md5(n::text || $2),
                   CASE WHEN n % 3 = 0 THEN 'team' ELSE 'default' END
            FROM generate_series(1, $1) AS n"""


async def agree(conn: asyncpg.Connection) -> list[tuple[str, str, str, int]]:
    counted = [tuple(r) for r in await conn.fetch(COUNTED)]
    assert counted == [tuple(r) for r in await conn.fetch(COUNTED_BY_SCAN)]
    per_source = [tuple(r) for r in await conn.fetch(PER_SOURCE)]
    assert per_source == [tuple(r) for r in await conn.fetch(PER_SOURCE_BY_SCAN)]
    return counted


async def test_counts_follow_inserts_updates_and_deletes(dsn: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(INSERT, 30, "a")
        assert sum(r[3] for r in await agree(conn)) == 30
        await conn.execute("UPDATE documents SET status = 'processing', stage = 'chunk'")
        await agree(conn)
        await conn.execute(
            "UPDATE documents SET status = 'failed' WHERE ctid IN "
            "(SELECT ctid FROM documents WHERE collection = 'team' LIMIT 4)"
        )
        await conn.execute("UPDATE documents SET stage = 'embed' WHERE status = 'processing'")
        source = await conn.fetchval("INSERT INTO sources (uri) VALUES ('/s') RETURNING id")
        await conn.execute(
            "UPDATE documents SET source_id = $1, source_uri = id::text WHERE collection = 'team'",
            source,
        )
        assert ("team", "failed", "chunk", 4) in await agree(conn)
        await conn.execute("UPDATE documents SET collection = 'other' WHERE status = 'failed'")
        await conn.execute("DELETE FROM documents WHERE collection = 'default'")
        assert sum(r[3] for r in await agree(conn)) == 10
        async with conn.transaction():
            await conn.execute(INSERT, 5, "b")
            await conn.execute("UPDATE documents SET status = 'ready'")
        assert [r[3] for r in await agree(conn)] == [4, 4, 7]  # default, other, team
        await conn.execute("TRUNCATE documents CASCADE")
        assert await agree(conn) == []
    finally:
        await conn.close()


async def test_concurrent_writers_keep_the_count(dsn: str) -> None:
    conns = [await asyncpg.connect(dsn) for _ in range(4)]
    try:
        for i, conn in enumerate(conns):
            await conn.execute(INSERT, 25, str(i))
        await conns[0].execute("UPDATE documents SET status = 'ready'")
        assert await agree(conns[1]) == [("default", "ready", "", 68), ("team", "ready", "", 32)]
    finally:
        for conn in conns:
            await conn.close()
