"""One conformance suite for the vector index's port (stages.ports.vector_index.VectorIndex):
every test runs against each implementation, the embedded index (EdgeIndex, qdrant-edge on
a tmp dir) and the Qdrant adapter (QdrantIndex on qdrant-client's local mode,
``":memory:"``), and each implementation has every member of the port. What one adapter
alone does is in tests/integration/test_edge_index.py and test_qdrant_index.py."""

from __future__ import annotations

import math
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import pytest

from runtime.errors import MissingInput, PermanentError
from stages.adapters.vector_index.edge.index import EdgeIndex, EdgeIndexConfig
from stages.adapters.vector_index.qdrant import QdrantConfig, QdrantIndex
from stages.ports.vector_index import (
    COLLECTION_FIELD,
    DOCUMENT_FIELD,
    Hit,
    Keywords,
    Point,
    Query,
    VectorIndex,
    new_point,
    point_id,
    vector_collection_name,
)
from stages.text.keywords import query_vector, text_vector
from tests.support.parity import parity_problems, port_members
from tests.support.vectors import DIM, points, unit, vec

pytestmark = pytest.mark.anyio

COLLECTION = vector_collection_name("test-model", DIM)
OLD = vector_collection_name("model-a", DIM)
NEW = vector_collection_name("model-b", DIM)
IMPLEMENTATIONS = (EdgeIndex, QdrantIndex)


async def put(index: VectorIndex, collection: str, tenant: str | None, n: int) -> uuid.UUID:
    """A document of ``n`` points in ``tenant`` (None: a point written before collections
    existed, without the field)."""
    doc = uuid.uuid4()
    extra = {} if tenant is None else {COLLECTION_FIELD: tenant}
    written = [new_point(doc, i, 1, vec(i), extra) for i in range(n)]
    await index.replace_document(collection, doc, 1, written)
    return doc


@pytest.fixture(params=["qdrant-memory", "edge"])
async def index(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[VectorIndex]:
    """Each vector index in turn: QdrantIndex on qdrant-client's local mode (":memory:"),
    EdgeIndex on a tmp dir."""
    made: VectorIndex
    if request.param == "edge":
        made = EdgeIndex(EdgeIndexConfig(root=tmp_path / "qdrant"))
    else:
        made = QdrantIndex(QdrantConfig(location=":memory:"))
    try:
        yield made
    finally:
        await made.aclose()


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS, ids=lambda c: c.__name__)
def test_every_index_has_every_member_of_the_port(implementation: type) -> None:
    assert {"single_writer", "reserve", "replace_document", "search"} <= set(
        port_members(VectorIndex)
    )
    assert parity_problems(VectorIndex, implementation) == []


async def test_ensure_collection_is_idempotent(index: VectorIndex) -> None:
    await index.ensure_vector_collection(COLLECTION, DIM)
    doc = uuid.uuid4()
    await index.upsert(COLLECTION, points(doc, 1, 5))
    await index.ensure_vector_collection(COLLECTION, DIM)
    assert await index.count(COLLECTION) == 5
    with pytest.raises(PermanentError):
        await index.ensure_vector_collection(COLLECTION, DIM + 1)


async def test_upserting_same_ids_twice_does_not_duplicate(index: VectorIndex) -> None:
    await index.ensure_vector_collection(COLLECTION, DIM)
    doc, other = uuid.uuid4(), uuid.uuid4()
    await index.upsert(COLLECTION, points(doc, 1, 300))  # more than one batch
    await index.upsert(COLLECTION, points(doc, 1, 300))
    await index.upsert(COLLECTION, points(other, 1, 7))
    assert await index.count(COLLECTION, doc) == 300
    assert await index.count(COLLECTION, other) == 7
    assert await index.count(COLLECTION) == 307
    ids = await index.point_ids(COLLECTION, other)
    assert sorted(ids) == sorted(point_id(other, n) for n in range(7))
    assert len(await index.point_ids(COLLECTION, doc)) == 300


