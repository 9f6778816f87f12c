"""The index stage's fast path builds exactly the points the simple one does, with the
keyword side of each chunk's text."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import msgspec
import numpy as np

from runtime.models import Job
from stages.db import checkpoints
from stages.pipeline.index import document_points, payload
from stages.ports.vector_index import Keywords, new_point
from stages.text.keywords import text_vector


def rows(count: int) -> list[checkpoints.ChunkVector]:
    rng = np.random.default_rng(3)
    return [
        checkpoints.ChunkVector(
            ordinal=n, kind="text" if n % 3 else "image", text=f"chunk {n}", page_start=n,
            page_end=n + 1, generation=2, vector=rng.random(8).tolist(),
            section=f"{n // 5} Part › {n} Rip currents" if n % 2 else None,
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
        msgspec.structs.replace(
            new_point(job.document_id, r.ordinal, job.generation, r.vector or [], payload(r, job)),
            keywords=Keywords(*text_vector(r.text, r.section)),
        )
        for r in chunks
    ]
    built = document_points(chunks, job.document_id, job.generation, job.filename)
    assert built == expected
