"""The vector index on a Qdrant server (``QDRANT_URL``) through qdrant-client.

``location=":memory:"`` runs qdrant-client's local mode, which has the same API and is
what the tests use when no server is around. See :mod:`stages.ports.vector_index` for the
contract.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Any, TypeVar

import httpx
import msgspec
from qdrant_client import AsyncQdrantClient
from qdrant_client import models as qm
from qdrant_client.common.client_exceptions import QdrantException, ResourceExhaustedResponse
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

from runtime.api import (
    ConfigurationError,
    MissingInput,
    PermanentError,
    RateLimited,
    TransientError,
    one_line,
)
from stages.ports import vector_index as vi

R = TypeVar("R")

log = logging.getLogger(__name__)


class QdrantConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Where :class:`QdrantIndex` connects: a server ``url`` or a ``location`` (":memory:")."""

    url: str | None = None
    api_key: str | None = None
    location: str | None = None
    timeout_s: int = 30
    batch_size: int = vi.DEFAULT_BATCH

    def __post_init__(self) -> None:
        if (self.url is None) == (self.location is None):
            raise ConfigurationError("QdrantConfig needs exactly one of url and location")
        if self.batch_size <= 0:
            raise ConfigurationError("QdrantConfig.batch_size must be positive")


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
        qm.FieldCondition(key=vi.DOCUMENT_FIELD, match=qm.MatchValue(value=str(document_id)))
    ]
    if "equal" in generation:
        must.append(qm.FieldCondition(key=vi.GENERATION_FIELD, match=generation["equal"]))
    must_not: list[qm.Condition] = []
    if "not_equal" in generation:
        must_not.append(qm.FieldCondition(key=vi.GENERATION_FIELD, match=generation["not_equal"]))
    return qm.Filter(must=must, must_not=must_not or None)


def _tenant_filter(tenant: str | None, document_id: uuid.UUID | None = None) -> qm.Filter | None:
    """Points of one tenant collection (``default`` also matches points written before
    collections existed), optionally of one document."""
    if tenant is None:
        return None if document_id is None else _document_filter(document_id)
    match: qm.Condition = qm.FieldCondition(
        key=vi.COLLECTION_FIELD, match=qm.MatchValue(value=tenant)
    )
    if tenant == "default":
        empty = qm.IsEmptyCondition(is_empty=qm.PayloadField(key=vi.COLLECTION_FIELD))
        match = qm.Filter(should=[match, empty])
    must: list[qm.Condition] = [match]
    if document_id is not None:
        must.append(
            qm.FieldCondition(key=vi.DOCUMENT_FIELD, match=qm.MatchValue(value=str(document_id)))
        )
    return qm.Filter(must=must)


def _scan_filter(
    tenant: str | None, document_id: uuid.UUID | None, documents: Sequence[uuid.UUID] | None
) -> qm.Filter | None:
    """A scan's filter: of one document, or of ``documents``, or of all (in a tenant)."""
    if documents is None:
        return _tenant_filter(tenant, document_id)
    return _search_filter(tenant, tuple(str(d) for d in documents))


def _search_filter(tenant: str | None, documents: tuple[str, ...] | None) -> qm.Filter | None:
    """A search's filter: the tenant's points, of ``documents`` when given."""
    where = _tenant_filter(tenant)
    if documents is None:
        return where
    among = qm.FieldCondition(key=vi.DOCUMENT_FIELD, match=qm.MatchAny(any=list(documents)))
    return qm.Filter(must=[among] if where is None else [among, where])