async def test_delete_document_keep_generation_drops_only_stale_points(
    index: VectorIndex,
) -> None:
    await index.ensure_vector_collection(COLLECTION, DIM)
    doc, other = uuid.uuid4(), uuid.uuid4()
    await index.upsert(COLLECTION, points(doc, 1, 10))  # generation 1: chunks 0..9
    await index.upsert(COLLECTION, points(doc, 2, 6))  # generation 2 rewrote chunks 0..5
    await index.upsert(COLLECTION, points(other, 1, 4))
    await index.delete_document(COLLECTION, doc, keep_generation=2)
    assert sorted(await index.point_ids(COLLECTION, doc)) == sorted(
        point_id(doc, n) for n in range(6)
    )
    assert await index.count(COLLECTION, other) == 4
    await index.delete_document(COLLECTION, doc)
    assert await index.count(COLLECTION, doc) == 0
    assert await index.count(COLLECTION, other) == 4


async def test_delete_generation_removes_what_one_run_wrote(index: VectorIndex) -> None:
    await index.ensure_vector_collection(COLLECTION, DIM)
    doc = uuid.uuid4()
    await index.upsert(COLLECTION, points(doc, 1, 10))
    await index.upsert(COLLECTION, points(doc, 2, 13, start=10))  # a failed run's partial output
    await index.delete_generation(COLLECTION, doc, 2)
    assert await index.count(COLLECTION, doc) == 10
    assert await index.count(COLLECTION) == 10


async def test_search_returns_nearest_first(index: VectorIndex) -> None:
    await index.ensure_vector_collection(COLLECTION, DIM)
    doc = uuid.uuid4()
    await index.upsert(COLLECTION, points(doc, 1, DIM))
    hits = await index.search(COLLECTION, Query(vector=unit(3)), limit=3)
    assert len(hits) == 3
    assert hits[0].id == point_id(doc, 3)
    # 1e-3: the embedded index stores vectors as float16 (about 3 significant digits).
    assert math.isclose(hits[0].score, 1.0, abs_tol=1e-3)
    assert hits[0].payload == {"document_id": str(doc), "generation": 1, "ordinal": 3}
    assert hits[0].score > hits[1].score >= hits[2].score


async def test_missing_collection(index: VectorIndex) -> None:
    missing = vector_collection_name("never-created", DIM)
    with pytest.raises(MissingInput):
        await index.count(missing)
    with pytest.raises(MissingInput):
        await index.search(missing, Query(vector=unit(0)), limit=1)
    with pytest.raises(MissingInput):
        await index.upsert(missing, points(uuid.uuid4(), 1, 1))
    await index.delete_document(missing, uuid.uuid4())  # nothing to delete is fine
    await index.delete_generation(missing, uuid.uuid4(), 1)


async def test_bad_input_is_rejected(index: VectorIndex) -> None:
    await index.ensure_vector_collection(COLLECTION, DIM)
    bare = Point(id=uuid.uuid4(), vector=unit(0), payload={})
    with pytest.raises(ValueError):
        await index.upsert(COLLECTION, [bare])
    with pytest.raises(PermanentError):
        await index.upsert(COLLECTION, [new_point(uuid.uuid4(), 0, 1, [1.0, 2.0])])
    with pytest.raises(ValueError):
        await index.count("../escape")


def test_names_and_ids() -> None:
    assert vector_collection_name("cohere/embed-v4.0", 1024) == "ragline_cohere_embed-v4_0_1024"
    assert vector_collection_name("MiniLM L6", 384) == "ragline_minilm_l6_384"
    doc = uuid.uuid4()
    assert point_id(doc, 1) == point_id(doc, 1) != point_id(doc, 2)
    assert point_id(doc, 1) != point_id(uuid.uuid4(), 1)


# -- replace_document ----------------------------------------------------------------------


