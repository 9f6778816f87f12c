"""Collections and the model switch at the vector index: both implementations (QdrantIndex
on qdrant-client's local mode, EdgeIndex on a tmp dir) filter search and scan by the
``collection`` payload field, drop a whole vector collection, and (Qdrant) move an alias
atomically."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from runtime.errors import MissingInput
from stages.edge_index import EdgeIndex, EdgeIndexConfig
from stages.qdrant_index import QdrantConfig, QdrantIndex
from stages.vector_index import (
    COLLECTION_FIELD,
    Hit,
    VectorIndex,
    collection_name,
    new_point,
)

pytestmark = pytest.mark.anyio

DIM = 8
OLD = collection_name("model-a", DIM)
NEW = collection_name("model-b", DIM)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(params=["qdrant-memory", "edge"])
async def index(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[VectorIndex]:
    made: VectorIndex
    if request.param == "edge":
        made = EdgeIndex(EdgeIndexConfig(root=tmp_path / "qdrant"))
    else:
        made = QdrantIndex(QdrantConfig(location=":memory:"))
    try:
        yield made
    finally:
        await made.aclose()


def vec(i: int) -> list[float]:
    v = [0.05] * DIM
    v[i % DIM] = 1.0
    return v


async def put(index: VectorIndex, collection: str, tenant: str | None, n: int) -> uuid.UUID:
    """A document of ``n`` points in ``tenant`` (None: a point written before collections
    existed, without the field)."""
    doc = uuid.uuid4()
    extra = {} if tenant is None else {COLLECTION_FIELD: tenant}
    points = [new_point(doc, i, 1, vec(i), extra) for i in range(n)]
    await index.replace_document(collection, doc, 1, points)
    return doc


async def test_search_and_scan_see_only_their_collection(index: VectorIndex) -> None:
    await index.ensure_collection(OLD, DIM)
    alpha = await put(index, OLD, "alpha", 5)
    beta = await put(index, OLD, "beta", 7)
    legacy = await put(index, OLD, None, 2)  # no field: belongs to "default"
    dflt = await put(index, OLD, "default", 3)

    def docs(hits: list[Hit]) -> set[str]:
        return {h.payload["document_id"] for h in hits}

    assert docs(await index.search(OLD, vec(0), 100, tenant="alpha")) == {str(alpha)}
    assert docs(await index.search(OLD, vec(0), 100, tenant="beta")) == {str(beta)}
    assert docs(await index.search(OLD, vec(0), 100, tenant="default")) == {str(legacy), str(dflt)}
    assert await index.search(OLD, vec(0), 100, tenant="nobody") == []
    assert len(await index.search(OLD, vec(0), 100)) == 17  # no tenant: every point
    assert {r.document_id for r in await index.scan(OLD, tenant="alpha")} == {str(alpha)}
    assert len(await index.scan(OLD, tenant="beta")) == 7
    assert len(await index.scan(OLD, beta, tenant="alpha")) == 0
    assert len(await index.scan(OLD, beta, tenant="beta")) == 7


async def test_drop_collection_leaves_the_others(index: VectorIndex) -> None:
    await index.ensure_collection(OLD, DIM)
    await index.ensure_collection(NEW, DIM)
    await put(index, OLD, "alpha", 3)
    await put(index, NEW, "alpha", 4)
    await index.drop_collection(OLD)
    assert await index.collections() == [NEW]
    with pytest.raises(MissingInput):
        await index.search(OLD, vec(0), 5)
    assert await index.count(NEW) == 4
    await index.drop_collection(OLD)  # absent: nothing to do
    # Created again when asked for (a migration back to the old model).
    await index.ensure_collection(OLD, DIM)
    assert await index.count(OLD) == 0


async def test_qdrant_alias_moves_in_one_step() -> None:
    index = QdrantIndex(QdrantConfig(location=":memory:"))
    try:
        await index.ensure_collection(OLD, DIM)
        await index.ensure_collection(NEW, DIM)
        await index.point_alias("ragline", OLD)
        client = index._client

        async def aliases() -> list[tuple[str, str]]:
            found = (await client.get_aliases()).aliases
            return [(a.alias_name, a.collection_name) for a in found]

        assert await aliases() == [("ragline", OLD)]
        await index.point_alias("ragline", NEW)
        assert await aliases() == [("ragline", NEW)]
    finally:
        await index.aclose()
