"""The embedded vector index: one qdrant-edge shard per collection under the data dir.

See :mod:`stages.ports.vector_index` for the contract, and
:mod:`stages.adapters.vector_index.edge.session` for how processes share a shard (sessions
under an ``flock``). The shard's search is exact: no HNSW build is triggered, as
``optimize()`` would hold the lock far too long. Its cost, and what a crash can lose:
docs/architecture.md, "The embedded index with several worker processes".
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import anyio
import anyio.to_thread
import qdrant_edge as qe

from runtime.api import (
    MissingInput,
    PermanentError,
    Snooze,
    StorageFull,
    TransientError,
    is_storage_full,
    one_line,
)
from stages.adapters.vector_index.edge.points import edge_points, payload_of
from stages.adapters.vector_index.edge.session import EdgeIndexConfig, Session, Sessions
from stages.adapters.vector_index.edge.shard import (
    check_edge_dimensions,
    ensure_shard,
    has_keywords,
)
from stages.ports.vector_index import (
    COLLECTION_FIELD,
    DEFAULT_COLLECTION,
    DOCUMENT_FIELD,
    GENERATION_FIELD,
    KEYWORDS_VECTOR,
    SCROLL_PAGE,
    Hit,
    Point,
    PointRef,
    Query,
    batches,
    check_document_points,
    check_points,
    check_vector_collection,
    fuse,
    is_ragline_collection,
    no_keywords,
    point_ref,
    side_depth,
)

__all__ = ["EdgeIndex", "EdgeIndexConfig"]

T = TypeVar("T")

log = logging.getLogger(__name__)


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


def _tenant_filter(tenant: str | None, document_id: uuid.UUID | None = None) -> qe.Filter | None:
    """Points of one tenant collection (``default`` also matches points written before
    collections existed, which carry no field), optionally of one document."""
    if tenant is None:
        return None if document_id is None else _edge_filter(document_id)
    match: Any = qe.FieldCondition(COLLECTION_FIELD, match=qe.MatchValue(tenant))
    if tenant == DEFAULT_COLLECTION:
        match = qe.Filter(should=[match, qe.IsEmptyCondition(COLLECTION_FIELD)])
    must: list[Any] = [match]
    if document_id is not None:
        must.append(qe.FieldCondition(DOCUMENT_FIELD, match=qe.MatchValue(str(document_id))))
    return qe.Filter(must=must)


def _scan_filter(
    tenant: str | None, document_id: uuid.UUID | None, documents: Sequence[uuid.UUID] | None
) -> qe.Filter | None:
    """A scan's filter: of one document, or of ``documents``, or of all (in a tenant)."""
    if documents is None:
        return _tenant_filter(tenant, document_id)
    return _search_filter(tenant, tuple(str(d) for d in documents))


def _search_filter(tenant: str | None, documents: tuple[str, ...] | None) -> qe.Filter | None:
    """A search's filter: the tenant's points, of ``documents`` when given."""
    where = _tenant_filter(tenant)
    if documents is None:
        return where
    among = qe.FieldCondition(DOCUMENT_FIELD, match=qe.MatchAny(list(documents)))
    return qe.Filter(must=[among] if where is None else [among, where])


def _edge_failure(exc: Exception, what: str) -> Exception:
    message = one_line(f"embedded vector index {what}: {exc}")
    if is_storage_full(exc):
        return StorageFull(message)
    # WouldBlock: something outside ragline's lock holds the shard open; it may let go.
    if isinstance(exc, OSError) or "WouldBlock" in str(exc):
        return TransientError(message)
    return PermanentError(message)


