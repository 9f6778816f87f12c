"""Zero-cost stand-ins for the paid services, for benchmarks only.

``python -m runtime --pipeline bench.standins:plugin`` runs the real pipeline (parse,
chunk, vision, embed, index over the real asset store and vector index) with the embedder
replaced by :class:`ZeroEmbedder` (a hash, no model, no network) and vision by
:class:`~stages.vision_model.NoVision`, so a benchmark measures ragline and not a model.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Sequence

import numpy as np

from runtime.plugin import BuildContext, Plugin
from runtime.stage import Pipeline
from stages.embedder_protocol import Embedder, InputType
from stages.pipeline import DEFAULT_CONCURRENCY, STAGES, pipeline_for
from stages.services import Services
from stages.vision_model import NoVision
from stages.vision_protocol import VisionModel

ZERO_DIMS = 64
#: The same batch size as Cohere's, so the embed stage batches as it does in production.
ZERO_MAX_BATCH = 96


def hash_vectors(texts: Sequence[str], dims: int = ZERO_DIMS) -> list[list[float]]:
    """Deterministic unit vectors from a hash of each text: microseconds, no model."""
    if not texts:
        return []
    digests = b"".join(hashlib.shake_128(t.encode()).digest(dims) for t in texts)
    raw = np.frombuffer(digests, dtype=np.uint8).astype(np.float32).reshape(len(texts), dims)
    raw -= 127.5
    unit = raw / np.maximum(np.linalg.norm(raw, axis=1, keepdims=True), 1e-12)
    return unit.tolist()  # type: ignore[no-any-return]


class ZeroEmbedder:
    """:class:`stages.embedder.Embedder` that costs (almost) nothing."""

    def __init__(self, dims: int = ZERO_DIMS, max_batch: int = ZERO_MAX_BATCH) -> None:
        self._dims = dims
        self._max_batch = max_batch

    @property
    def model(self) -> str:
        return f"bench/zero@{self._dims}"

    @property
    def dimensions(self) -> int:
        return self._dims

    @property
    def max_batch(self) -> int:
        return self._max_batch

    @property
    def metered(self) -> bool:
        return False  # no provider, no quota: RAGLINE_EMBED_RPM does not apply

    async def embed(self, texts: Sequence[str], input_type: InputType) -> list[list[float]]:
        return hash_vectors(texts, self._dims)

    async def aclose(self) -> None:
        return None


class StandinServices(Services):
    """The real services, except the embedder and the vision model."""

    @functools.cached_property
    def embedder(self) -> Embedder:
        return ZeroEmbedder()

    @functools.cached_property
    def vision(self) -> VisionModel:
        return NoVision()


def build(ctx: BuildContext) -> Pipeline:
    return pipeline_for(StandinServices(ctx.env, ctx.data_dir))


plugin = Plugin(stage_names=STAGES, build=build, default_concurrency=DEFAULT_CONCURRENCY)
