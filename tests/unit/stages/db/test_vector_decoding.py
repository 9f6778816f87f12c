"""stages.db.checkpoints: cached vectors decode the same together as one by one."""

from __future__ import annotations

import numpy as np

from stages.db import checkpoints


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