async def test_replace_document_upserts_then_drops_other_generations(index: VectorIndex) -> None:
    await index.ensure_vector_collection(COLLECTION, DIM)
    doc, other = uuid.uuid4(), uuid.uuid4()
    await index.replace_document(COLLECTION, doc, 1, points(doc, 1, 10))
    await index.replace_document(COLLECTION, other, 1, points(other, 1, 4))
    for _ in range(2):  # a re-run after a crash changes nothing
        await index.replace_document(COLLECTION, doc, 2, points(doc, 2, 6))
        refs = await index.scan(COLLECTION, doc)
        assert sorted(r.id for r in refs) == sorted(point_id(doc, n) for n in range(6))
        assert {r.generation for r in refs} == {2}
        assert await index.count(COLLECTION, other) == 4
    await index.replace_document(COLLECTION, doc, 3, [])  # nothing left to index
    assert await index.count(COLLECTION, doc) == 0
    assert await index.count(COLLECTION) == 4


async def test_replace_document_drops_as_many_points_at_other_ordinals(
    index: VectorIndex,
) -> None:
    """A generation with as many points as the last, none of them at its ordinals: the
    document ends with the new points only (however the index decides what is stale)."""
    await index.ensure_vector_collection(COLLECTION, DIM)
    doc = uuid.uuid4()
    await index.replace_document(COLLECTION, doc, 1, points(doc, 1, 5))
    await index.replace_document(COLLECTION, doc, 2, points(doc, 2, 8, start=3))
    refs = await index.scan(COLLECTION, doc)
    assert sorted(r.id for r in refs) == sorted(point_id(doc, n) for n in range(3, 8))
    assert {r.generation for r in refs} == {2}
    # Same ids, same generation, written again: nothing stale, nothing lost.
    await index.replace_document(COLLECTION, doc, 2, points(doc, 2, 8, start=3))
    assert await index.count(COLLECTION, doc) == 5


async def test_replace_document_rejects_foreign_points(index: VectorIndex) -> None:
    await index.ensure_vector_collection(COLLECTION, DIM)
    doc = uuid.uuid4()
    with pytest.raises(ValueError):
        await index.replace_document(COLLECTION, doc, 2, points(doc, 1, 3))
    with pytest.raises(ValueError):
        await index.replace_document(COLLECTION, doc, 1, points(uuid.uuid4(), 1, 3))
    assert await index.count(COLLECTION) == 0


async def test_replace_document_in_missing_collection(index: VectorIndex) -> None:
    missing = vector_collection_name("never-created", DIM)
    doc = uuid.uuid4()
    with pytest.raises(MissingInput):
        await index.replace_document(missing, doc, 1, points(doc, 1, 2))
    await index.replace_document(missing, doc, 1, [])  # nothing to write or delete is fine


# -- collections (tenants) and vector collections ------------------------------------------


async def test_search_and_scan_see_only_their_collection(index: VectorIndex) -> None:
    await index.ensure_vector_collection(OLD, DIM)
    alpha = await put(index, OLD, "alpha", 5)
    beta = await put(index, OLD, "beta", 7)
    legacy = await put(index, OLD, None, 2)  # no field: belongs to "default"
    dflt = await put(index, OLD, "default", 3)

    def docs(hits: list[Hit]) -> set[str]:
        return {h.payload["document_id"] for h in hits}

    assert docs(await index.search(OLD, Query(vector=vec(0)), 100, tenant="alpha")) == {str(alpha)}
    assert docs(await index.search(OLD, Query(vector=vec(0)), 100, tenant="beta")) == {str(beta)}
    assert docs(await index.search(OLD, Query(vector=vec(0)), 100, tenant="default")) == {
        str(legacy),
        str(dflt),
    }
    assert await index.search(OLD, Query(vector=vec(0)), 100, tenant="nobody") == []
    assert len(await index.search(OLD, Query(vector=vec(0)), 100)) == 17  # no tenant: every point
    assert {r.document_id for r in await index.scan(OLD, tenant="alpha")} == {str(alpha)}
    assert len(await index.scan(OLD, tenant="beta")) == 7
    assert len(await index.scan(OLD, beta, tenant="alpha")) == 0
    assert len(await index.scan(OLD, beta, tenant="beta")) == 7


