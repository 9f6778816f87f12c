"""The vector index: where chunk embeddings become searchable.

One :class:`VectorIndex` protocol. Its adapters, a Qdrant server (``QDRANT_URL``; tests use
qdrant-client's ``:memory:`` mode) and the embedded default (a qdrant-edge shard per
collection under ``data_dir / "qdrant"``), live under :mod:`stages.adapters.vector_index`;
only the composition root imports them, on first use. Point ids are uuid5s of document id
and chunk ordinal (:func:`point_id`) and payloads carry the generation, so a re-run
overwrites its own points. Why: docs/architecture.md, "Services" and "Side effects".
"""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Protocol

import msgspec

from runtime.api import MissingInput

__all__ = [
    "Hit",
    "Keywords",
    "Point",
    "Query",
    "VectorIndex",
    "new_point",
    "point_id",
    "point_ids",
    "vector_collection_name",
]


#: Namespace of :func:`point_id`. Never change it: ids of existing points derive from it.
POINT_NAMESPACE = uuid.UUID("5b0c3f47-2a7e-4d3c-9a55-2f1f6f0c9e11")
#: Payload field holding the document id (a keyword index is built on it).
DOCUMENT_FIELD = "document_id"
#: Payload field holding the generation that wrote the point.
GENERATION_FIELD = "generation"
#: The keyword side's name in the vector collection (a sparse vector with the IDF modifier).
KEYWORDS_VECTOR = "keywords"
#: Hybrid fusion's weights of the dense and keyword sides (measured with
#: ``python -m bench.retrieval``: docs/retrieval.md, "Fusion").
FUSION_WEIGHTS = (0.35, 0.65)
#: A keyword side is sure of its best when it scores at least this many times its second:
#: that point stays first (an identifier's exact hit is not outvoted by the middle).
SURE_RATIO = 1.2
#: How many of each side's best a hybrid search fuses, at least (and 4 x the limit).
FUSION_DEPTH = 50

#: Payload field holding the document's collection (tenant); see :mod:`stages.ports.collections`.
#: Points written before collections existed have none and belong to ``default``.
COLLECTION_FIELD = "collection"
#: The collection of documents submitted without one (and of points without the field).
DEFAULT_COLLECTION = "default"
#: Points sent per request / per shard update.
DEFAULT_BATCH = 256
#: Page size when scrolling a document's point ids.
SCROLL_PAGE = 1000

_COLLECTION = re.compile(r"[a-z0-9_-]{1,200}")


class Keywords(msgspec.Struct, frozen=True):
    """A sparse vector of keyword weights (:mod:`stages.text.keywords`): the keyword side
    of hybrid search, scored by the index with inverse document frequency. Lists, or
    arrays as a chunk's stored vector is read back (the adapters take either)."""

    indices: Sequence[int]
    values: Sequence[float]


class Point(msgspec.Struct, frozen=True):
    """One vector with its payload; ``payload`` must hold ``document_id`` and ``generation``."""

    id: uuid.UUID
    #: A list, or the cache's ``array('f')`` (:func:`stages.db.checkpoints.vectors_of`).
    vector: Sequence[float]
    payload: dict[str, Any]
    #: The chunk's keywords (None: a point without a keyword side).
    keywords: Keywords | None = None


class Query(msgspec.Struct, frozen=True, kw_only=True):
    """What a search asks: the query's dense vector, its keywords, or both (hybrid:
    the two rankings fused by score, :func:`fuse`)."""

    vector: Sequence[float] | None = None
    keywords: Keywords | None = None
    #: Weights of the dense and keyword rankings in the fusion.
    weights: tuple[float, float] = FUSION_WEIGHTS
    #: Only points of these documents (ids as text; None: any). PostgreSQL answers a
    #: search's filters; the index only narrows to the documents they allow.
    documents: tuple[str, ...] | None = None

    @property
    def mode(self) -> str:
        if self.vector is not None and self.keywords is not None:
            return "hybrid"
        return "dense" if self.vector is not None else "keyword"


class Hit(msgspec.Struct):
    """A search result: the point id, its similarity (cosine, higher is nearer) and payload."""

    id: uuid.UUID
    score: float
    payload: dict[str, Any]


class PointRef(msgspec.Struct, frozen=True):
    """A point's identity as the reconciler sees it."""

    id: uuid.UUID
    document_id: str
    generation: int


def point_ref(point_id: Any, payload: Mapping[str, Any] | None) -> PointRef:
    body = payload or {}
    return PointRef(
        id=uuid.UUID(str(point_id)),
        document_id=str(body.get(DOCUMENT_FIELD, "")),
        generation=int(body.get(GENERATION_FIELD, 0)),
    )


