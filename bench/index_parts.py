"""Where an index job's CPU goes, without the engine: a line of bench.ingest.

After a ragline run, this process does what the index stage does for every ready
document (:mod:`stages.pipeline.index`), one step at a time over all of them, and times each
step's CPU: reading the chunks and vectors a slice at a time, building the points (ids,
payloads), the fields the shard stores
(:func:`stages.adapters.vector_index.edge.points.stored_payload`), turning
them into qdrant-edge's points, and upserting them into a fresh embedded shard (then one
flush). qdrant-edge's own share (its ``Point`` construction and its upsert) bounds from
below what an index stage storing these fields costs a point; the index-only worker's
figure adds the engine (claims, commits, heartbeats), the session's threads and the
garbage collector.
"""

from __future__ import annotations

import time
from pathlib import Path

import msgspec
import qdrant_edge as qe

from bench.database import pool_of
from bench.harness.text_index import TEXT_FIELD, add_text_index
from bench.standins import ZeroEmbedder
from stages.adapters.vector_index.edge.points import stored_payload, vectors_of
from stages.adapters.vector_index.edge.shard import ensure_shard
from stages.db import checkpoints
from stages.pipeline.index import SLICE_POINTS, document_points

__all__ = ["IndexParts", "index_parts", "measure_index_parts"]

READY_DOCUMENTS_SQL = (
    "SELECT id, generation, filename FROM documents WHERE status = 'ready' ORDER BY id"
)


class IndexParts(msgspec.Struct, frozen=True, kw_only=True):
    """CPU seconds of each step over ``points`` points."""

    points: int
    read_s: float
    build_s: float
    payloads_s: float
    edge_points_s: float
    upsert_s: float

    def us(self, seconds: float) -> float:
        return seconds / max(self.points, 1) * 1e6

    @property
    def edge_s(self) -> float:
        """qdrant-edge's own share: its points and its upsert."""
        return self.edge_points_s + self.upsert_s

    @property
    def total_s(self) -> float:
        return self.read_s + self.build_s + self.payloads_s + self.edge_s


async def measure_index_parts(
    dsn: str, shard: Path, *, keywords: bool = True, text_index: qe.TokenizerType | None = None
) -> IndexParts:
    """Every ready document's points read, built and upserted into a new shard at
    ``shard``, as the index stage does, each step timed on its own; without
    ``keywords``, as a dense-only index would (no keyword side to build or store). With a
    ``text_index`` tokenizer (and no ``keywords``), the keyword side is qdrant-edge's own
    BM25 full-text index instead: each point's text stored as a payload field of its own,
    tokenized and indexed by the shard at upsert (:mod:`bench.keyword_engines`)."""
    embedder = ZeroEmbedder()
    # Keyed by IndexParts' fields, less their "_s".
    spent = dict.fromkeys(("read", "build", "payloads", "edge_points", "upsert"), 0.0)
    points = 0
    # The same shard as the index stage makes (half-precision vectors, the payload
    # indexes), with the keyword side or without.
    ensure_shard(shard, embedder.dimensions, keywords=keywords)
    edge = qe.EdgeShard.load(str(shard))
    if text_index is not None:
        add_text_index(edge, text_index)
    try:
        async with pool_of(dsn, 1) as pool:
            for doc in await pool.fetch(READY_DOCUMENTS_SQL):
                after = -1
                while True:
                    at = time.process_time()
                    rows = await checkpoints.chunk_vectors(
                        pool,
                        doc["id"],
                        embedder.model,
                        after=after,
                        limit=SLICE_POINTS,
                        keywords=keywords,
                    )
                    at = _add(spent, "read", at)
                    built = document_points(
                        rows, doc["id"], doc["generation"], doc["filename"], keywords=keywords
                    )
                    at = _add(spent, "build", at)
                    stored = [stored_payload(p.payload) for p in built]
                    if text_index is not None:
                        for p, s in zip(built, stored, strict=True):
                            s[TEXT_FIELD] = p.payload["text"]
                    at = _add(spent, "payloads", at)
                    # As stages.adapters.vector_index.edge.points.edge_points builds them, the
                    # payloads made above.
                    converted = [
                        qe.Point(p.id, vectors_of(p) if keywords else p.vector, s)  # type: ignore[arg-type]
                        for p, s in zip(built, stored, strict=True)
                    ]
                    at = _add(spent, "edge_points", at)
                    edge.update(qe.UpdateOperation.upsert_points(converted))
                    _add(spent, "upsert", at)
                    points += len(rows)
                    if len(rows) < SLICE_POINTS:
                        break
                    after = rows[-1].ordinal
        at = time.process_time()
        edge.flush()
        _add(spent, "upsert", at)
    finally:
        edge.close()
    return IndexParts(points=points, **{f"{step}_s": s for step, s in spent.items()})


def _add(spent: dict[str, float], step: str, since: float) -> float:
    """Add the CPU since ``since`` to ``step``; the time now."""
    now = time.process_time()
    spent[step] += now - since
    return now


async def index_parts(dsn: str, data_dir: Path) -> IndexParts:
    """Measure and print the lines: dense-only and with the keyword side, alternating."""
    dense = await measure_index_parts(dsn, data_dir / "index-parts-dense", keywords=False)
    parts = await measure_index_parts(dsn, data_dir / "index-parts-shard")
    dense_again = await measure_index_parts(dsn, data_dir / "index-parts-dense2", keywords=False)
    dense_s = min(dense.total_s, dense_again.total_s)
    print(
        f"index stage in this process, dense only: {dense.us(dense.total_s):.1f} and "
        f"{dense_again.us(dense_again.total_s):.1f} µs of CPU a point; with the keyword "
        f"side {parts.us(parts.total_s):.1f}: {parts.total_s / max(dense_s, 1e-9):.2f}x "
        "(floor <= 1.5x)"
    )
    us = parts.us
    print(
        f"index stage in this process, without the engine ({parts.points} points): "
        f"{us(parts.total_s):.1f} µs of CPU a point = read {us(parts.read_s):.1f} "
        f"+ build {us(parts.build_s):.1f} + stored payloads {us(parts.payloads_s):.1f} "
        f"+ qdrant-edge points {us(parts.edge_points_s):.1f} "
        f"+ qdrant-edge upsert {us(parts.upsert_s):.1f}; qdrant-edge's own share "
        f"{us(parts.edge_s):.1f} µs"
    )
    return parts