class EdgeIndex:
    """Embedded vector index: one qdrant-edge shard per collection, shared across processes.

    Consecutive operations of this process share one session (lock held, shard open);
    see :mod:`stages.adapters.vector_index.edge.session` for when a session ends and why.
    """

    single_writer = True

    def __init__(self, config: EdgeIndexConfig) -> None:
        self.config = config
        # One operation per collection at a time inside this process, so waiting for the
        # cross-process lock costs one thread, not one per queued task.
        self._locks: dict[str, anyio.Lock] = {}
        self._sessions = Sessions(config)
        self._dimensions: dict[str, int] = {}

    async def ensure_vector_collection(self, name: str, dimensions: int) -> None:
        if dimensions <= 0:
            raise ValueError(f"dimensions must be positive, not {dimensions}")
        # Idempotent, so once per process is enough while the shard stays (a model switch
        # drops the old collection: then it is created again if asked for).
        path = self.config.root / check_vector_collection(name)
        if self._dimensions.get(name) == dimensions and path.is_dir():
            return
        if path.is_dir():
            # A shard is renamed into place whole, so its config can be read without the
            # lock: a process that does not hold the collection need not take it here.
            check_edge_dimensions(path, name, dimensions)
        else:
            await self._run(
                name, "ensure_vector_collection", lambda s: ensure_shard(s.path, dimensions)
            )
        self._dimensions[name] = dimensions

    async def has_keywords(self, vector_collection: str) -> bool:
        return has_keywords(self.config.root / check_vector_collection(vector_collection))

    async def reserve(self, vector_collection: str) -> None:
        """Hold the collection for this process's next writes, or raise :class:`Snooze`
        when another process that runs index jobs holds it: the job goes to the process
        that has the shard loaded instead of the shard moving between processes (a load
        and a flush each time, the process stalled meanwhile: qdrant-edge holds the
        GIL). A reader's hold is waited out."""
        check_vector_collection(vector_collection)
        async with self._locks.setdefault(vector_collection, anyio.Lock()):
            hold = functools.partial(self._sessions.try_hold, vector_collection)
            try:
                held = await anyio.to_thread.run_sync(hold)
            except OSError as exc:
                raise _edge_failure(exc, f"reserve {vector_collection}") from exc
        if not held:
            raise Snooze(f"another worker process is indexing into {vector_collection}")

    async def upsert(self, vector_collection: str, points: Sequence[Point]) -> None:
        check_points(points)
        # A write in no hurry (an index job's slice, a backfill): ``.queued`` if it waits.
        # The points are converted in the session's thread, as the upserts are consumed.
        await self._run(
            vector_collection,
            "upsert",
            lambda s: s.write(vector_collection, self._upserts(s, points)),
            batch=True,
        )

    async def replace_document(
        self,
        vector_collection: str,
        document_id: uuid.UUID,
        generation: int,
        points: Sequence[Point],
    ) -> None:
        check_document_points(points, document_id, generation)
        stale = qe.UpdateOperation.delete_points_by_filter(
            _edge_filter(document_id, not_equal=generation)
        )
        mine = qe.CountRequest(exact=True, filter=_edge_filter(document_id))
        distinct = len({p.id for p in points})

        def run(session: Session) -> None:
            if not points and session.get() is None:
                return  # a collection never created holds no stale points
            # Built in the thread: converting payloads into qdrant-edge's points is the
            # index stage's largest CPU cost, and would otherwise hold the event loop.
            session.write(vector_collection, self._upserts(session, points))
            # Every point of the document just written is of this generation, so when it
            # has no more points than that, none is stale: skip the delete, which reads
            # each of its points' payload (~6 µs a point; the count reads the keyword
            # index, ~0.4 µs). The session's lock keeps other processes out meanwhile.
            if not points or session.require(vector_collection).count(mine) != distinct:
                session.write(vector_collection, [stale])

        await self._run(vector_collection, "replace_document", run, batch=True)

    async def delete_document(
        self, vector_collection: str, document_id: uuid.UUID, *, keep_generation: int | None = None
    ) -> None:
        await self._delete(vector_collection, _edge_filter(document_id, not_equal=keep_generation))

    async def delete_generation(
        self, vector_collection: str, document_id: uuid.UUID, generation: int
    ) -> None:
        await self._delete(vector_collection, _edge_filter(document_id, equal=generation))

    async def count(self, vector_collection: str, document_id: uuid.UUID | None = None) -> int:
        query = None if document_id is None else _edge_filter(document_id)
        request = qe.CountRequest(exact=True, filter=query)
        return await self._run(
            vector_collection, "count", lambda s: s.require(vector_collection).count(request)
        )

    async def point_ids(self, vector_collection: str, document_id: uuid.UUID) -> list[uuid.UUID]:
        return [ref.id for ref in await self.scan(vector_collection, document_id)]

    async def scan(
        self,
        vector_collection: str,
        document_id: uuid.UUID | None = None,
        *,
        tenant: str | None = None,
        documents: Sequence[uuid.UUID] | None = None,
    ) -> list[PointRef]:
        query = _scan_filter(tenant, document_id, documents)
        scroll = _scroll_refs(query)
        return await self._run(
            vector_collection, "scroll", lambda s: scroll(s.require(vector_collection))
        )

    async def search(
        self,
        vector_collection: str,
        query: Query,
        limit: int,
        *,
        tenant: str | None = None,
    ) -> list[Hit]:
        depth, where = side_depth(query, limit), _search_filter(tenant, query.documents)
        # Hybrid: each side's ranking without payloads (reading and decoding a payload
        # costs more than scoring a point), then the payloads of the fused best only.
        hybrid = query.mode == "hybrid"
        dense = keyword = None
        if query.vector is not None:
            dense = _request(qe.Query.Nearest(list(query.vector)), depth, where, not hybrid)
        if query.keywords is not None:
            words = qe.SparseVector(
                indices=list(query.keywords.indices), values=list(query.keywords.values)
            )
            keyword = _request(
                qe.Query.Nearest(words, using=KEYWORDS_VECTOR), depth, where, not hybrid
            )

        def run(session: Session) -> list[Hit]:
            shard = session.require(vector_collection)
            if keyword is not None and not has_keywords(session.path):
                raise no_keywords(vector_collection)
            found_dense, found_keyword = _hits(shard, dense), _hits(shard, keyword)
            if hybrid:
                return _with_payloads(shard, fuse(found_dense, found_keyword, query, limit))
            return found_dense or found_keyword

        return await self._run(vector_collection, "search", run)

    async def drop_vector_collection(self, name: str) -> None:
        def run(session: Session) -> None:
            # Under the collection's flock: no other process has the shard open.
            if session.shard is not None:
                session.shard.close()
                session.shard = None
            session.dirty = False
            if session.path.is_dir():
                # Renamed first, so a crash mid-delete leaves no half shard under the name.
                doomed = session.path.with_name(f".tmp-drop-{name}-{uuid.uuid4().hex}")
                os.rename(session.path, doomed)
                shutil.rmtree(doomed, ignore_errors=True)

        await self._run(name, "drop_vector_collection", run)
        self._dimensions.pop(name, None)

    async def point_alias(self, alias: str, vector_collection: str) -> None:
        """The embedded index's alias is the row in PostgreSQL (vector_aliases)."""

    async def vector_collections(self) -> list[str]:
        root = self.config.root
        if not root.is_dir():
            return []
        return sorted(
            p.name for p in root.iterdir() if p.is_dir() and is_ragline_collection(p.name)
        )

    async def aclose(self) -> None:
        """Flush and close every open session (the index stays usable: it reopens)."""
        for vector_collection in self._sessions.open_collections():
            await anyio.to_thread.run_sync(self._sessions.close_now, vector_collection)

    def _upserts(self, session: Session, points: Sequence[Point]) -> Iterator[qe.UpdateOperation]:
        # One batch's qdrant-edge points at a time, not a whole document's (memory).
        keywords = has_keywords(session.path)
        for batch in batches(points, self.config.batch_size):
            yield qe.UpdateOperation.upsert_points(edge_points(batch, keywords))

    async def _delete(self, vector_collection: str, query: qe.Filter) -> None:
        operation = qe.UpdateOperation.delete_points_by_filter(query)

        def run(session: Session) -> None:
            # A collection that was never created has nothing to delete.
            if session.get() is not None:
                session.write(vector_collection, [operation])

        await self._run(vector_collection, "delete", run)

    async def _run(
        self, vector_collection: str, what: str, fn: Callable[[Session], T], *, batch: bool = False
    ) -> T:
        check_vector_collection(vector_collection)
        lock = self._locks.setdefault(vector_collection, anyio.Lock())
        async with lock:
            try:
                # Not abandoned on cancel: the thread may be loading or writing the shard,
                # so a cancelled caller waits for the operation to finish.
                run = functools.partial(self._sessions.run, vector_collection, fn, batch=batch)
                return await anyio.to_thread.run_sync(run)
            except (MissingInput, ValueError, PermanentError, Snooze, StorageFull):
                raise
            except Exception as exc:  # qdrant-edge raises bare Exception
                raise _edge_failure(exc, f"{what} {vector_collection}") from exc


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


def _request(query: Any, limit: int, where: qe.Filter | None, payload: bool) -> qe.SearchRequest:
    return qe.SearchRequest(query=query, limit=limit, filter=where, with_payload=payload)


def _hits(shard: qe.EdgeShard, request: qe.SearchRequest | None) -> list[Hit]:
    if request is None:
        return []
    return [
        Hit(id=uuid.UUID(str(p.id)), score=float(p.score), payload=payload_of(p.payload))
        for p in shard.search(request)
    ]


def _with_payloads(shard: qe.EdgeShard, hits: list[Hit]) -> list[Hit]:
    """``hits`` with their payloads read from ``shard`` (in the same session as the
    search: no point can go in between)."""
    if not hits:
        return hits
    records = shard.retrieve([str(h.id) for h in hits], with_payload=True, with_vector=False)
    stored = {str(r.id): r.payload for r in records}
    return [Hit(id=h.id, score=h.score, payload=payload_of(stored.get(str(h.id)))) for h in hits]
