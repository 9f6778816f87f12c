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
the index stage writes a document with :meth:`VectorIndex.replace_document` (upsert this
generation's points, then delete the document's points of any other generation), and a
failed run calls :meth:`VectorIndex.delete_generation` to remove its own partial output.

Concurrency in EdgeIndex
------------------------
A qdrant-edge shard cannot be open in two processes at once: the second
``EdgeShard.load`` fails with ``Can't init WAL: Kind(WouldBlock)`` (the WAL is locked by
its owner). Several ragline worker processes may share one data dir, so EdgeIndex only
opens a shard while holding an exclusive ``fcntl.flock`` on ``<collection>.lock``.

Loading a shard costs time that grows with it (2-core dev machine, 384 dimensions: ~90 ms
at 50k-100k points, ~250 ms at 300k), and a flush costs ~30 ms, so a lock-load-flush-close
per operation made the index stage the pipeline's bottleneck. Instead, consecutive
operations of a process share a *session*: the lock stays held and the shard open until
no operation has used it for ``idle_close_s`` (50 ms, a timer thread closes it) or, at the
next operation, once it has been held ``max_hold_s`` (1 s). Holding it for the whole
process lifetime would lock every other worker (and the CLI's ``search``) out of the
index until that worker exits, stalling their jobs until their leases expire. flock is
not fair, so a process that lets go waits ``yield_s`` before locking again, giving a
waiting process its turn. Reads in a session are consistent: no other process writes
while the lock is held, and every session loads the shard afresh.

Durability: ``EdgeShard.update`` appends to the shard's write-ahead log, which is
memory-mapped, before it returns; after a SIGKILL the next ``load`` replays it (the
tests kill a process right after ``replace_document`` returned, unflushed, and find every
point). A session flushes (fsync) before it lets the lock go, so an OS crash or power
loss can lose about the last ``max_hold_s`` of writes (``verify`` reports the missing
points, ``repair`` re-indexes).

Measured with 64-dimension vectors, 200 documents of 200 points via ``replace_document``:
per-operation sessions did ~1.0-1.6k points/s in one process and ~1.5-2k in total with
two processes; shared sessions ~11-18k in one process and ~11-23k with two. Beyond a few
hundred thousand points, or with many processes indexing at once, use a Qdrant server
(``QDRANT_URL``).

The shard's search is exact (no HNSW build is triggered: ``optimize()`` takes tens of
seconds per 50k points on 2 cores and would hold the lock that long).
"""

from __future__ import annotations

import fcntl
import json
import logging
import math
import os
import re
import shutil
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
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

log = logging.getLogger(__name__)

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

    async def replace_document(
        self, collection: str, document_id: uuid.UUID, generation: int, points: Sequence[Point]
    ) -> None:
        """Upsert ``points`` (all of ``document_id`` and ``generation``), then delete the
        document's points of every other generation; re-running it changes nothing."""

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


def _check_document_points(
    points: Sequence[Point], document_id: uuid.UUID, generation: int
) -> None:
    _check_points(points)
    for point in points:
        if point.payload[DOCUMENT_FIELD] != str(document_id):
            raise ValueError(f"point {point.id} belongs to another document, not {document_id}")
        if point.payload[GENERATION_FIELD] != generation:
            # It would be deleted right after being written, as a stale generation's point.
            raise ValueError(f"point {point.id} is of another generation, not {generation}")


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

    async def replace_document(
        self, collection: str, document_id: uuid.UUID, generation: int, points: Sequence[Point]
    ) -> None:
        _check_document_points(points, document_id, generation)
        if points:
            await self.upsert(collection, points)
        await self.delete_document(collection, document_id, keep_generation=generation)

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
    """Settings for :class:`EdgeIndex`; ``root`` is usually ``data_dir / "qdrant"``.

    A session (shard open, flock held) ends once no operation has used it for
    ``idle_close_s``, or at the next operation after it has been open ``max_hold_s``;
    after letting go, this process waits ``yield_s`` before taking the lock again.
    """

    root: Path
    batch_size: int = DEFAULT_BATCH
    idle_close_s: float = 0.05
    max_hold_s: float = 1.0
    yield_s: float = 0.005

    def __post_init__(self) -> None:
        if self.batch_size <= 0:
            raise ConfigurationError("EdgeIndexConfig.batch_size must be positive")
        if min(self.idle_close_s, self.max_hold_s, self.yield_s) < 0:
            raise ConfigurationError("EdgeIndexConfig times must not be negative")


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


