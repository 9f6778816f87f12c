"""Creating an embedded vector index's shard, and checking an existing one's dimensions.

Used by :class:`stages.adapters.vector_index.edge.index.EdgeIndex`, under the lock of
:mod:`stages.adapters.vector_index.edge.session`. A shard gets :data:`SEARCH_THREADS`
search threads, not qdrant-edge's pool sized from the CPUs: its one segment (no optimizer
runs) leaves the other threads nothing to do but spin (``sched_yield``) after every
operation. The count stays in the shard's config (one created earlier keeps its pool).
Figures: docs/benchmark-history.md, "Figures moved out of module docstrings".
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path

import qdrant_edge as qe

from runtime.api import PermanentError
from stages.adapters.vector_index.edge.space import ensure_room
from stages.ports.vector_index import COLLECTION_FIELD, DOCUMENT_FIELD, KEYWORDS_VECTOR

__all__ = ["SEARCH_THREADS", "check_edge_dimensions", "ensure_shard", "has_keywords"]

#: Threads of a shard's search pool (qdrant-edge's ``max_search_threads``).
SEARCH_THREADS = 1


def ensure_shard(path: Path, dimensions: int, *, keywords: bool = True) -> None:
    """The shard at ``path``, created when missing: with the keyword side unless not
    ``keywords`` (a dense-only shard, as made before hybrid search; benchmarks compare
    the two)."""
    if path.is_dir():
        check_edge_dimensions(path, path.name, dimensions)
    else:
        ensure_room(path)  # creating one writes its files through mappings too
        _create_shard(path, dimensions, keywords)


def _create_shard(path: Path, dimensions: int, keywords: bool) -> None:
    """Create the shard in a temporary directory and rename it into place, so a crash
    mid-create never leaves a half-made shard that ``load`` chokes on."""
    tmp = path.with_name(f".tmp-{path.name}-{uuid.uuid4().hex}")
    # Half-precision storage: an exact search reads every vector, so half the bytes is
    # about 40% less time a search (and half the shard's vector pages in RAM); cosine
    # ranks of normalised embeddings do not change at this precision (docs/retrieval.md).
    vectors = qe.EdgeVectorParams(
        size=dimensions,
        distance=qe.Distance.Cosine,
        memory=qe.Memory.Cold,
        datatype=qe.VectorStorageDatatype.Float16,
    )
    # The keyword side: a sparse vector the shard weighs by inverse document frequency.
    sparse = {KEYWORDS_VECTOR: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)}
    config = qe.EdgeConfig(
        vectors=vectors,
        sparse_vectors=sparse if keywords else None,
        max_search_threads=SEARCH_THREADS,
    )
    try:
        shard = qe.EdgeShard.create(str(tmp), config)
        try:
            keyword = qe.PayloadSchemaType.Keyword
            shard.update(qe.UpdateOperation.create_field_index(DOCUMENT_FIELD, keyword))
            tenant = qe.KeywordIndexParams(is_tenant=True)
            shard.update(qe.UpdateOperation.create_field_index(COLLECTION_FIELD, tenant))
            shard.flush()
        finally:
            shard.close()
        os.rename(tmp, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def check_edge_dimensions(path: Path, vector_collection: str, dimensions: int) -> None:
    # edge_config.json is qdrant-edge's own file; if its layout changes, skip the check
    # rather than refuse a working shard.
    try:
        stored = json.loads((path / "edge_config.json").read_text())["vectors"][""]["size"]
    except (OSError, ValueError, KeyError, TypeError):
        return
    if stored != dimensions:
        raise PermanentError(
            f"vector collection {vector_collection!r} holds {stored}-dimension vectors, "
            f"not {dimensions}"
        )


def has_keywords(path: Path) -> bool:
    """Whether the shard at ``path`` has the keyword side (shards made before hybrid
    search have only the dense vectors)."""
    try:
        config = json.loads((path / "edge_config.json").read_text())
    except (OSError, ValueError):
        return False
    return KEYWORDS_VECTOR in (config.get("sparse_vectors") or {})
