"""The services the stages share in one process, built from the environment on first use.

Lazy, so a worker that runs only ``--stages parse`` never loads the embedding model or
opens the vector index. :meth:`Services.aclose` closes what was opened.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec
from aiolimiter import AsyncLimiter

from runtime.errors import ConfigurationError
from runtime.providers import ProviderSpec
from stages.chunking import ChunkConfig
from stages.pdf import DEFAULT_MAX_IMAGE_PIXELS, DEFAULT_MIN_IMAGE_BYTES, DEFAULT_MIN_IMAGE_PX

# Each service module is imported when the service is first used, so a parse-only worker
# never loads onnxruntime, cohere or qdrant-client (memory and start-up time).
if TYPE_CHECKING:
    from stages.assets import AssetStore
    from stages.embedder import Embedder
    from stages.tokens import TokenCounter
    from stages.vector_index import VectorIndex
    from stages.vision_model import VisionModel

DEFAULT_EMBED_RPM = 1000
#: Tokens per minute to the embedding provider, fleet-wide (0: unlimited).
DEFAULT_EMBED_TPM = 0
#: Vision requests per minute, fleet-wide (0: unlimited).
DEFAULT_VISION_RPM = 0


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name, "").strip()
    try:
        return int(raw) if raw else default
    except ValueError as exc:
        raise ConfigurationError(f"{name} must be a whole number, got {raw!r}") from exc


def _optional_int(env: Mapping[str, str], name: str) -> int | None:
    return _int(env, name, 0) if env.get(name, "").strip() else None


def limiter_for(rpm: int) -> AsyncLimiter | None:
    """A leaky bucket holding one second's worth of requests (at least one).

    ``AsyncLimiter(rpm, 60)`` would let a fresh process send a whole minute's budget at
    once (measured: 6x the limit over the first seconds), which a provider enforcing its
    per-minute cap answers with 429s.
    """
    if rpm <= 0:
        return None
    if rpm >= 60:
        return AsyncLimiter(rpm / 60, 1.0)
    return AsyncLimiter(1, 60 / rpm)


class PipelineSettings(msgspec.Struct, frozen=True, kw_only=True):
    chunk: ChunkConfig = msgspec.field(default_factory=ChunkConfig)
    min_image_px: int = DEFAULT_MIN_IMAGE_PX
    min_image_bytes: int = DEFAULT_MIN_IMAGE_BYTES
    max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS
    #: Embedding requests per minute to a metered provider, shared by every process on
    #: the database (0: unlimited).
    embed_rpm: int = DEFAULT_EMBED_RPM
    #: Embedding tokens per minute, fleet-wide (estimated before each call; 0: unlimited).
    embed_tpm: int = DEFAULT_EMBED_TPM
    #: Vision requests per minute to a hosted vision model, fleet-wide (0: unlimited).
    vision_rpm: int = DEFAULT_VISION_RPM

    def __post_init__(self) -> None:
        for name, value in (
            ("RAGLINE_EMBED_RPM", self.embed_rpm),
            ("RAGLINE_EMBED_TPM", self.embed_tpm),
            ("RAGLINE_VISION_RPM", self.vision_rpm),
        ):
            if value < 0:
                raise ConfigurationError(f"{name} must be >= 0 (0: unlimited), got {value}")

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> PipelineSettings:
        for gone in ("RAGLINE_CHUNK_CHARS", "RAGLINE_CHUNK_OVERLAP"):
            if env.get(gone, "").strip():
                raise ConfigurationError(
                    f"{gone} is no longer read: chunks are sized in the embedder's tokens; "
                    "set RAGLINE_CHUNK_TOKENS / RAGLINE_CHUNK_OVERLAP_TOKENS"
                )
        chunk = ChunkConfig(
            max_tokens=_optional_int(env, "RAGLINE_CHUNK_TOKENS"),
            overlap_tokens=_optional_int(env, "RAGLINE_CHUNK_OVERLAP_TOKENS"),
        )
        if chunk.max_tokens is not None:
            try:  # refuse a bad combination now, not per job
                chunk.sizes(chunk.max_tokens)
            except ConfigurationError as exc:
                raise ConfigurationError(
                    f"RAGLINE_CHUNK_TOKENS={chunk.max_tokens} / RAGLINE_CHUNK_OVERLAP_TOKENS="
                    f"{chunk.overlap_tokens}: {exc}"
                ) from exc
        return cls(
            chunk=chunk,
            min_image_px=_int(env, "RAGLINE_MIN_IMAGE_PX", DEFAULT_MIN_IMAGE_PX),
            max_image_pixels=_int(env, "RAGLINE_MAX_IMAGE_PIXELS", DEFAULT_MAX_IMAGE_PIXELS),
            embed_rpm=_int(env, "RAGLINE_EMBED_RPM", DEFAULT_EMBED_RPM),
            embed_tpm=_int(env, "RAGLINE_EMBED_TPM", DEFAULT_EMBED_TPM),
            vision_rpm=_int(env, "RAGLINE_VISION_RPM", DEFAULT_VISION_RPM),
        )


class Services:
    def __init__(self, env: Mapping[str, str], data_dir: Path) -> None:
        self.env = dict(env)
        self.data_dir = data_dir
        self.settings = PipelineSettings.from_env(env)

    @functools.cached_property
    def assets(self) -> AssetStore:
        from stages.assets import asset_store_from_env

        return asset_store_from_env(self.env, self.data_dir)

    @functools.cached_property
    def embedder(self) -> Embedder:
        from stages.embedder import embedder_from_env

        return embedder_from_env(self.env)

    def embedder_for(self, model: str) -> Embedder:
        """The embedder of model key ``model`` (the configured one, or another one that a
        model switch named; see :mod:`stages.model_switch`), built once."""
        from stages.model_switch import embedder_for

        return embedder_for(self, model)

    @functools.cached_property
    def token_counter(self) -> TokenCounter:
        """The configured embedder's token counter, without loading the model."""
        from stages.tokens import token_counter_from_env

        return token_counter_from_env(self.env)

    @functools.cached_property
    def vision(self) -> VisionModel:
        from stages.vision_model import vision_from_env

        return vision_from_env(self.env)

    @functools.cached_property
    def index(self) -> VectorIndex:
        from stages.vector_index import vector_index_from_env

        return vector_index_from_env(self.env, self.data_dir)

    @functools.cached_property
    def limiter(self) -> AsyncLimiter | None:
        """An in-process smoother at the embed rate (metered embedders only). The fleet's
        budget is the engine's provider gate (``ctx.calling``); this only keeps one
        process from bunching its own calls, and never lets it exceed the budget alone."""
        if not self.embedder.metered:
            return None
        return limiter_for(self.settings.embed_rpm)

    @property
    def embed_provider(self) -> ProviderSpec | None:
        """The embedding provider and its fleet-wide budget; None for a local model."""
        if not self.embedder.metered:
            return None
        return ProviderSpec(
            name=self.embedder.model.partition("@")[0],
            requests_per_min=self.settings.embed_rpm,
            tokens_per_min=self.settings.embed_tpm,
        )

    @property
    def vision_provider(self) -> ProviderSpec | None:
        """The hosted vision model and its budget; None for local OCR or none."""
        if not getattr(self.vision, "metered", False):
            return None
        return ProviderSpec(name=self.vision.name, requests_per_min=self.settings.vision_rpm)

    @property
    def collection(self) -> str:
        from stages.vector_index import collection_name

        return collection_name(self.embedder.model, self.embedder.dimensions)

    def prepare(self, stages: Sequence[str]) -> None:
        """Build the services ``stages`` use now, so what cannot be built (a missing key
        or model file, a bad choice) stops the process at start with one line."""
        self.assets  # noqa: B018 - cached_property: building it is the point
        if {"embed", "index"} & set(stages):
            self.embedder  # noqa: B018
            self.index  # noqa: B018
        if "vision" in stages:
            self.vision  # noqa: B018

    async def aclose(self) -> None:
        # Dropped from the cache as they close, so a later run builds fresh ones.
        from stages.model_switch import close_embedders

        await close_embedders(self)
        for name in ("embedder", "vision", "index", "assets"):
            service = self.__dict__.pop(name, None)
            if service is not None:
                await service.aclose()

    @contextlib.asynccontextmanager
    async def lifespan(self) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await self.aclose()