def _lock_file(path: Path) -> int:
    """Open ``path`` and take an exclusive ``flock`` on it (waiting for it); return the fd.
    Closing the fd, or the process dying, releases the lock."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    except BaseException:
        os.close(fd)
        raise
    return fd


class _Session:
    """One collection's flock, and its shard once loaded; used under the collection's guard."""

    def __init__(self, fd: int, path: Path) -> None:
        self.fd = fd
        self.path = path
        self.shard: qe.EdgeShard | None = None
        self.opened_at = self.used_at = time.monotonic()
        self.dirty = False
        self.timer: threading.Timer | None = None

    def get(self) -> qe.EdgeShard | None:
        """The shard, loaded on first use; None if the collection was never created."""
        if self.shard is None and self.path.is_dir():
            self.shard = qe.EdgeShard.load(str(self.path))
        return self.shard

    def require(self, collection: str) -> qe.EdgeShard:
        shard = self.get()
        if shard is None:
            raise _missing_collection(collection)
        return shard

    def write(self, collection: str, operations: Iterable[qe.UpdateOperation]) -> None:
        shard = self.require(collection)
        for operation in operations:
            self.dirty = True  # set first: a failed update may still have reached the WAL
            shard.update(operation)

    def close(self) -> None:
        """Flush what this session wrote, close the shard, release the lock."""
        if self.timer is not None:
            self.timer.cancel()
        try:
            if self.shard is not None:
                try:
                    if self.dirty:
                        self.shard.flush()
                finally:
                    self.shard.close()
        finally:
            self.shard = None
            os.close(self.fd)


class EdgeIndex:
    """Embedded vector index: one qdrant-edge shard per collection, shared across processes.

    Consecutive operations of this process share one session (lock held, shard open);
    see the module docstring for when a session ends and why.
    """

    def __init__(self, config: EdgeIndexConfig) -> None:
        self.config = config
        # One operation per collection at a time inside this process, so waiting for the
        # cross-process lock costs one thread, not one per queued task.
        self._locks: dict[str, anyio.Lock] = {}
        # Threads (operations, idle timers, aclose) touch a collection's session only
        # under its guard, so a shard is never used by two threads at once.
        self._guards: dict[str, threading.Lock] = {}
        self._state = threading.Lock()
        self._sessions: dict[str, _Session] = {}
        self._released_at: dict[str, float] = {}
        self._dimensions: dict[str, int] = {}

    async def ensure_collection(self, name: str, dimensions: int) -> None:
        if dimensions <= 0:
            raise ValueError(f"dimensions must be positive, not {dimensions}")
        # Idempotent, so once per process is enough (collections are never dropped).
        if self._dimensions.get(name) == dimensions:
            return
        await self._run(name, "ensure_collection", lambda s: _ensure_shard(s.path, dimensions))
        self._dimensions[name] = dimensions

    async def upsert(self, collection: str, points: Sequence[Point]) -> None:
        _check_points(points)
        operations = self._upserts(points)
        await self._run(collection, "upsert", lambda s: s.write(collection, operations))

    async def replace_document(
        self, collection: str, document_id: uuid.UUID, generation: int, points: Sequence[Point]
    ) -> None:
        _check_document_points(points, document_id, generation)
        operations = self._upserts(points)
        stale = qe.UpdateOperation.delete_points_by_filter(
            _edge_filter(document_id, not_equal=generation)
        )

        def run(session: _Session) -> None:
            if points or session.get() is not None:
                session.write(collection, [*operations, stale])

        await self._run(collection, "replace_document", run)

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
        return await self._run(collection, "count", lambda s: s.require(collection).count(request))

    async def point_ids(self, collection: str, document_id: uuid.UUID) -> list[uuid.UUID]:
        return [ref.id for ref in await self.scan(collection, document_id)]

    async def scan(self, collection: str, document_id: uuid.UUID | None = None) -> list[PointRef]:
        query = None if document_id is None else _edge_filter(document_id)
        scroll = _scroll_refs(query)
        return await self._run(collection, "scroll", lambda s: scroll(s.require(collection)))

    async def search(self, collection: str, vector: Sequence[float], limit: int) -> list[Hit]:
        request = qe.SearchRequest(
            query=qe.Query.Nearest(list(vector)), limit=limit, with_payload=True
        )

        def run(session: _Session) -> list[Hit]:
            return [
                Hit(id=uuid.UUID(str(p.id)), score=float(p.score), payload=dict(p.payload or {}))
                for p in session.require(collection).search(request)
            ]

        return await self._run(collection, "search", run)

    async def aclose(self) -> None:
        """Flush and close every open session (the index stays usable: it reopens)."""
        for collection in list(self._sessions):
            await anyio.to_thread.run_sync(self._close_now, collection)

    def _upserts(self, points: Sequence[Point]) -> list[qe.UpdateOperation]:
        return [
            qe.UpdateOperation.upsert_points([qe.Point(p.id, p.vector, p.payload) for p in batch])
            for batch in _batches(points, self.config.batch_size)
        ]

    async def _delete(self, collection: str, query: qe.Filter) -> None:
        operation = qe.UpdateOperation.delete_points_by_filter(query)

        def run(session: _Session) -> None:
            # A collection that was never created has nothing to delete.
            if session.get() is not None:
                session.write(collection, [operation])

        await self._run(collection, "delete", run)

    async def _run(self, collection: str, what: str, fn: Callable[[_Session], T]) -> T:
        _check_collection(collection)
        lock = self._locks.setdefault(collection, anyio.Lock())
        async with lock:
            try:
                # Not abandoned on cancel: the thread may be loading or writing the shard,
                # so a cancelled caller waits for the operation to finish.
                return await anyio.to_thread.run_sync(self._in_session, collection, fn)
            except (MissingInput, ValueError, PermanentError):
                raise
            except Exception as exc:  # qdrant-edge raises bare Exception
                raise _edge_failure(exc, f"{what} {collection}") from exc

    def _guard(self, collection: str) -> threading.Lock:
        with self._state:
            return self._guards.setdefault(collection, threading.Lock())

    def _in_session(self, collection: str, fn: Callable[[_Session], T]) -> T:
        with self._guard(collection):
            session = self._session(collection)
            try:
                result = fn(session)
            except BaseException:
                # The shard may be in any state after a failure: start afresh next time.
                self._end_quietly(collection)
                raise
            session.used_at = time.monotonic()
            self._arm(collection, session, self.config.idle_close_s)
            return result

    def _session(self, collection: str) -> _Session:
        """The open session, or a new one; a session held ``max_hold_s`` is ended first so
        other processes get their turn."""
        session = self._sessions.get(collection)
        if session is not None:
            if time.monotonic() - session.opened_at < self.config.max_hold_s:
                return session
            self._end(collection)
        # flock is not fair: re-locking at once could starve a process that waits for it.
        pause = self._released_at.get(collection, -math.inf) + self.config.yield_s
        if pause > time.monotonic():
            time.sleep(pause - time.monotonic())
        root = self.config.root
        root.mkdir(parents=True, exist_ok=True)
        fd = _lock_file(root / f"{collection}.lock")
        session = self._sessions[collection] = _Session(fd, root / collection)
        return session

    def _end(self, collection: str) -> None:
        session = self._sessions.pop(collection)
        try:
            session.close()
        finally:
            self._released_at[collection] = time.monotonic()

    def _end_quietly(self, collection: str) -> None:
        try:
            self._end(collection)
        except Exception:  # the operation's own error is the one worth reporting
            log.warning("closing embedded vector index %s failed", collection, exc_info=True)

    def _arm(self, collection: str, session: _Session, delay_s: float) -> None:
        if session.timer is not None and session.timer.is_alive():
            return  # it re-arms itself for the rest of the idle time when it fires
        session.timer = threading.Timer(delay_s, self._on_timer, (collection, session))
        session.timer.daemon = True  # a dying process releases the flock anyway
        session.timer.start()

    def _on_timer(self, collection: str, session: _Session) -> None:
        """End ``session`` if it has been idle ``idle_close_s``; else wait for the rest."""
        with self._guard(collection):
            if self._sessions.get(collection) is not session:
                return  # already ended (max hold, failure, aclose)
            left_s = session.used_at + self.config.idle_close_s - time.monotonic()
            if left_s > 0:
                session.timer = None
                self._arm(collection, session, left_s)
            else:
                self._end_quietly(collection)

    def _close_now(self, collection: str) -> None:
        with self._guard(collection):
            if collection in self._sessions:
                self._end(collection)  # aclose lets the caller see a failed flush


def _ensure_shard(path: Path, dimensions: int) -> None:
    if path.is_dir():
        _check_edge_dimensions(path, path.name, dimensions)
    else:
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
