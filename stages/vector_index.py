"""The vector index: where chunk embeddings become searchable.

One :class:`VectorIndex` protocol, two implementations:

* :class:`QdrantIndex` talks to a Qdrant server (``QDRANT_URL``) through
  ``qdrant_client.AsyncQdrantClient``; ``location=":memory:"`` runs qdrant-client's local
  mode, which has the same API and is what the tests use when no server is around.
* :class:`EdgeIndex`, the embedded default, keeps one qdrant-edge shard per collection
  under ``data_dir / "qdrant"``.

Point ids come from :func:`point_id` (a uuid5 of document id and chunk ordinal), so an
index run that is repeated after a crash overwrites its own points instead of adding
copies. Every point's payload carries ``document_id`` (string) and ``generation`` (int);
after upserting a generation, the index stage calls
``delete_document(..., keep_generation=g)`` to drop what older generations wrote, and a
failed run calls :meth:`VectorIndex.delete_generation` to remove its own partial output.

Concurrency in EdgeIndex
------------------------
A qdrant-edge shard cannot be open in two processes at once: the second
``EdgeShard.load`` fails with ``Can't init WAL: Kind(WouldBlock)`` (the WAL is locked by
its owner). Several ragline worker processes may share one data dir, so EdgeIndex takes an
exclusive ``fcntl.flock`` on ``<collection>.lock`` around *each operation* and opens the
shard, runs the operation, flushes (writes only) and closes it before letting go. Holding
the shard for the whole process lifetime instead would lock every other worker (and the
CLI's ``search``) out of the index until that worker exits, so their index jobs would
stall until their leases expire; that is a correctness problem, not a cost.

The cost is a shard load per operation, and load time grows with the shard: on the
2-core dev machine with 384-dimension vectors, about 90 ms at 50k-100k points and about
250 ms at 300k (vectors are memory-mapped, ``Memory.Cold``, which loads ~2.5x faster
than in-RAM vectors; load time is what matters here). Measured upsert throughput,
384 dimensions, 25,600 points into a fresh collection:

* raw qdrant-edge, shard held open, batches of 256 (no guard): ~14k points/s;
* EdgeIndex, one ``upsert`` call per 256 points: ~1.8k points/s;
* EdgeIndex, one ``upsert`` call with all points (cut into 256s under one lock): 10-13k/s;
* two processes, each one call per 256 points at once: ~1.0-1.2k points/s in total.

So callers should pass a whole document's points to one ``upsert`` call (the index stage
should). Beyond a few hundred thousand points, or with many processes indexing at once, use
a Qdrant server (``QDRANT_URL``).

The shard's search is exact (no HNSW build is triggered: ``optimize()`` takes tens of
seconds per 50k points on 2 cores and would hold the lock that long).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import uuid
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any, Protocol, TypeVar

import anyio
import anyio.to_thread
import httpx
import msgspec
import qdrant_edge as qe
from qdrant_client import AsyncQdrantClient
from qdrant_client import models as qm
from qdrant_client.common.client_exceptions import QdrantException, ResourceExhaustedResponse
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

from runtime.errors import (
    ConfigurationError,
    MissingInput,
    PermanentError,
    RateLimited,
    TransientError,
    one_line,
)

__all__ = [
    "EdgeIndex",
    "EdgeIndexConfig",
    "Hit",
    "Point",
    "QdrantConfig",
    "QdrantIndex",
    "VectorIndex",
    "collection_name",
    "new_point",
    "point_id",
    "vector_index_from_env",
]

T = TypeVar("T")
R = TypeVar("R")

#: Namespace of :func:`point_id`. Never change it: ids of existing points derive from it.
POINT_NAMESPACE = uuid.UUID("5b0c3f47-2a7e-4d3c-9a55-2f1f6f0c9e11")
#: Payload field holding the document id (a keyword index is built on it).
DOCUMENT_FIELD = "document_id"
#: Payload field holding the generation that wrote the point.
GENERATION_FIELD = "generation"
#: Points sent per request / per shard update.
DEFAULT_BATCH = 256
#: Page size when scrolling a document's point ids.
SCROLL_PAGE = 1000

_COLLECTION = re.compile(r"[a-z0-9_-]{1,200}")


class Point(msgspec.Struct, frozen=True):
    """One vector with its payload; ``payload`` must hold ``document_id`` and ``generation``."""

    id: uuid.UUID
    vector: list[float]
    payload: dict[str, Any]


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
    """A vector store with one collection per embedding model and dimension."""

    async def ensure_collection(self, name: str, dimensions: int) -> None:
        """Create the collection (cosine, keyword index on document_id) unless it exists."""

    async def upsert(self, collection: str, points: Sequence[Point]) -> None:
        """Insert or replace ``points`` by id."""

    async def delete_document(
        self, collection: str, document_id: uuid.UUID, *, keep_generation: int | None = None
    ) -> None:
        """Delete the document's points, or only those not written by ``keep_generation``."""

    async def delete_generation(
        self, collection: str, document_id: uuid.UUID, generation: int
    ) -> None:
        """Delete the points that ``generation`` wrote for the document."""

    async def count(self, collection: str, document_id: uuid.UUID | None = None) -> int:
        """Exact number of points, in the collection or of one document."""
        ...

    async def scan(self, collection: str, document_id: uuid.UUID | None = None) -> list[PointRef]:
        """Every point (of one document, or all) with its document and generation."""
        ...

    async def point_ids(self, collection: str, document_id: uuid.UUID) -> list[uuid.UUID]:
        """Ids of the document's points."""
        ...

    async def search(self, collection: str, vector: Sequence[float], limit: int) -> list[Hit]:
        """The ``limit`` points nearest to ``vector``, nearest first."""
        ...

    async def aclose(self) -> None:
        """Release connections and files."""