class VectorIndex(Protocol):
    """A vector store with one vector collection per embedding model and dimension (the
    tenant, a document's ``collection``, is a payload field inside it)."""

    @property
    def single_writer(self) -> bool:
        """Whether one process at a time writes it (the embedded index: the process that
        holds the shard runs every index job), rather than any number (a server)."""
        ...

    async def ensure_vector_collection(self, name: str, dimensions: int) -> None:
        """Create the vector collection (cosine, keyword index on document_id) unless it
        exists."""

    async def reserve(self, vector_collection: str) -> None:
        """Before an index job writes ``vector_collection``: raise :class:`runtime.api.Snooze`
        when another process is better placed to write it now (the embedded index: it
        holds the shard); a server index has nothing to do."""

    async def has_keywords(self, vector_collection: str) -> bool:
        """Whether the vector collection has the keyword side (one made before hybrid
        search has dense vectors only: points are written to it without keywords, so
        the index stage need not build them)."""
        ...

    async def upsert(self, vector_collection: str, points: Sequence[Point]) -> None:
        """Insert or replace ``points`` by id."""

    async def replace_document(
        self,
        vector_collection: str,
        document_id: uuid.UUID,
        generation: int,
        points: Sequence[Point],
    ) -> None:
        """Upsert ``points`` (all of ``document_id`` and ``generation``), then delete the
        document's points of every other generation; re-running it changes nothing."""

    async def delete_document(
        self, vector_collection: str, document_id: uuid.UUID, *, keep_generation: int | None = None
    ) -> None:
        """Delete the document's points, or only those not written by ``keep_generation``."""

    async def delete_generation(
        self, vector_collection: str, document_id: uuid.UUID, generation: int
    ) -> None:
        """Delete the points that ``generation`` wrote for the document."""

    async def count(self, vector_collection: str, document_id: uuid.UUID | None = None) -> int:
        """Exact number of points, in the vector collection or of one document."""
        ...

    async def scan(
        self,
        vector_collection: str,
        document_id: uuid.UUID | None = None,
        *,
        tenant: str | None = None,
        documents: Sequence[uuid.UUID] | None = None,
    ) -> list[PointRef]:
        """Every point (of one document, or of ``documents``, or all; of one tenant
        collection, or all) with its document and generation. ``documents`` is how verify
        reads the index a page of documents at a time: memory flat, whatever the index
        holds."""
        ...

    async def point_ids(self, vector_collection: str, document_id: uuid.UUID) -> list[uuid.UUID]:
        """Ids of the document's points."""
        ...

    async def search(
        self,
        vector_collection: str,
        query: Query,
        limit: int,
        *,
        tenant: str | None = None,
    ) -> list[Hit]:
        """The ``limit`` best points for ``query``, best first: nearest to its vector,
        best by its keywords (BM25), or both fused; only points of the ``tenant``
        collection (payload field ``collection``) when one is given. A vector collection
        made before keyword search raises :class:`runtime.api.MissingInput` for a query
        with keywords (saying how to rebuild it)."""
        ...

    async def drop_vector_collection(self, name: str) -> None:
        """Delete a whole vector collection (after a model switch); absent: nothing."""

    async def point_alias(self, alias: str, vector_collection: str) -> None:
        """Make ``alias`` name ``vector_collection`` in one atomic step where the index has
        aliases (Qdrant); the embedded index keeps its alias in PostgreSQL only."""

    async def vector_collections(self) -> list[str]:
        """ragline's vector collections (every model's), sorted: delete and verify cover
        them all."""
        ...

    async def aclose(self) -> None:
        """Release connections and files."""


# -- ids, names, points --------------------------------------------------------------------


def point_id(document_id: uuid.UUID, ordinal: int) -> uuid.UUID:
    """Deterministic id of the point for chunk ``ordinal`` of a document."""
    return uuid.uuid5(POINT_NAMESPACE, f"{document_id}:{ordinal}")


# uuid5's version (5) and variant (RFC 4122) bits, for point_ids.
_UUID5_CLEAR = ~((0xF000 << 64) | (0xC000 << 48)) & ((1 << 128) - 1)
_UUID5_SET = (0x5000 << 64) | (0x8000 << 48)


def point_ids(document_id: uuid.UUID, ordinals: Iterable[int]) -> list[uuid.UUID]:
    """:func:`point_id` of many ordinals of one document: the same ids, computed from one
    SHA-1 state of the shared prefix (about 2.5x faster than ``uuid.uuid5`` each)."""
    prefix = hashlib.sha1(POINT_NAMESPACE.bytes + f"{document_id}:".encode())
    out: list[uuid.UUID] = []
    for ordinal in ordinals:
        digest = prefix.copy()
        digest.update(str(ordinal).encode())
        value = int.from_bytes(digest.digest()[:16])
        out.append(uuid.UUID(int=(value & _UUID5_CLEAR) | _UUID5_SET))
    return out


def new_point(
    document_id: uuid.UUID,
    ordinal: int,
    generation: int,
    vector: Sequence[float],
    payload: Mapping[str, Any] | None = None,
) -> Point:
    """Build a :class:`Point` with its deterministic id and the required payload fields."""
    body = dict(payload or {})
    body[DOCUMENT_FIELD] = str(document_id)
    body[GENERATION_FIELD] = generation
    return Point(id=point_id(document_id, ordinal), vector=list(vector), payload=body)