async def test_scan_of_a_page_of_documents(index: VectorIndex) -> None:
    await index.ensure_vector_collection(OLD, DIM)
    alpha = await put(index, OLD, "alpha", 5)
    beta = await put(index, OLD, "beta", 7)
    gamma = await put(index, OLD, None, 2)
    page = await index.scan(OLD, documents=[alpha, gamma])
    assert sorted(r.document_id for r in page) == sorted([str(alpha)] * 5 + [str(gamma)] * 2)
    assert len(await index.scan(OLD, documents=[alpha, beta], tenant="beta")) == 7
    assert len(await index.scan(OLD, documents=[gamma], tenant="default")) == 2
    assert await index.scan(OLD, documents=[]) == []
    assert await index.scan(OLD, documents=[uuid.uuid4()]) == []


async def test_drop_collection_leaves_the_others(index: VectorIndex) -> None:
    await index.ensure_vector_collection(OLD, DIM)
    await index.ensure_vector_collection(NEW, DIM)
    await put(index, OLD, "alpha", 3)
    await put(index, NEW, "alpha", 4)
    await index.drop_vector_collection(OLD)
    assert await index.vector_collections() == [NEW]
    with pytest.raises(MissingInput):
        await index.search(OLD, Query(vector=vec(0)), 5)
    assert await index.count(NEW) == 4
    await index.drop_vector_collection(OLD)  # absent: nothing to do
    # Created again when asked for (a migration back to the old model).
    await index.ensure_vector_collection(OLD, DIM)
    assert await index.count(OLD) == 0


# -- keyword and hybrid search ---------------------------------------------------------


def chunk(doc: uuid.UUID, ordinal: int, text: str, vector: list[float]) -> Point:
    words = Keywords(*text_vector(text))
    point = new_point(doc, ordinal, 1, vector, {"ordinal": ordinal, "text": text})
    return msgspec.structs.replace(point, keywords=words)


TEXTS = [
    "The lens of a lighthouse gathers the lamp's light into a beam.",
    "Call asn1_der_decoding to read a DER-encoded structure.",
    "Sourdough needs a starter fed with flour and water.",
    "The beam of the light sweeps the sea at night.",
]


async def keyword_corpus(index: VectorIndex) -> uuid.UUID:
    await index.ensure_vector_collection(COLLECTION, DIM)
    doc = uuid.uuid4()
    written = [chunk(doc, i, text, unit(i)) for i, text in enumerate(TEXTS)]
    await index.replace_document(COLLECTION, doc, 1, written)
    return doc


def words(text: str) -> Keywords:
    return Keywords(*query_vector(text))


async def test_keyword_search_finds_an_exact_identifier(index: VectorIndex) -> None:
    doc = await keyword_corpus(index)
    hits = await index.search(COLLECTION, Query(keywords=words("asn1_der_decoding")), 3)
    assert [h.id for h in hits] == [point_id(doc, 1)]  # only the chunk that holds it
    found = await index.search(COLLECTION, Query(keywords=words("DER decoding")), 3)
    assert found[0].id == point_id(doc, 1)  # its parts find it too
    # Rarer terms weigh more (IDF): "beam" is in two chunks, "lens" in one.
    ranked = await index.search(COLLECTION, Query(keywords=words("lens beam")), 3)
    assert ranked[0].id == point_id(doc, 0) and {h.id for h in ranked} == {
        point_id(doc, 0),
        point_id(doc, 3),
    }


