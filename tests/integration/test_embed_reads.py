"""The embed stage's one read (checkpoints.texts_to_embed): only the texts a model has no
vector for are shipped, each once, in reading order."""

from __future__ import annotations

import hashlib
import uuid

import asyncpg
import pytest

from stages.db import checkpoints

pytestmark = pytest.mark.anyio


def chunk(text: str) -> checkpoints.NewChunk:
    sha = hashlib.sha256(text.encode()).hexdigest()
    return checkpoints.NewChunk(text=text, page_start=1, page_end=1, sha256=sha)


async def new_document(conn: asyncpg.Connection) -> uuid.UUID:
    doc_id = uuid.uuid4()
    await conn.execute(
        "INSERT INTO documents (id, filename, media_type, byte_size, sha256)"
        " VALUES ($1, 'x.pdf', 'application/pdf', 1, $2)",
        doc_id,
        doc_id.hex,
    )
    return doc_id


async def test_only_uncached_texts_are_read_once_each_in_order(dsn: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        doc = await new_document(conn)
        texts = ["tides", "cached", "spring tides", "tides", "neap", "cached"]
        chunks = [chunk(t) for t in texts]
        await checkpoints.replace_text_chunks(conn, doc, 1, chunks)
        await checkpoints.insert_embeddings(conn, "m1", [(chunks[1].sha256, [0.5, 0.5])])

        found = await checkpoints.texts_to_embed(conn, doc, "m1")
        assert found.texts == 4  # distinct texts, cached or not
        assert list(found.misses.values()) == ["tides", "spring tides", "neap"]
        assert all(hashlib.sha256(t.encode()).hexdigest() == s for s, t in found.misses.items())

        other = await checkpoints.texts_to_embed(conn, doc, "m2")  # another model's cache
        assert list(other.misses.values()) == ["tides", "cached", "spring tides", "neap"]

        empty = await checkpoints.texts_to_embed(conn, await new_document(conn), "m1")
        assert (empty.texts, empty.misses) == (0, {})
    finally:
        await conn.close()


async def test_the_read_looks_each_text_up_by_key_as_a_generic_plan(dsn: str) -> None:
    """Workers run it as a prepared (generic) plan: each chunk's vector is an index lookup,
    never a scan or hash of the model's whole cache (EXISTS was planned as one)."""
    conn = await asyncpg.connect(dsn)
    try:
        doc = await new_document(conn)
        chunks = [chunk(f"text {i}") for i in range(500)]
        await checkpoints.replace_text_chunks(conn, doc, 1, chunks)
        await checkpoints.insert_embeddings(conn, "m1", [(c.sha256, [1.0]) for c in chunks[::2]])
        # A cache of other documents' texts, so that reading it whole is not cheap.
        others = [hashlib.sha256(str(i).encode()).hexdigest() for i in range(20_000)]
        await checkpoints.insert_embeddings(conn, "m1", [(sha, [1.0]) for sha in others])
        await conn.execute("ANALYZE chunks, embeddings")
        await conn.execute("SET plan_cache_mode = force_generic_plan")
        sql = checkpoints.Q["document_texts_to_embed"]
        await conn.execute(f"PREPARE texts_to_embed (uuid, text) AS {sql}")
        plan = "\n".join(
            r[0] for r in await conn.fetch(f"EXPLAIN EXECUTE texts_to_embed('{doc}', 'm1')")
        )
        assert "embeddings_pkey" in plan, plan
        assert "Seq Scan on embeddings" not in plan and "Hashed" not in plan, plan
    finally:
        await conn.close()
