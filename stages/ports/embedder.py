"""The embedder's port: text in, L2-normalised float vectors out.

The adapters live in :mod:`stages.adapters.embedder` (Cohere, local), which only the
composition root (:mod:`stages.services`) imports; this module imports no adapter and no
client library (an import-linter contract).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol

import numpy as np
import numpy.typing as npt

__all__ = ["Embedder", "FloatArray", "InputType", "l2_normalize"]

FloatArray = npt.NDArray[np.float32]

InputType = Literal["search_document", "search_query"]


class Embedder(Protocol):
    """Turns texts into vectors of a fixed size."""

    @property
    def model(self) -> str:
        """Id of the vector space, the embedding cache key: ``cohere/embed-v4.0@1024``."""
        ...

    @property
    def dimensions(self) -> int: ...

    @property
    def max_batch(self) -> int:
        """The most texts one provider call takes; callers batch at this size."""
        ...

    @property
    def metered(self) -> bool:
        """Whether calls count against a provider's quota, so ``RAGLINE_EMBED_RPM``
        applies; a model running in this process is not metered."""
        ...

    async def embed(self, texts: Sequence[str], input_type: InputType) -> list[list[float]]:
        """One L2-normalised vector per text, in the order given."""
        ...

    async def aclose(self) -> None: ...


def l2_normalize(vectors: FloatArray) -> FloatArray:
    """Rows scaled to unit length (all-zero rows stay zero)."""
    norms: FloatArray = np.linalg.norm(vectors, axis=1, keepdims=True)
    scaled: FloatArray = (vectors / np.maximum(norms, 1e-12)).astype(np.float32)
    return scaled
