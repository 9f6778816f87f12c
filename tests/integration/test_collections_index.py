"""Collections and the model switch at the vector index: both implementations (QdrantIndex
on qdrant-client's local mode, EdgeIndex on a tmp dir) filter search and scan by the
``collection`` payload field, drop a whole vector collection, and (Qdrant) move an alias
atomically; EdgeIndex still reads, replaces and deletes points of its earlier layouts."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import qdrant_edge as qe

from runtime.errors import MissingInput
from stages.adapters.vector_index.edge.index import EdgeIndex, EdgeIndexConfig
from stages.adapters.vector_index.qdrant import QdrantConfig, QdrantIndex
from stages.ports.vector_index import (
    COLLECTION_FIELD,
    DOCUMENT_FIELD,
    GENERATION_FIELD,
    Hit,
    Point,
    VectorIndex,
    new_point,
    vector_collection_name,
)

pytestmark = pytest.mark.anyio

DIM = 8
OLD = vector_collection_name("model-a", DIM)
NEW = vector_collection_name("model-b", DIM)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


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
    await index.ensure_vector_collection(OLD, DIM)
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
    await index.ensure_vector_collection(OLD, DIM)
    await index.ensure_vector_collection(NEW, DIM)
    await put(index, OLD, "alpha", 3)
    await put(index, NEW, "alpha", 4)
    await index.drop_vector_collection(OLD)
    assert await index.vector_collections() == [NEW]
    with pytest.raises(MissingInput):
        await index.search(OLD, vec(0), 5)
    assert await index.count(NEW) == 4
    await index.drop_vector_collection(OLD)  # absent: nothing to do
    # Created again when asked for (a migration back to the old model).
    await index.ensure_vector_collection(OLD, DIM)
    assert await index.count(OLD) == 0


async def test_qdrant_alias_moves_in_one_step() -> None:
    index = QdrantIndex(QdrantConfig(location=":memory:"))
    try:
        await index.ensure_vector_collection(OLD, DIM)
        await index.ensure_vector_collection(NEW, DIM)
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


# -- points the embedded index wrote in earlier layouts -------------------------------------


def _packed_with_collection(payload: dict[str, Any]) -> dict[str, Any]:
    """The packed layout as written until default's collection field was left out: four
    fields, the whole payload as JSON text in ``ragline_payload``."""
    keep = (DOCUMENT_FIELD, GENERATION_FIELD, COLLECTION_FIELD)
    return {"ragline_payload": json.dumps(payload), **{k: payload[k] for k in keep}}


def _plain_before_collections(payload: dict[str, Any]) -> dict[str, Any]:
    """Before packing and before collections: every field plain, no collection field."""
    return {k: v for k, v in payload.items() if k != COLLECTION_FIELD}


@pytest.mark.parametrize("layout", [_packed_with_collection, _plain_before_collections])
async def test_points_of_earlier_layouts_are_searched_scanned_replaced_and_deleted(
    tmp_path: Path, layout: Callable[[dict[str, Any]], dict[str, Any]]
) -> None:
    root = tmp_path / "qdrant"
    index = EdgeIndex(EdgeIndexConfig(root=root))
    await index.ensure_vector_collection(OLD, DIM)
    await index.aclose()
    doc, gone = uuid.uuid4(), uuid.uuid4()

    def chunks(document: uuid.UUID, generation: int, n: int) -> list[Point]:
        extra = {COLLECTION_FIELD: "default", "text": f"chunk of {generation}", "page_start": 1}
        return [new_point(document, i, generation, vec(i), extra) for i in range(n)]

    old = chunks(doc, 1, 4) + chunks(gone, 1, 2)
    shard = qe.EdgeShard.load(str(root / OLD))  # as an earlier ragline left it on disk
    try:
        stored = [qe.Point(p.id, list(p.vector), layout(p.payload)) for p in old]
        shard.update(qe.UpdateOperation.upsert_points(stored))
        shard.flush()
    finally:
        shard.close()
    try:
        # Search shows what was written (and what the layout kept), in the default tenant.
        expected = {p.id: layout(p.payload) for p in old}
        if layout is _packed_with_collection:
            expected = {p.id: p.payload for p in old}
        hits = await index.search(OLD, vec(0), 100, tenant="default")
        assert {h.id: h.payload for h in hits} == expected
        assert await index.search(OLD, vec(0), 100, tenant="alpha") == []
        # verify's view: every point with its document and generation.
        refs = await index.scan(OLD, tenant="default")
        assert sorted((r.document_id, r.generation) for r in refs) == sorted(
            [(str(doc), 1)] * 4 + [(str(gone), 1)] * 2
        )
        # A reprocess writes the new layout and leaves none of the old points behind.
        await index.replace_document(OLD, doc, 2, chunks(doc, 2, 3))
        assert {(r.id, r.generation) for r in await index.scan(OLD, doc)} == {
            (p.id, 2) for p in chunks(doc, 2, 3)
        }
        hits = await index.search(OLD, vec(0), 100, tenant="default")
        assert {h.payload["document_id"] for h in hits} == {str(doc), str(gone)}
        new = [h for h in hits if h.payload["generation"] == 2]
        assert len(new) == 3 and {h.payload[COLLECTION_FIELD] for h in new} == {"default"}
        # delete and a failed run's clean-up find old points too.
        await index.delete_generation(OLD, gone, 1)
        assert await index.count(OLD, gone) == 0
        await index.delete_document(OLD, doc)
        assert await index.count(OLD) == 0
    finally:
        await index.aclose()
