"""bench.index_parts: the index stage's steps, timed one by one, write every point."""

from __future__ import annotations

import hashlib
import uuid
from pathlib import Path

import asyncpg
import pytest
import qdrant_edge as qe

from bench.index_parts import measure_index_parts
from bench.standins import ZeroEmbedder, hash_vectors
from stages.db import checkpoints
from stages.pipeline.index import SLICE_POINTS

pytestmark = pytest.mark.anyio


async def ready_document(conn: asyncpg.Connection, texts: list[str]) -> None:
    doc = uuid.uuid4()
    await conn.execute(
        "INSERT INTO documents (id, filename, media_type, byte_size, sha256, status)"
        " VALUES ($1, 'x.pdf', 'application/pdf', 1, $2, 'ready')",
        doc,
        doc.hex,
    )
    chunks = [
        checkpoints.NewChunk(
            text=t, page_start=1, page_end=1, sha256=hashlib.sha256(t.encode()).hexdigest()
        )
        for t in texts
    ]
    await checkpoints.replace_text_chunks(conn, doc, 1, chunks)
    items = [(c.sha256, v) for c, v in zip(chunks, hash_vectors(texts), strict=True)]
    await checkpoints.insert_embeddings(conn, ZeroEmbedder().model, items)


async def test_every_ready_documents_points_are_upserted(dsn: str, tmp_path: Path) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        # One document longer than a slice, so the slices are followed.
        await ready_document(conn, [f"long {i}" for i in range(SLICE_POINTS + 5)])
        await ready_document(conn, ["tides", "neap tides"])
    finally:
        await conn.close()

    parts = await measure_index_parts(dsn, tmp_path / "shard")

    assert parts.points == SLICE_POINTS + 7
    assert (
        min(parts.read_s, parts.build_s, parts.payloads_s, parts.edge_points_s, parts.upsert_s) >= 0
    )
    assert parts.edge_s == parts.edge_points_s + parts.upsert_s
    shard = qe.EdgeShard.load(str(tmp_path / "shard"))
    try:
        assert shard.count(qe.CountRequest(exact=True)) == SLICE_POINTS + 7
    finally:
        shard.close()
