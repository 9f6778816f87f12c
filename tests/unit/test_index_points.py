"""The index stage's fast paths build exactly what the simple ones do."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import numpy as np

from runtime.models import Job
from stages.db import checkpoints
from stages.pipeline.index import document_points, payload
from stages.ports.vector_index import new_point, point_id, point_ids


def test_point_ids_are_uuid5_ids() -> None:
    for doc in (uuid.UUID(int=0), uuid.uuid4(), uuid.uuid4()):
        ordinals = [0, 1, 9, 10, 255, 256, 12345, 10**9]
        assert point_ids(doc, ordinals) == [point_id(doc, n) for n in ordinals]
        assert all(i.version == 5 for i in point_ids(doc, ordinals))


def rows(count: int) -> list[checkpoints.ChunkVector]:
    rng = np.random.default_rng(3)
    return [
        checkpoints.ChunkVector(
            ordinal=n, kind="text" if n % 3 else "image", text=f"chunk {n}", page_start=n,
            page_end=n + 1, generation=2, vector=rng.random(8).tolist(),
        )
        for n in range(count)
    ]  # fmt: skip


def test_document_points_equal_new_point() -> None:
    job = Job(
        id=1, document_id=uuid.uuid4(), stage="index", generation=2, attempts=1,
        max_attempts=3, lease_token=uuid.uuid4(), lease_expires_at=datetime.now(UTC),
        created_at=datetime.now(UTC), filename="a.pdf",
    )  # fmt: skip
    chunks = rows(40)
    expected = [
        new_point(job.document_id, r.ordinal, job.generation, r.vector or [], payload(r, job))
        for r in chunks
    ]
    built = document_points(chunks, job.document_id, job.generation, job.filename)
    assert built == expected


def test_vectors_decode_together_or_one_by_one() -> None:
    vectors = np.random.default_rng(1).random((5, 6)).astype(checkpoints.VECTOR_DTYPE)
    data: list[bytes | None] = [v.tobytes() for v in vectors]
    decoded = checkpoints.vectors_of(data)
    # The stored big-endian floats, as this machine's float32 (exactly: no rounding).
    assert [list(v or []) for v in decoded] == vectors.astype(np.float32).tolist()
    assert decoded == [checkpoints.vector_of(d) for d in data]
    data[2] = None
    assert checkpoints.vectors_of(data) == [checkpoints.vector_of(d) for d in data]
    assert checkpoints.vectors_of([]) == []
