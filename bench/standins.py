"""Zero-cost stand-ins for the paid services, for benchmarks only.

``python -m runtime --pipeline bench.standins:plugin`` runs the real pipeline (parse,
chunk, vision, embed, index over the real asset store and vector index) with the embedder
replaced by :class:`ZeroEmbedder` (a hash, no model, no network) and vision by
:class:`~stages.adapters.vision.cohere.NoVision`, so a benchmark measures ragline and not a model.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from runtime.plugin import BuildContext, Plugin
from runtime.stage import Pipeline
from stages.adapters.vision.none import NoVision
from stages.pipeline import DEFAULT_CONCURRENCY, STAGES, pipeline_for
from stages.ports.embedder import Embedder, InputType
from stages.ports.vision import VisionModel
from stages.services import Services

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


@dataclass(frozen=True)
class ZeroEmbedder:
    """:class:`stages.adapters.embedder.cohere.Embedder` that costs (almost) nothing."""

    dimensions: int = ZERO_DIMS
    max_batch: int = ZERO_MAX_BATCH
    #: No provider, no quota: RAGLINE_EMBED_RPM does not apply.
    metered: bool = False

    @property
    def model(self) -> str:
        return f"bench/zero@{self.dimensions}"

    async def embed(self, texts: Sequence[str], input_type: InputType) -> list[list[float]]:
        return hash_vectors(texts, self.dimensions)

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