class QdrantIndex:
    """Vector index on a Qdrant server (or qdrant-client's local mode)."""

    single_writer = False

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
        #: Collections seen to exist, and whether each has the keyword side.
        self._known: dict[str, bool] = {}

    async def ensure_vector_collection(self, name: str, dimensions: int) -> None:
        vi.check_vector_collection(name)
        try:
            if not await self._client.collection_exists(name):
                await self._create(name, dimensions)
            self._known[name] = await self._check_dimensions(name, dimensions)
        except _QDRANT_ERRORS as exc:
            raise _translate_qdrant(exc, f"ensure_vector_collection {name}") from exc

    async def upsert(self, vector_collection: str, points: Sequence[vi.Point]) -> None:
        vi.check_points(points)
        keywords = await self._require(vector_collection)
        for batch in vi.batches(points, self.config.batch_size):
            structs = [
                qm.PointStruct(id=str(p.id), vector=_vectors(p, keywords), payload=p.payload)
                for p in batch
            ]
            await self._call(
                f"upsert {vector_collection}",
                partial(self._client.upsert, vector_collection, points=structs, wait=True),
            )

    async def reserve(self, vector_collection: str) -> None:
        """Any process may write to the server at any time."""

    async def replace_document(
        self,
        vector_collection: str,
        document_id: uuid.UUID,
        generation: int,
        points: Sequence[vi.Point],
    ) -> None:
        vi.check_document_points(points, document_id, generation)
        if points:
            await self.upsert(vector_collection, points)
        await self.delete_document(vector_collection, document_id, keep_generation=generation)

    async def delete_document(
        self, vector_collection: str, document_id: uuid.UUID, *, keep_generation: int | None = None
    ) -> None:
        if keep_generation is None:
            query = _document_filter(document_id)
        else:
            query = _document_filter(document_id, not_equal=qm.MatchValue(value=keep_generation))
        await self._delete(vector_collection, query)

    async def delete_generation(
        self, vector_collection: str, document_id: uuid.UUID, generation: int
    ) -> None:
        query = _document_filter(document_id, equal=qm.MatchValue(value=generation))
        await self._delete(vector_collection, query)

    async def count(self, vector_collection: str, document_id: uuid.UUID | None = None) -> int:
        await self._require(vector_collection)
        query = None if document_id is None else _document_filter(document_id)
        result = await self._call(
            f"count {vector_collection}",
            lambda: self._client.count(vector_collection, count_filter=query, exact=True),
        )
        return int(result.count)

    async def point_ids(self, vector_collection: str, document_id: uuid.UUID) -> list[uuid.UUID]:
        return [ref.id for ref in await self.scan(vector_collection, document_id)]

    async def scan(
        self,
        vector_collection: str,
        document_id: uuid.UUID | None = None,
        *,
        tenant: str | None = None,
        documents: Sequence[uuid.UUID] | None = None,
    ) -> list[vi.PointRef]:
        await self._require(vector_collection)
        query = _scan_filter(tenant, document_id, documents)
        refs: list[vi.PointRef] = []
        offset: qm.ExtendedPointId | None = None
        while True:
            records, offset = await self._call(
                f"scroll {vector_collection}",
                partial(self._scroll, vector_collection, query, offset),
            )
            refs.extend(vi.point_ref(record.id, record.payload) for record in records)
            if offset is None:
                return refs

    async def search(
        self,
        vector_collection: str,
        query: vi.Query,
        limit: int,
        *,
        tenant: str | None = None,
    ) -> list[vi.Hit]:
        keywords = await self._require(vector_collection)
        if query.keywords is not None and not keywords:
            raise vi.no_keywords(vector_collection)
        depth, where = vi.side_depth(query, limit), _search_filter(tenant, query.documents)
        dense = found = []
        if query.vector is not None:
            dense = await self._side(vector_collection, list(query.vector), None, depth, where)
        if query.keywords is not None:
            sparse = qm.SparseVector(
                indices=list(query.keywords.indices), values=list(query.keywords.values)
            )
            found = await self._side(vector_collection, sparse, vi.KEYWORDS_VECTOR, depth, where)
        if query.mode == "hybrid":
            return vi.fuse(dense, found, query, limit)
        return dense or found

    async def _side(
        self,
        vector_collection: str,
        query: Any,
        using: str | None,
        limit: int,
        where: qm.Filter | None,
    ) -> list[vi.Hit]:
        response = await self._call(
            f"search {vector_collection}",
            lambda: self._client.query_points(
                vector_collection,
                query=query,
                using=using,
                query_filter=where,
                limit=limit,
                with_payload=True,
            ),
        )
        return [
            vi.Hit(id=uuid.UUID(str(p.id)), score=float(p.score), payload=dict(p.payload or {}))
            for p in response.points
        ]

    async def has_keywords(self, vector_collection: str) -> bool:
        return await self._require(vector_collection)

    async def drop_vector_collection(self, name: str) -> None:
        vi.check_vector_collection(name)
        self._known.pop(name, None)
        await self._call(f"drop {name}", lambda: self._client.delete_collection(name))

    async def point_alias(self, alias: str, vector_collection: str) -> None:
        """One request: drop the alias and create it on ``collection``, atomically."""
        vi.check_vector_collection(vector_collection)
        operations: list[qm.AliasOperations] = [
            qm.DeleteAliasOperation(delete_alias=qm.DeleteAlias(alias_name=alias)),
            qm.CreateAliasOperation(
                create_alias=qm.CreateAlias(collection_name=vector_collection, alias_name=alias)
            ),
        ]
        aliases = await self._call("aliases", self._client.get_aliases)
        if not any(a.alias_name == alias for a in aliases.aliases):
            operations = operations[1:]  # deleting an absent alias is an error
        await self._call(
            f"alias {alias} -> {vector_collection}",
            lambda: self._client.update_collection_aliases(change_aliases_operations=operations),
        )

    async def vector_collections(self) -> list[str]:
        try:
            found = await self._client.get_collections()
        except _QDRANT_ERRORS as exc:
            raise _translate_qdrant(exc, "vector_collections") from exc
        return sorted(c.name for c in found.collections if vi.is_ragline_collection(c.name))

    async def aclose(self) -> None:
        await self._client.close()

    async def _call(self, what: str, request: Callable[[], Awaitable[R]]) -> R:
        try:
            return await request()
        except _QDRANT_ERRORS as exc:
            raise _translate_qdrant(exc, what) from exc

    async def _scroll(
        self, vector_collection: str, query: qm.Filter | None, offset: qm.ExtendedPointId | None
    ) -> tuple[list[qm.Record], qm.ExtendedPointId | None]:
        return await self._client.scroll(
            vector_collection,
            scroll_filter=query,
            limit=vi.SCROLL_PAGE,
            offset=offset,
            with_payload=[vi.DOCUMENT_FIELD, vi.GENERATION_FIELD],
            with_vectors=False,
        )

    async def _delete(self, vector_collection: str, query: qm.Filter) -> None:
        # Deleting from a collection that was never created has nothing to do.
        what = f"delete {vector_collection}"
        if await self._call(what, lambda: self._client.collection_exists(vector_collection)):
            selector = qm.FilterSelector(filter=query)
            await self._call(
                what, lambda: self._client.delete(vector_collection, selector, wait=True)
            )

    async def _require(self, vector_collection: str) -> bool:
        """That the collection exists (:class:`MissingInput` if not); whether it has the
        keyword side."""
        vi.check_vector_collection(vector_collection)
        if vector_collection in self._known:
            return self._known[vector_collection]
        what = f"lookup {vector_collection}"
        if not await self._call(what, lambda: self._client.collection_exists(vector_collection)):
            raise vi.missing_vector_collection(vector_collection)
        info = await self._call(what, lambda: self._client.get_collection(vector_collection))
        found = vi.KEYWORDS_VECTOR in (info.config.params.sparse_vectors or {})
        self._known[vector_collection] = found
        return found

    async def _create(self, name: str, dimensions: int) -> None:
        params = qm.VectorParams(size=dimensions, distance=qm.Distance.COSINE)
        try:
            # The keyword side: a sparse vector the server weighs by inverse document
            # frequency (its IDF modifier), as the embedded index does.
            keywords = {vi.KEYWORDS_VECTOR: qm.SparseVectorParams(modifier=qm.Modifier.IDF)}
            await self._client.create_collection(
                name, vectors_config=params, sparse_vectors_config=keywords
            )
        except UnexpectedResponse as exc:
            if exc.status_code != 409:  # 409: another worker created it first
                raise
        if self.config.location is None:
            # Local mode has no payload indexes and warns about them; the server builds one.
            await self._client.create_payload_index(
                name, vi.DOCUMENT_FIELD, field_schema=qm.PayloadSchemaType.KEYWORD
            )
            # Tenant index: each collection's points stored together, searched alone.
            tenant = qm.KeywordIndexParams(type=qm.KeywordIndexType.KEYWORD, is_tenant=True)
            await self._client.create_payload_index(name, vi.COLLECTION_FIELD, field_schema=tenant)

    async def _check_dimensions(self, name: str, dimensions: int) -> bool:
        """Refuse another dimension; whether the collection has the keyword side."""
        info = await self._client.get_collection(name)
        vectors = info.config.params.vectors
        size = vectors.size if isinstance(vectors, qm.VectorParams) else None
        if size is not None and size != dimensions:
            raise PermanentError(
                f"vector collection {name!r} holds {size}-dimension vectors, not {dimensions}"
            )
        return vi.KEYWORDS_VECTOR in (info.config.params.sparse_vectors or {})


def _vectors(point: vi.Point, keywords: bool) -> Any:
    """The point's vectors as the server takes them: the dense one alone, or named with
    its keywords beside it when the collection has the keyword side."""
    if not keywords:
        return list(point.vector)
    named: dict[str, Any] = {"": list(point.vector)}
    if point.keywords is not None and point.keywords.indices:
        named[vi.KEYWORDS_VECTOR] = qm.SparseVector(
            indices=list(point.keywords.indices), values=list(point.keywords.values)
        )
    return named
