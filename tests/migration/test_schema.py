"""The schema: migrations agree with schema.sql, enums with Python, the claim with its index."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import asyncpg
import pytest

import schema
from bench.harness.db import Databases, execute
from runtime.db.migrate import migrate, pending
from runtime.models import DocumentStatus, JobState
from runtime.worker.worker import WORKER_SESSION

CATALOG = {
    "columns": """SELECT table_name, column_name, data_type, udt_name, is_nullable,
                         column_default
                  FROM information_schema.columns WHERE table_schema = 'public'
                    AND table_name <> 'ragline_migrations' AND table_name <> 'test_effects'
                  ORDER BY 1, 2""",
    "indexes": """SELECT tablename, indexname, indexdef FROM pg_indexes
                  WHERE schemaname = 'public' AND tablename NOT IN ('ragline_migrations',
                  'test_effects') ORDER BY 1, 2""",
    "enums": """SELECT t.typname, e.enumlabel, e.enumsortorder FROM pg_enum e
                JOIN pg_type t ON t.oid = e.enumtypid ORDER BY 1, 3""",
    "triggers": """SELECT event_object_table, trigger_name, event_manipulation, action_timing,
                          action_condition, action_statement
                   FROM information_schema.triggers WHERE trigger_schema = 'public'
                   ORDER BY 1, 2, 3""",
    "functions": """SELECT p.proname, md5(p.prosrc) FROM pg_proc p
                    WHERE p.pronamespace = 'public'::regnamespace ORDER BY 1""",
    "constraints": """SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid)
                      FROM pg_constraint WHERE connamespace = 'public'::regnamespace
                        AND conrelid::regclass::text NOT IN ('ragline_migrations',
                        'test_effects')
                      ORDER BY 1, 2""",
}


async def snapshot(dsn: str) -> dict[str, list[tuple[Any, ...]]]:
    conn = await asyncpg.connect(dsn)
    try:
        return {k: [tuple(r) for r in await conn.fetch(q)] for k, q in CATALOG.items()}
    finally:
        await conn.close()


@pytest.fixture
def empty_dsn(databases: Databases) -> Iterator[str]:
    with databases.fresh(migrated=False) as dsn:
        yield dsn


def test_migrations_produce_schema_sql(dsn: str, empty_dsn: str) -> None:
    execute(empty_dsn, schema.read("schema.sql"))
    assert asyncio.run(snapshot(dsn)) == asyncio.run(snapshot(empty_dsn))


def test_migrate_is_idempotent_and_concurrent_safe(empty_dsn: str) -> None:
    async def go() -> list[list[int]]:
        conns = [await asyncpg.connect(empty_dsn) for _ in range(4)]
        try:
            assert await pending(conns[0]) == [v for v, _, _ in schema.migrations()]
            applied = await asyncio.gather(*(migrate(c) for c in conns))
            assert await pending(conns[0]) == []
            return list(applied)
        finally:
            for c in conns:
                await c.close()

    applied = asyncio.run(go())
    # Exactly one of the concurrent migrators applied each migration.
    flat = sorted(v for a in applied for v in a)
    assert flat == [v for v, _, _ in schema.migrations()]


def test_python_enums_match_postgres(dsn: str) -> None:
    rows = asyncio.run(snapshot(dsn))["enums"]
    labels: dict[str, list[str]] = {}
    for typname, label, _ in rows:
        labels.setdefault(typname, []).append(label)
    assert labels["ragline_job_state"] == [s.value for s in JobState]
    assert labels["ragline_document_status"] == [s.value for s in DocumentStatus]


def test_hot_statement_is_index_lookups_as_a_generic_plan(dsn: str) -> None:
    """Workers run complete_and_claim as a generic plan; with many finished rows it must
    walk stage_jobs_claim and look rows up by key, never scan a table."""

    async def go() -> str:
        conn = await asyncpg.connect(dsn)
        try:
            await conn.execute(
                """INSERT INTO documents (id, filename, media_type, byte_size, sha256)
                   SELECT gen_random_uuid(), 'x.pdf', 'application/pdf', 1, md5(g::text)
                   FROM generate_series(1, 2000) AS g"""
            )
            await conn.execute(
                """INSERT INTO stage_jobs (document_id, stage, generation, state)
                   SELECT d.id, s.stage, 1, 'succeeded'
                   FROM documents AS d, unnest(ARRAY['parse', 'chunk', 'embed']) AS s (stage),
                        generate_series(1, 4)"""
            )
            await conn.execute("ANALYZE documents, stage_jobs")
            sql = schema.load("stage_jobs")["complete_and_claim"]
            await conn.execute(
                "PREPARE hot (bigint[], uuid[], text[], timestamptz, text, float8, text[], int[],"
                " text[], int[]) AS " + sql
            )
            await conn.execute("SET plan_cache_mode = force_generic_plan")
            plan = await conn.fetch(
                """EXPLAIN EXECUTE hot (ARRAY[1]::bigint[], ARRAY[gen_random_uuid()],
                   ARRAY['chunk'], NULL, 'w', 30.0, ARRAY['parse'], ARRAY[4],
                   ARRAY['parse'], ARRAY[1])"""
            )
            return "\n".join(r[0] for r in plan)
        finally:
            await conn.close()

    plan = asyncio.run(go())
    assert "stage_jobs_claim" in plan, plan
    assert "Seq Scan" not in plan, plan


def test_hot_statement_planned_on_a_fresh_queue_takes_rows_by_key(dsn: str) -> None:
    """A worker's generic plan is made once per connection, often while stage_jobs is
    small and never analyzed, and kept as the table grows: with the worker's session
    settings it must take the rows a completion holds and a claim leases by primary key,
    not read stage_jobs whole or walk every running job's stage_jobs_expiry entry."""

    async def go() -> tuple[str, str]:
        conn = await asyncpg.connect(dsn, server_settings=WORKER_SESSION)
        try:
            await conn.execute(
                """INSERT INTO documents (id, filename, media_type, byte_size, sha256)
                   SELECT gen_random_uuid(), 'x.pdf', 'application/pdf', 1, md5(g::text)
                   FROM generate_series(1, 3000) AS g"""
            )
            # The queue the plan is made on: 20 parse jobs, nothing analyzed.
            await conn.execute(
                """INSERT INTO stage_jobs (document_id, stage, generation)
                   SELECT id, 'parse', 1 FROM documents LIMIT 20"""
            )
            sql = schema.load("stage_jobs")["complete_and_claim"]
            await conn.execute(
                "PREPARE hot (bigint[], uuid[], text[], timestamptz, text, float8, text[], int[],"
                " text[], int[]) AS " + sql
            )
            explain = """EXPLAIN EXECUTE hot (ARRAY[1]::bigint[], ARRAY[gen_random_uuid()],
                         ARRAY['chunk'], NULL, 'w', 30.0, ARRAY['parse'], ARRAY[4],
                         ARRAY['parse'], ARRAY[1])"""
            first = "\n".join(r[0] for r in await conn.fetch(explain))
            # The run goes on: thousands of jobs, running and finished; no ANALYZE.
            await conn.execute(
                """INSERT INTO stage_jobs (document_id, stage, generation, state, lease_token,
                                          lease_expires_at)
                   SELECT d.id, s.stage, 1, 'running', gen_random_uuid(), now()
                   FROM documents AS d, unnest(ARRAY['chunk', 'embed']) AS s (stage)"""
            )
            later = "\n".join(r[0] for r in await conn.fetch(explain))
            return first, later
        finally:
            await conn.close()

    first, later = asyncio.run(go())
    assert first == later  # the plan made on the small queue is the one kept
    assert "Seq Scan on stage_jobs" not in later, later
    assert "stage_jobs_expiry" not in later, later
    assert "stage_jobs_pkey" in later, later


