"""The peer of ``python -m bench.retrieval``: Haystack 2.x hybrid retrieval over ragline's
own chunks and vectors.

``InMemoryBM25Retriever`` (Haystack's defaults: BM25L, its own tokenizer) and
``InMemoryEmbeddingRetriever`` (cosine, over the vectors ragline stored for each chunk,
queried with ragline's query vector) each return their best :data:`SIDE_DEPTH` (as
ragline's hybrid fuses each side's best 50), then ``DocumentJoiner`` with reciprocal rank
fusion keeps the best ``limit``. Haystack is optional (``pip install 'haystack-ai>=2.31,<3'``):
:func:`load` returns None without it.
"""

from __future__ import annotations

import importlib
import os
import uuid
from collections.abc import Sequence
from types import ModuleType
from typing import Any

import msgspec
import qdrant_edge as qe

from bench.harness.text_index import TEXT_FIELD, add_text_index, spelled_cjk

#: The peer's package, as the ``bench`` extra names it.
REQUIREMENT = "haystack-ai>=2.31,<3"
#: How many of each side's best the joiner fuses (ragline's FUSION_DEPTH).
SIDE_DEPTH = 50


class PeerHit(msgspec.Struct, frozen=True):
    document_id: uuid.UUID
    page_start: int
    page_end: int


class PeerChunk(msgspec.Struct, frozen=True):
    document_id: uuid.UUID
    ordinal: int
    page_start: int
    page_end: int
    text: str
    vector: Sequence[float]
    section: str | None = None
    table: bool = False


def load() -> ModuleType | None:
    """Haystack, or None when it is not installed (its telemetry off)."""
    os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")
    try:
        return importlib.import_module("haystack")
    except ImportError:
        return None


class HaystackHybrid:
    """Haystack's BM25 and embedding retrievers joined by reciprocal rank fusion."""

    def __init__(self, chunks: Sequence[PeerChunk]) -> None:
        haystack: Any = importlib.import_module("haystack")
        stores: Any = importlib.import_module("haystack.document_stores.in_memory")
        retrievers: Any = importlib.import_module("haystack.components.retrievers.in_memory")
        joiners: Any = importlib.import_module("haystack.components.joiners")
        self.version = str(haystack.__version__)
        store = stores.InMemoryDocumentStore(embedding_similarity_function="cosine")
        store.write_documents(
            [
                haystack.Document(
                    id=f"{c.document_id}:{c.ordinal}",
                    content=c.text,
                    embedding=list(c.vector),
                    meta={
                        "document_id": str(c.document_id),
                        "page_start": c.page_start,
                        "page_end": c.page_end,
                    },
                )
                for c in chunks
            ]
        )
        self.bm25 = retrievers.InMemoryBM25Retriever(store, top_k=SIDE_DEPTH)
        self.dense = retrievers.InMemoryEmbeddingRetriever(store, top_k=SIDE_DEPTH)
        self.joiner_class = joiners.DocumentJoiner

    def search(self, query: str, vector: Sequence[float], limit: int) -> list[PeerHit]:
        """The ``limit`` best chunks, fused."""
        keyword = self.bm25.run(query=query)["documents"]
        dense = self.dense.run(query_embedding=list(vector))["documents"]
        joiner = self.joiner_class(join_mode="reciprocal_rank_fusion", top_k=limit)
        return _hits(joiner.run(documents=[keyword, dense])["documents"])

    def keyword(self, query: str, limit: int) -> list[PeerHit]:
        """Haystack's BM25 alone."""
        return _hits(self.bm25.run(query=query, top_k=limit)["documents"])


def _hits(documents: Sequence[Any]) -> list[PeerHit]:
    return [
        PeerHit(
            document_id=uuid.UUID(d.meta["document_id"]),
            page_start=int(d.meta["page_start"]),
            page_end=int(d.meta["page_end"]),
        )
        for d in documents
    ]


class PostgresFullText:
    """PostgreSQL's own full-text search over the same chunks, the keyword side the
    project did not choose: ``to_tsvector('english', text)`` in a temporary table, the
    query's lexemes OR-ed, ranked by ``ts_rank``."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    async def build(self) -> None:
        await self.conn.execute(
            "CREATE TEMP TABLE bench_fts AS SELECT document_id, page_start, page_end, "
            "to_tsvector('english', text) AS v FROM chunks"
        )
        await self.conn.execute("CREATE INDEX ON bench_fts USING gin (v)")

    async def search(self, query: str, limit: int) -> list[PeerHit]:
        rows = await self.conn.fetch(
            "WITH q AS (SELECT to_tsquery('simple', string_agg(quote_literal(l), ' | ')) AS q "
            "FROM unnest(tsvector_to_array(to_tsvector('english', $1))) AS l) "
            "SELECT document_id, page_start, page_end FROM bench_fts, q WHERE v @@ q.q "
            "ORDER BY ts_rank(v, q.q) DESC LIMIT $2",
            query,
            limit,
        )
        return [PeerHit(r["document_id"], r["page_start"], r["page_end"]) for r in rows]


class QdrantTextIndex:
    """qdrant-edge's own BM25 full-text index over the same chunks, keyword side only:
    the candidate engine of docs/retrieval.md's index-cost question (the code tokenizer,
    which keeps identifiers whole and split; CJK spelled out first, since it does not
    segment them). A chunk's heading path is indexed before its text, as ragline's
    keyword side counts it."""

    def __init__(self, chunks: Sequence[PeerChunk], folder: str) -> None:
        self.chunks = list(chunks)
        vectors = qe.EdgeVectorParams(size=1, distance=qe.Distance.Dot)
        qe.EdgeShard.create(folder, qe.EdgeConfig(vectors=vectors)).close()
        self.shard = qe.EdgeShard.load(folder)
        add_text_index(self.shard, qe.TokenizerType.Code)
        for at in range(0, len(self.chunks), 1000):
            points = [
                qe.Point(at + i, [1.0], {TEXT_FIELD: spelled_cjk(f"{c.section or ''}\n{c.text}")})
                for i, c in enumerate(self.chunks[at : at + 1000])
            ]
            self.shard.update(qe.UpdateOperation.upsert_points(points))

    def search(self, query: str, limit: int) -> list[PeerHit]:
        request = qe.QueryRequest(
            query=qe.TextQuery(TEXT_FIELD, spelled_cjk(query)), limit=limit, with_payload=False
        )
        hits = [self.chunks[int(p.id)] for p in self.shard.query(request)]
        return [PeerHit(c.document_id, c.page_start, c.page_end) for c in hits]

    def close(self) -> None:
        self.shard.close()
