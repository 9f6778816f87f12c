"""The embedded index's packed payloads: three fields in the shard, the whole payload back."""

from __future__ import annotations

import uuid
from pathlib import Path

import numpy as np
import qdrant_edge as qe

from stages.adapters.vector_index.edge.points import BODY_FIELD, edge_points, payload_of
from stages.db import checkpoints
from stages.ports.vector_index import Point


def _shard(path: Path, distance: qe.Distance = qe.Distance.Cosine) -> qe.EdgeShard:
    vectors = qe.EdgeVectorParams(size=2, distance=distance, memory=qe.Memory.Cold)
    return qe.EdgeShard.create(str(path), qe.EdgeConfig(vectors=vectors))


def test_payload_is_stored_in_three_fields_and_read_back_whole(tmp_path: Path) -> None:
    doc = uuid.uuid4()
    payload = {
        "document_id": str(doc),
        "generation": 7,
        "ordinal": 3,
        "text": 'Ünïcode — 漢字 "quoted"\n',
        "page_start": 2,
        "page_end": 3,
        "filename": "a b.pdf",
    }
    point = Point(id=uuid.uuid4(), vector=[1.0, 0.0], payload=payload)
    shard = _shard(tmp_path / "s")
    try:
        shard.update(qe.UpdateOperation.upsert_points(edge_points([point])))
        [stored] = shard.retrieve([point.id], with_payload=True, with_vector=False)
    finally:
        shard.close()
    assert set(stored.payload or {}) == {"document_id", "generation", BODY_FIELD}
    assert (stored.payload or {})["generation"] == 7  # filters still see plain fields
    assert payload_of(stored.payload) == payload


def test_a_payload_written_before_packing_is_returned_as_it_is() -> None:
    old = {"document_id": "d", "generation": 1, "text": "t"}
    assert payload_of(old) == old
    assert payload_of(None) == {}


def test_only_a_tenant_other_than_default_is_stored_as_a_field() -> None:
    def stored(tenant: str) -> set[str]:
        payload = {"document_id": "d", "generation": 1, "collection": tenant, "text": "t"}
        [point] = edge_points([Point(id=uuid.uuid4(), vector=[1.0, 0.0], payload=payload)])
        assert payload_of(point.payload) == payload  # search still shows the collection
        return set(point.payload or {})

    assert stored("default") == {"document_id", "generation", BODY_FIELD}
    assert stored("alpha") == {"document_id", "generation", "collection", BODY_FIELD}


def test_a_cached_vector_array_is_stored_as_its_floats(tmp_path: Path) -> None:
    """The cache's ``array('f')`` vectors (no list of floats) reach the shard unchanged."""
    data = np.array([[0.6, 0.8], [-0.25, 1.5e-7]], dtype=checkpoints.VECTOR_DTYPE)
    vectors = checkpoints.vectors_of([row.tobytes() for row in data])
    payload = {"document_id": "d", "generation": 1}
    points = [Point(id=uuid.uuid4(), vector=v or [], payload=payload) for v in vectors]
    shard = _shard(tmp_path / "s", distance=qe.Distance.Dot)
    try:
        shard.update(qe.UpdateOperation.upsert_points(edge_points(points)))
        stored = shard.retrieve([p.id for p in points], with_payload=False, with_vector=True)
    finally:
        shard.close()
    by_id = {uuid.UUID(str(r.id)): r.vector for r in stored}
    assert [by_id[p.id] for p in points] == data.astype(np.float32).tolist()