def vector_collection_name(model: str, dimensions: int) -> str:
    """Collection for one embedding model and dimension, e.g. ``ragline_cohere_embed-v4.0_1024``
    becomes ``ragline_cohere_embed-v4_0_1024``: only ``[a-z0-9_-]`` survive."""
    if dimensions <= 0:
        raise ValueError(f"dimensions must be positive, not {dimensions}")
    slug = re.sub(r"[^a-z0-9_-]+", "_", model.lower()).strip("_-")
    if not slug:
        raise ValueError(f"model name {model!r} has nothing usable for a collection name")
    return f"ragline_{slug[:150]}_{dimensions}"


def is_ragline_collection(name: str) -> bool:
    """Whether ``name`` is a collection :func:`vector_collection_name` could have made."""
    return name.startswith("ragline_") and bool(_COLLECTION.fullmatch(name))


def check_vector_collection(name: str) -> str:
    if not _COLLECTION.fullmatch(name):
        raise ValueError(f"invalid collection name {name!r}: use vector_collection_name()")
    return name


def check_points(points: Sequence[Point]) -> None:
    for point in points:
        document = point.payload.get(DOCUMENT_FIELD)
        generation = point.payload.get(GENERATION_FIELD)
        if not isinstance(document, str) or type(generation) is not int:
            raise ValueError(
                f"point {point.id}: payload needs {DOCUMENT_FIELD} (str) and "
                f"{GENERATION_FIELD} (int); build points with new_point()"
            )


def check_document_points(points: Sequence[Point], document_id: uuid.UUID, generation: int) -> None:
    check_points(points)
    document = str(document_id)
    for point in points:
        if point.payload[DOCUMENT_FIELD] != document:
            raise ValueError(f"point {point.id} belongs to another document, not {document_id}")
        if point.payload[GENERATION_FIELD] != generation:
            # It would be deleted right after being written, as a stale generation's point.
            raise ValueError(f"point {point.id} is of another generation, not {generation}")


def batches(points: Sequence[Point], size: int) -> Iterator[Sequence[Point]]:
    for start in range(0, len(points), size):
        yield points[start : start + size]


def missing_vector_collection(name: str) -> MissingInput:
    return MissingInput(f"vector collection {name!r} does not exist (nothing indexed yet?)")


# -- hybrid search -------------------------------------------------------------------------


def side_depth(query: Query, limit: int) -> int:
    """How many of each side's best to ask for: ``limit`` for one side, more to fuse."""
    return max(FUSION_DEPTH, 4 * limit) if query.mode == "hybrid" else limit


def fuse(dense: Sequence[Hit], keyword: Sequence[Hit], query: Query, limit: int) -> list[Hit]:
    """Score fusion of the two rankings (one code path for every index). A point scores
    ``w_dense × its cosine scaled over the dense list (best 1, last 0) + w_keyword × its
    BM25 over the keyword list's best``: the keyword side keeps how sure it is, where a
    cosine's range is narrow and only its order means much. And when the keyword side is
    sure of its best (alone, or :data:`SURE_RATIO` × its second), that point comes first.
    Why not reciprocal rank fusion: docs/retrieval.md, "Fusion"."""
    w_dense, w_keyword = query.weights
    scores: dict[uuid.UUID, float] = {}
    first: dict[uuid.UUID, Hit] = {}
    for hit, share in _scaled(dense, floor=True):
        scores[hit.id] = w_dense * share
        first[hit.id] = hit
    for hit, share in _scaled(keyword, floor=False):
        scores[hit.id] = scores.get(hit.id, 0.0) + w_keyword * share
        first.setdefault(hit.id, hit)
    order = sorted(scores, key=lambda point: -scores[point])
    if _sure(keyword):
        best = keyword[0].id
        order = [best, *(p for p in order if p != best)]
    return [Hit(id=p, score=scores[p], payload=first[p].payload) for p in order[:limit]]


def _scaled(ranking: Sequence[Hit], *, floor: bool) -> list[tuple[Hit, float]]:
    """Each hit with its score over the list's best (1); with ``floor``, from the list's
    last (0) to its best."""
    if not ranking:
        return []
    top = ranking[0].score
    low = ranking[-1].score if floor else 0.0
    span = top - low
    return [(h, (h.score - low) / span if span > 0 else 1.0) for h in ranking]


def _sure(keyword: Sequence[Hit]) -> bool:
    if len(keyword) == 1:
        return True
    return (
        len(keyword) > 1
        and keyword[1].score > 0
        and keyword[0].score >= SURE_RATIO * keyword[1].score
    )


def no_keywords(vector_collection: str) -> MissingInput:
    return MissingInput(
        f"vector collection {vector_collection} was built before keyword search: rebuild "
        "it with `ragline migrate-model --rebuild` (no embedding calls), or search --mode dense"
    )
