"""Small vectors and points for the vector-index tests (conformance and adapter suites)."""

from __future__ import annotations

import uuid

from stages.ports.vector_index import Point, new_point

#: Dimensions of the test vectors.
DIM = 8


def unit(i: int, dim: int = DIM) -> list[float]:
    """A vector pointing mostly along axis ``i``, a little along the next one."""
    vec = [0.0] * dim
    vec[i % dim] = 1.0
    vec[(i + 1) % dim] = 0.1
    return vec


def points(doc: uuid.UUID, generation: int, count: int, start: int = 0) -> list[Point]:
    return [new_point(doc, n, generation, unit(n), {"ordinal": n}) for n in range(start, count)]


def vec(i: int) -> list[float]:
    v = [0.05] * DIM
    v[i % DIM] = 1.0
    return v