# -- ids, names, points --------------------------------------------------------------------


def point_id(document_id: uuid.UUID, ordinal: int) -> uuid.UUID:
    """Deterministic id of the point for chunk ``ordinal`` of a document."""
    return uuid.uuid5(POINT_NAMESPACE, f"{document_id}:{ordinal}")


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


def collection_name(model: str, dimensions: int) -> str:
    """Collection for one embedding model and dimension, e.g. ``ragline_cohere_embed-v4.0_1024``
    becomes ``ragline_cohere_embed-v4_0_1024``: only ``[a-z0-9_-]`` survive."""
    if dimensions <= 0:
        raise ValueError(f"dimensions must be positive, not {dimensions}")
    slug = re.sub(r"[^a-z0-9_-]+", "_", model.lower()).strip("_-")
    if not slug:
        raise ValueError(f"model name {model!r} has nothing usable for a collection name")
    return f"ragline_{slug[:150]}_{dimensions}"


def _check_collection(name: str) -> str:
    if not _COLLECTION.fullmatch(name):
        raise ValueError(f"invalid collection name {name!r}: use collection_name()")
    return name


def _check_points(points: Sequence[Point]) -> None:
    for point in points:
        document = point.payload.get(DOCUMENT_FIELD)
        generation = point.payload.get(GENERATION_FIELD)
        if not isinstance(document, str) or type(generation) is not int:
            raise ValueError(
                f"point {point.id}: payload needs {DOCUMENT_FIELD} (str) and "
                f"{GENERATION_FIELD} (int); build points with new_point()"
            )


def _batches(points: Sequence[Point], size: int) -> Iterator[Sequence[Point]]:
    for start in range(0, len(points), size):
        yield points[start : start + size]


def _missing_collection(name: str) -> MissingInput:
    return MissingInput(f"vector collection {name!r} does not exist (nothing indexed yet?)")


# -- Qdrant server / local mode ------------------------------------------------------------


class QdrantConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Where :class:`QdrantIndex` connects: a server ``url`` or a ``location`` (":memory:")."""

    url: str | None = None
    api_key: str | None = None
    location: str | None = None
    timeout_s: int = 30
    batch_size: int = DEFAULT_BATCH

    def __post_init__(self) -> None:
        if (self.url is None) == (self.location is None):
            raise ConfigurationError("QdrantConfig needs exactly one of url and location")
        if self.batch_size <= 0:
            raise ConfigurationError("QdrantConfig.batch_size must be positive")

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> QdrantConfig:
        """Read ``QDRANT_URL`` and ``QDRANT_API_KEY``."""
        url = env.get("QDRANT_URL", "").strip()
        if not url:
            raise ConfigurationError("QDRANT_URL is not set")
        return cls(url=url, api_key=env.get("QDRANT_API_KEY") or None)


def _retry_after_s(headers: httpx.Headers) -> float | None:
    try:
        return float(headers.get("retry-after", ""))
    except ValueError:
        return None


def _translate_qdrant(exc: Exception, what: str) -> Exception:
    """Map a qdrant-client exception to a ragline error (the caller chains the cause)."""
    message = one_line(f"qdrant {what}: {exc}")
    if isinstance(exc, ResourceExhaustedResponse):  # a 429 that carried Retry-After
        return RateLimited(message, retry_after_s=float(exc.retry_after_s))
    if isinstance(exc, UnexpectedResponse):
        return _translate_status(exc, what, message)
    if isinstance(exc, ResponseHandlingException | httpx.TransportError | OSError):
        return TransientError(message)
    return PermanentError(message)


def _translate_status(exc: UnexpectedResponse, what: str, message: str) -> Exception:
    status = exc.status_code or 0
    if status == 429:
        return RateLimited(message, retry_after_s=_retry_after_s(exc.headers))
    if status == 408 or status >= 500:
        return TransientError(message, retry_after_s=_retry_after_s(exc.headers))
    if status == 404:
        return MissingInput(message)
    return PermanentError(message)


_QDRANT_ERRORS = (
    QdrantException,
    UnexpectedResponse,
    ResponseHandlingException,
    httpx.HTTPError,
    OSError,
    ValueError,  # local mode's way of saying 400 (e.g. wrong vector size)
)


def _document_filter(document_id: uuid.UUID, **generation: qm.MatchValue) -> qm.Filter:
    must: list[qm.Condition] = [
        qm.FieldCondition(key=DOCUMENT_FIELD, match=qm.MatchValue(value=str(document_id)))
    ]
    if "equal" in generation:
        must.append(qm.FieldCondition(key=GENERATION_FIELD, match=generation["equal"]))
    must_not: list[qm.Condition] = []
    if "not_equal" in generation:
        must_not.append(qm.FieldCondition(key=GENERATION_FIELD, match=generation["not_equal"]))
    return qm.Filter(must=must, must_not=must_not or None)


class QdrantIndex:
    """Vector index on a Qdrant server (or qdrant-client's local mode)."""

    def __init__(self, config: QdrantConfig) -> None:
        self.config = config
        self._client = AsyncQdrantClient(
            location=config.location,
            url=config.url,
            api_key=config.api_key,
            timeout=config.timeout_s,
            # The version probe runs synchronously in __init__ and only warns on failure.
            check_compatibility=False,
        )
        self._known: set[str] = set()

    async def ensure_collection(self, name: str, dimensions: int) -> None:
        _check_collection(name)
        try:
            if await self._client.collection_exists(name):
                await self._check_dimensions(name, dimensions)
            else:
                await self._create(name, dimensions)
        except _QDRANT_ERRORS as exc:
            raise _translate_qdrant(exc, f"ensure_collection {name}") from exc
        self._known.add(name)

    async def upsert(self, collection: str, points: Sequence[Point]) -> None:
        _check_points(points)
        await self._require(collection)
        for batch in _batches(points, self.config.batch_size):
            structs = [
                qm.PointStruct(id=str(p.id), vector=p.vector, payload=p.payload) for p in batch
            ]
            await self._call(
                f"upsert {collection}",
                partial(self._client.upsert, collection, points=structs, wait=True),
            )

    async def delete_document(
        self, collection: str, document_id: uuid.UUID, *, keep_generation: int | None = None
    ) -> None:
        if keep_generation is None:
            query = _document_filter(document_id)
        else:
            query = _document_filter(document_id, not_equal=qm.MatchValue(value=keep_generation))
        await self._delete(collection, query)

    async def delete_generation(
        self, collection: str, document_id: uuid.UUID, generation: int
    ) -> None:
        query = _document_filter(document_id, equal=qm.MatchValue(value=generation))
        await self._delete(collection, query)

    async def count(self, collection: str, document_id: uuid.UUID | None = None) -> int:
        await self._require(collection)
        query = None if document_id is None else _document_filter(document_id)
        result = await self._call(
            f"count {collection}",
            lambda: self._client.count(collection, count_filter=query, exact=True),
        )
        return int(result.count)

    async def point_ids(self, collection: str, document_id: uuid.UUID) -> list[uuid.UUID]:
        return [ref.id for ref in await self.scan(collection, document_id)]

    async def scan(self, collection: str, document_id: uuid.UUID | None = None) -> list[PointRef]:
        await self._require(collection)
        refs: list[PointRef] = []
        offset: qm.ExtendedPointId | None = None
        while True:
            records, offset = await self._call(
                f"scroll {collection}", partial(self._scroll, collection, document_id, offset)
            )
            refs.extend(point_ref(record.id, record.payload) for record in records)
            if offset is None:
                return refs

    async def search(self, collection: str, vector: Sequence[float], limit: int) -> list[Hit]:
        await self._require(collection)
        query = list(vector)
        response = await self._call(
            f"search {collection}",
            lambda: self._client.query_points(
                collection, query=query, limit=limit, with_payload=True
            ),
        )
        return [
            Hit(id=uuid.UUID(str(p.id)), score=float(p.score), payload=dict(p.payload or {}))
            for p in response.points
        ]

    async def aclose(self) -> None:
        await self._client.close()

    async def _call(self, what: str, request: Callable[[], Awaitable[R]]) -> R:
        try:
            return await request()
        except _QDRANT_ERRORS as exc:
            raise _translate_qdrant(exc, what) from exc

    async def _scroll(
        self, collection: str, document_id: uuid.UUID | None, offset: qm.ExtendedPointId | None
    ) -> tuple[list[qm.Record], qm.ExtendedPointId | None]:
        return await self._client.scroll(
            collection,
            scroll_filter=None if document_id is None else _document_filter(document_id),
            limit=SCROLL_PAGE,
            offset=offset,
            with_payload=[DOCUMENT_FIELD, GENERATION_FIELD],
            with_vectors=False,
        )

    async def _delete(self, collection: str, query: qm.Filter) -> None:
        # Deleting from a collection that was never created has nothing to do.
        what = f"delete {collection}"
        if await self._call(what, lambda: self._client.collection_exists(collection)):
            selector = qm.FilterSelector(filter=query)
            await self._call(what, lambda: self._client.delete(collection, selector, wait=True))

    async def _require(self, collection: str) -> None:
        _check_collection(collection)
        if collection in self._known:
            return
        what = f"lookup {collection}"
        if not await self._call(what, lambda: self._client.collection_exists(collection)):
            raise _missing_collection(collection)
        self._known.add(collection)

    async def _create(self, name: str, dimensions: int) -> None:
        params = qm.VectorParams(size=dimensions, distance=qm.Distance.COSINE)
        try:
            await self._client.create_collection(name, vectors_config=params)
        except UnexpectedResponse as exc:
            if exc.status_code != 409:  # 409: another worker created it first
                raise
        if self.config.location is None:
            # Local mode has no payload indexes and warns about them; the server builds one.
            await self._client.create_payload_index(
                name, DOCUMENT_FIELD, field_schema=qm.PayloadSchemaType.KEYWORD
            )

    async def _check_dimensions(self, name: str, dimensions: int) -> None:
        info = await self._client.get_collection(name)
        vectors = info.config.params.vectors
        size = vectors.size if isinstance(vectors, qm.VectorParams) else None
        if size is not None and size != dimensions:
            raise PermanentError(
                f"vector collection {name!r} holds {size}-dimension vectors, not {dimensions}"
            )


# -- embedded: qdrant-edge -----------------------------------------------------------------


class EdgeIndexConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Settings for :class:`EdgeIndex`; ``root`` is usually ``data_dir / "qdrant"``."""

    root: Path
    batch_size: int = DEFAULT_BATCH


def _edge_filter(
    document_id: uuid.UUID, *, equal: int | None = None, not_equal: int | None = None
) -> qe.Filter:
    must: list[Any] = [qe.FieldCondition(DOCUMENT_FIELD, match=qe.MatchValue(str(document_id)))]
    if equal is not None:
        must.append(qe.FieldCondition(GENERATION_FIELD, match=qe.MatchValue(equal)))
    must_not: list[Any] | None = None
    if not_equal is not None:
        must_not = [qe.FieldCondition(GENERATION_FIELD, match=qe.MatchValue(not_equal))]
    return qe.Filter(must=must, must_not=must_not)


def _edge_failure(exc: Exception, what: str) -> Exception:
    message = one_line(f"embedded vector index {what}: {exc}")
    # WouldBlock: something outside ragline's lock holds the shard open; it may let go.
    if isinstance(exc, OSError) or "WouldBlock" in str(exc):
        return TransientError(message)
    return PermanentError(message)


@contextmanager
def _flock(path: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path``; it is released on close or process death."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


class EdgeIndex:
    """Embedded vector index: one qdrant-edge shard per collection, shared across processes.

    Every operation locks the collection, opens its shard, works, flushes and closes it
    (see the module docstring for why and what it costs).
    """

    def __init__(self, config: EdgeIndexConfig) -> None:
        self.config = config
        # One operation per collection at a time inside this process, so waiting for the
        # cross-process lock costs one thread, not one per queued task.
        self._locks: dict[str, anyio.Lock] = {}

    async def ensure_collection(self, name: str, dimensions: int) -> None:
        if dimensions <= 0:
            raise ValueError(f"dimensions must be positive, not {dimensions}")
        await self._run(name, "ensure_collection", self._ensure_sync, dimensions)

    async def upsert(self, collection: str, points: Sequence[Point]) -> None:
        _check_points(points)
        batches = [
            [qe.Point(p.id, p.vector, p.payload) for p in batch]
            for batch in _batches(points, self.config.batch_size)
        ]

        def write(shard: qe.EdgeShard) -> None:
            for batch in batches:
                shard.update(qe.UpdateOperation.upsert_points(batch))
            shard.flush()

        await self._run(collection, "upsert", self._with_shard, write)

    async def delete_document(
        self, collection: str, document_id: uuid.UUID, *, keep_generation: int | None = None
    ) -> None:
        await self._delete(collection, _edge_filter(document_id, not_equal=keep_generation))

    async def delete_generation(
        self, collection: str, document_id: uuid.UUID, generation: int
    ) -> None:
        await self._delete(collection, _edge_filter(document_id, equal=generation))

    async def count(self, collection: str, document_id: uuid.UUID | None = None) -> int:
        query = None if document_id is None else _edge_filter(document_id)
        request = qe.CountRequest(exact=True, filter=query)
        return await self._run(collection, "count", self._with_shard, lambda s: s.count(request))

    async def point_ids(self, collection: str, document_id: uuid.UUID) -> list[uuid.UUID]:
        return [ref.id for ref in await self.scan(collection, document_id)]

    async def scan(self, collection: str, document_id: uuid.UUID | None = None) -> list[PointRef]:
        query = None if document_id is None else _edge_filter(document_id)
        return await self._run(collection, "scroll", self._with_shard, _scroll_refs(query))

    async def search(self, collection: str, vector: Sequence[float], limit: int) -> list[Hit]:
        request = qe.SearchRequest(
            query=qe.Query.Nearest(list(vector)), limit=limit, with_payload=True
        )

        def run(shard: qe.EdgeShard) -> list[Hit]:
            return [
                Hit(id=uuid.UUID(str(p.id)), score=float(p.score), payload=dict(p.payload or {}))
                for p in shard.search(request)
            ]

        return await self._run(collection, "search", self._with_shard, run)

    async def aclose(self) -> None:
        return None  # shards are closed after every operation

    async def _delete(self, collection: str, query: qe.Filter) -> None:
        def run(shard: qe.EdgeShard | None) -> None:
            if shard is not None:
                shard.update(qe.UpdateOperation.delete_points_by_filter(query))
                shard.flush()

        # A collection that was never created has nothing to delete.
        await self._run(collection, "delete", self._with_shard, run, True)

    async def _run(self, collection: str, what: str, fn: Callable[..., T], *args: Any) -> T:
        _check_collection(collection)
        lock = self._locks.setdefault(collection, anyio.Lock())
        async with lock:
            try:
                # Not abandoned on cancel: the thread holds the flock and an open shard,
                # so a cancelled caller waits for the operation to finish and close them.
                return await anyio.to_thread.run_sync(lambda: fn(collection, *args))
            except (MissingInput, ValueError, PermanentError):
                raise
            except Exception as exc:  # qdrant-edge raises bare Exception
                raise _edge_failure(exc, f"{what} {collection}") from exc

    def _shard_path(self, collection: str) -> Path:
        return self.config.root / collection

    @contextmanager
    def _locked(self, collection: str) -> Iterator[Path]:
        self.config.root.mkdir(parents=True, exist_ok=True)
        with _flock(self.config.root / f"{collection}.lock"):
            yield self._shard_path(collection)

    def _with_shard(self, collection: str, fn: Callable[[Any], T], missing_ok: bool = False) -> T:
        with self._locked(collection) as path:
            if not path.is_dir():
                if missing_ok:
                    return fn(None)
                raise _missing_collection(collection)
            shard = qe.EdgeShard.load(str(path))
            try:
                return fn(shard)
            finally:
                shard.close()

    def _ensure_sync(self, collection: str, dimensions: int) -> None:
        with self._locked(collection) as path:
            if path.is_dir():
                _check_edge_dimensions(path, collection, dimensions)
                return
            _create_shard(path, dimensions)


def _scroll_refs(query: qe.Filter | None) -> Callable[[qe.EdgeShard], list[PointRef]]:
    def run(shard: qe.EdgeShard) -> list[PointRef]:
        refs: list[PointRef] = []
        offset: Any = None
        while True:
            request = qe.ScrollRequest(
                offset=offset, limit=SCROLL_PAGE, filter=query, with_payload=True
            )
            records, offset = shard.scroll(request)
            refs.extend(point_ref(record.id, record.payload) for record in records)
            if offset is None:
                return refs

    return run


def _create_shard(path: Path, dimensions: int) -> None:
    """Create the shard in a temporary directory and rename it into place, so a crash
    mid-create never leaves a half-made shard that ``load`` chokes on."""
    tmp = path.with_name(f".tmp-{path.name}-{uuid.uuid4().hex}")
    vectors = qe.EdgeVectorParams(
        size=dimensions, distance=qe.Distance.Cosine, memory=qe.Memory.Cold
    )
    try:
        shard = qe.EdgeShard.create(str(tmp), qe.EdgeConfig(vectors=vectors))
        try:
            keyword = qe.PayloadSchemaType.Keyword
            shard.update(qe.UpdateOperation.create_field_index(DOCUMENT_FIELD, keyword))
            shard.flush()
        finally:
            shard.close()
        os.rename(tmp, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _check_edge_dimensions(path: Path, collection: str, dimensions: int) -> None:
    # edge_config.json is qdrant-edge's own file; if its layout changes, skip the check
    # rather than refuse a working shard.
    try:
        stored = json.loads((path / "edge_config.json").read_text())["vectors"][""]["size"]
    except (OSError, ValueError, KeyError, TypeError):
        return
    if stored != dimensions:
        raise PermanentError(
            f"vector collection {collection!r} holds {stored}-dimension vectors, not {dimensions}"
        )


def vector_index_from_env(env: Mapping[str, str], data_dir: Path) -> VectorIndex:
    """Qdrant server when ``QDRANT_URL`` is set, else an :class:`EdgeIndex` under the data dir."""
    if env.get("QDRANT_URL", "").strip():
        return QdrantIndex(QdrantConfig.from_env(env))
    return EdgeIndex(EdgeIndexConfig(root=Path(data_dir) / "qdrant"))
