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
from stages.text.keywords import STORED_FORMAT, from_stored, stored_vector, text_vector


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


def test_a_stored_keyword_vector_is_indexed_as_stored() -> None:
    """The chunk stage's stored vector is what the point carries (not computed again:
    here it is another text's, so the difference shows); a row whose stored vector is
    of another format, or has none, gets the vector of its own text and heading."""
    document = uuid.uuid4()
    elsewhere = stored_vector("quagga zebra")
    old = bytes((STORED_FORMAT + 1,)) + elsewhere[1:]
    chunks = [
        msgspec.structs.replace(r, keywords=k)
        for r, k in zip(rows(3), (elsewhere, old, None), strict=True)
    ]
    built = document_points(chunks, document, 2, "a.pdf")
    keywords = [p.keywords for p in built]
    assert all(k is not None for k in keywords)
    assert (keywords[0].indices, keywords[0].values) == from_stored(elsewhere)  # type: ignore[union-attr]
    for r, k in zip(chunks[1:], keywords[1:], strict=True):
        assert k == Keywords(*text_vector(r.text, r.section))
    assert all(
        p.keywords is None for p in document_points(chunks, document, 2, "a.pdf", keywords=False)
    )