def test_image_chunks_are_deleted_through_their_own_index(dsn: str) -> None:
    """Vision replaces a document's image chunks: the delete must find them through
    chunks_images, not walk the document's text chunks (and their dead versions)."""

    async def go() -> str:
        conn = await asyncpg.connect(dsn)
        try:
            doc = await conn.fetchval(
                """INSERT INTO documents (id, filename, media_type, byte_size, sha256)
                   VALUES (gen_random_uuid(), 'x.pdf', 'application/pdf', 1, 'x') RETURNING id"""
            )
            await conn.execute(
                """INSERT INTO chunks (document_id, ordinal, kind, text, page_start, page_end,
                                       sha256, generation)
                   SELECT $1, g, CASE WHEN g > 4990 THEN 'image' ELSE 'text'
                                 END::ragline_chunk_kind, 'text', 1, 1, md5(g::text), 1
                   FROM generate_series(0, 4999) AS g""",
                doc,
            )
            await conn.execute("ANALYZE chunks")
            sql = schema.load("pipeline")["delete_image_chunks"]
            await conn.execute("PREPARE forget (uuid) AS " + sql)
            await conn.execute("SET plan_cache_mode = force_generic_plan")
            plan = await conn.fetch(f"EXPLAIN EXECUTE forget ('{doc}')")
            return "\n".join(r[0] for r in plan)
        finally:
            await conn.close()

    plan = asyncio.run(go())
    assert "chunks_images" in plan, plan


def test_every_named_query_is_loadable_and_unique() -> None:
    for group in ("stage_jobs", "documents", "workers", "migrations", "status", "pipeline"):
        queries = schema.load(group)
        assert queries and all(q.strip() for q in queries.values())


def test_0003_converts_cached_vectors_to_bytes(empty_dsn: str) -> None:
    """Embeddings cached as real[] by 0002 come out of 0003 as the same numbers."""
    from stages.db.checkpoints import vector_of

    async def go() -> list[tuple[str, int, list[float]]]:
        conn = await asyncpg.connect(empty_dsn)
        try:
            for version, _, sql in schema.migrations():
                if version < 3:
                    await conn.execute(sql)
            await conn.execute(
                """INSERT INTO embeddings (model, sha256, dimensions, vector) VALUES
                   ('m', 'a', 3, '{1.5,-2,0.25}'), ('m', 'b', 2, '{3.0e-7,65504}')"""
            )
            await conn.execute(next(sql for v, _, sql in schema.migrations() if v == 3))
            rows = await conn.fetch("SELECT sha256, dimensions, vector FROM embeddings ORDER BY 1")
            return [(r[0], r[1], list(vector_of(r[2]) or [])) for r in rows]
        finally:
            await conn.close()

    rows = asyncio.run(go())
    assert rows[0] == ("a", 3, [1.5, -2.0, 0.25])
    assert rows[1][:2] == ("b", 2) and rows[1][2] == pytest.approx([3.0e-7, 65504.0], rel=1e-6)