async def test_hybrid_search_fuses_meaning_and_words(index: VectorIndex) -> None:
    doc = await keyword_corpus(index)
    # The vector points at chunk 2, the words at chunk 1: both rank; each side's first
    # comes first in its own mode.
    query = Query(vector=unit(2), keywords=words("asn1_der_decoding"))
    hybrid = await index.search(COLLECTION, query, 4)
    assert {hybrid[0].id, hybrid[1].id} == {point_id(doc, 1), point_id(doc, 2)}
    # Every fused hit carries its own point's payload (the embedded index reads the
    # payloads of the fused best only, after ranking both sides without them).
    by_id = {point_id(doc, n): n for n in range(len(TEXTS))}
    assert all(h.payload["ordinal"] == by_id[h.id] for h in hybrid)
    assert all(h.payload["text"] == TEXTS[by_id[h.id]] for h in hybrid)
    dense = await index.search(COLLECTION, Query(vector=unit(2)), 1)
    assert dense[0].id == point_id(doc, 2)
    tilted = Query(vector=unit(2), keywords=words("asn1_der_decoding"), weights=(1.0, 2.0))
    assert (await index.search(COLLECTION, tilted, 1))[0].id == point_id(doc, 1)
    tenants = await index.search(COLLECTION, query, 4, tenant="nobody")
    assert tenants == []


async def test_search_among_documents_sees_only_them(index: VectorIndex) -> None:
    """A filtered search names the documents PostgreSQL allowed: only their points
    answer, in every mode and with the tenant filter on top."""
    doc = await keyword_corpus(index)
    other = uuid.uuid4()
    await index.replace_document(COLLECTION, other, 1, [chunk(other, 0, TEXTS[1], unit(1))])
    for query in (Query(vector=unit(1)), Query(keywords=words("asn1_der_decoding"))):
        both = await index.search(COLLECTION, query, 10)
        assert {str(h.payload[DOCUMENT_FIELD]) for h in both} == {str(doc), str(other)}
        only = msgspec.structs.replace(query, documents=(str(other),))
        assert [h.id for h in await index.search(COLLECTION, only, 10)] == [point_id(other, 0)]
        none = msgspec.structs.replace(query, documents=())
        assert await index.search(COLLECTION, none, 10) == []
        fused = Query(vector=unit(1), keywords=words("decoding"), documents=(str(doc),))
        assert {h.payload[DOCUMENT_FIELD] for h in await index.search(COLLECTION, fused, 10)} == {
            str(doc)
        }
        assert await index.search(COLLECTION, only, 10, tenant="nobody") == []


async def test_a_collection_made_before_keyword_search_says_how_to_rebuild(
    index: VectorIndex, tmp_path: Path
) -> None:
    """A vector collection without the keyword side still answers dense queries; a query
    with keywords gets one line naming the rebuild."""
    legacy = vector_collection_name("legacy-model", DIM)
    await make_legacy_collection(index, legacy)
    doc = uuid.uuid4()
    await index.replace_document(legacy, doc, 1, [chunk(doc, 0, TEXTS[1], unit(0))])
    assert (await index.search(legacy, Query(vector=unit(0)), 1))[0].id == point_id(doc, 0)
    with pytest.raises(MissingInput, match=r"before keyword search.*migrate-model --rebuild"):
        await index.search(legacy, Query(keywords=words("asn1_der_decoding")), 1)


async def make_legacy_collection(index: VectorIndex, name: str) -> None:
    """A collection as ragline made them before keyword search: dense vectors only."""
    if isinstance(index, EdgeIndex):
        import qdrant_edge as qe

        vectors = qe.EdgeVectorParams(size=DIM, distance=qe.Distance.Cosine)
        qe.EdgeShard.create(str(index.config.root / name), qe.EdgeConfig(vectors=vectors)).close()
    else:
        from qdrant_client import models as qm

        assert isinstance(index, QdrantIndex)
        params = qm.VectorParams(size=DIM, distance=qm.Distance.COSINE)
        await index._client.create_collection(name, vectors_config=params)
    await index.ensure_vector_collection(name, DIM)
