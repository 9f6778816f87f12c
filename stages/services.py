"""The composition root: the one place that builds adapters. The services the stages
share in one process, and the factories that pick each port's adapter.

Each service is built on first use, so a worker that runs only ``--stages parse`` never
loads the embedding model or opens the vector index, and each adapter module is imported
only by its factory here: a parse worker never loads minio, qdrant-client or cohere (an
import-linter contract and ``tests/unit/stages/test_lazy_imports.py`` keep it so). The
server uses the same :class:`Services`. :meth:`Services.aclose` closes what was opened.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import anyio.to_thread
import msgspec
from aiolimiter import AsyncLimiter

from runtime.api import BuildContext, ConfigurationError, ProviderSpec, escape_name
from stages.ports.vector_index import vector_collection_name
from stages.settings import (
    LOCAL_EMBEDDER_KEY,
    EmbedSettings,
    PipelineSettings,
    RerankSettings,
    VisionSettings,
)

if TYPE_CHECKING:
    from stages.parsing.process import ParserProcess
    from stages.ports.assets import AssetStore
    from stages.ports.embedder import Embedder
    from stages.ports.reranker import Reranker
    from stages.ports.sources import Scanner
    from stages.ports.vector_index import VectorIndex
    from stages.ports.vision import VisionModel
    from stages.text.tokens import TokenCounter


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


# -- factories: the only place an adapter module is imported -------------------------------


def asset_store(settings: PipelineSettings, data_dir: Path) -> AssetStore:
    """MinIO/S3 when ``MINIO_ENDPOINT`` is set, else a directory store under the data dir."""
    if settings.minio is not None:
        from stages.adapters.assets.minio import MinioStore

        return MinioStore(settings.minio)
    from stages.adapters.assets.directory import DirStore

    return DirStore(Path(data_dir) / "assets")


def vector_index(settings: PipelineSettings, data_dir: Path) -> VectorIndex:
    """Qdrant server when ``QDRANT_URL`` is set, else an embedded index under the data dir."""
    if settings.qdrant is not None:
        from stages.adapters.vector_index.qdrant import QdrantConfig, QdrantIndex

        return QdrantIndex(QdrantConfig(url=settings.qdrant.url, api_key=settings.qdrant.api_key))
    from stages.adapters.vector_index.edge.index import EdgeIndex, EdgeIndexConfig

    return EdgeIndex(EdgeIndexConfig(root=Path(data_dir) / "qdrant"))


def embedder_for(settings: EmbedSettings) -> Embedder:
    """The embedder ``settings`` select (read from the environment by
    :meth:`stages.settings.PipelineSettings.from_env`): Cohere when ``COHERE_API_KEY`` is
    set, else the local model; ``RAGLINE_EMBEDDER=local|cohere`` forces the choice. Cohere
    knobs: ``RAGLINE_EMBED_MODEL`` (default embed-v4.0), ``RAGLINE_EMBED_DIMENSIONS``
    (1024), ``RAGLINE_EMBED_TIMEOUT_S`` (60) and ``COHERE_BASE_URL``.
    """
    if settings.kind == "local":
        from stages.adapters.embedder.local import LocalEmbedder

        return LocalEmbedder()
    if settings.kind != "cohere":
        raise ConfigurationError(f"RAGLINE_EMBEDDER must be local or cohere, not {settings.kind!r}")
    if not settings.api_key:
        raise ConfigurationError("RAGLINE_EMBEDDER=cohere needs COHERE_API_KEY")
    from stages.adapters.cohere import cohere_knobs
    from stages.adapters.embedder.cohere import CohereEmbedder, CohereEmbedderConfig

    return CohereEmbedder(CohereEmbedderConfig(**cohere_knobs(settings)))


def embedder_for_key(env: Mapping[str, str], key: str) -> Embedder:
    """An embedder for a model key as :attr:`Embedder.model` spells it:
    ``local/all-MiniLM-L6-v2-int8`` (or ``local``) or ``cohere/<model>@<dimensions>``
    (Cohere's key and URL come from the environment)."""
    if key in ("local", LOCAL_EMBEDDER_KEY):
        return embedder_for(
            msgspec.structs.replace(PipelineSettings.from_env({}).embed, kind="local")
        )
    provider, _, rest = key.partition("/")
    model, _, dims = rest.rpartition("@")
    if provider != "cohere" or not model or not dims.isdigit():
        raise ConfigurationError(
            f"unknown embedding model {key!r}: use local or cohere/<model>@<dimensions>"
        )
    if not env.get("COHERE_API_KEY", "").strip():
        raise ConfigurationError(f"embedding model {key} needs COHERE_API_KEY")
    configured = PipelineSettings.from_env(env).embed
    return embedder_for(
        msgspec.structs.replace(configured, kind="cohere", model=model, dimensions=int(dims))
    )


def vision_for(settings: VisionSettings) -> VisionModel:
    """The vision model ``settings`` select (read from the environment by
    :meth:`stages.settings.PipelineSettings.from_env`).

    ``RAGLINE_VISION=none|ocr|cohere`` decides when set. Unset, it is ``cohere`` only if
    both ``RAGLINE_VISION_MODEL`` and ``COHERE_API_KEY`` are set, else ``ocr``. Cohere
    knobs: ``RAGLINE_VISION_MODEL`` (command-a-vision-07-2025), ``RAGLINE_VISION_TIMEOUT_S``
    (120), ``COHERE_BASE_URL``.
    """
    if settings.kind == "none":
        from stages.adapters.vision.none import NoVision

        return NoVision()
    if settings.kind == "ocr":
        from stages.adapters.vision.ocr import LocalOCR

        return LocalOCR()
    if settings.kind != "cohere":
        raise ConfigurationError(
            f"RAGLINE_VISION must be none, ocr or cohere, not {settings.kind!r}"
        )
    if not settings.api_key:
        raise ConfigurationError("RAGLINE_VISION=cohere needs COHERE_API_KEY")
    from stages.adapters.cohere import cohere_knobs
    from stages.adapters.vision.cohere import CohereVision, CohereVisionConfig

    return CohereVision(CohereVisionConfig(**cohere_knobs(settings)))


def reranker_for(settings: RerankSettings) -> Reranker | None:
    """The reranker ``settings`` select: None for ``RAGLINE_RERANK=none`` (the default),
    Cohere's rerank for ``cohere`` (``RAGLINE_RERANK_MODEL``, rerank-v3.5;
    ``RAGLINE_RERANK_TIMEOUT_S``, 10; ``COHERE_BASE_URL``)."""
    if settings.kind == "none":
        return None
    if settings.kind != "cohere":
        raise ConfigurationError(f"RAGLINE_RERANK must be none or cohere, not {settings.kind!r}")
    if not settings.api_key:
        raise ConfigurationError("RAGLINE_RERANK=cohere needs COHERE_API_KEY")
    from stages.adapters.cohere import cohere_knobs
    from stages.adapters.reranker.cohere import CohereReranker, CohereRerankerConfig

    return CohereReranker(CohereRerankerConfig(**cohere_knobs(settings)))


def scanner_for(source: str, env: Mapping[str, str]) -> Scanner:
    """A folder path, or ``s3://bucket/prefix`` (read with the ``MINIO_*`` settings)."""
    if source.startswith("s3://"):
        from stages.adapters.sources.bucket import BucketScanner

        return BucketScanner.from_uri(source, env)
    path = Path(source)
    if not path.is_dir():
        raise ConfigurationError(
            f"sync: {escape_name(source)} is not a folder nor s3://bucket/prefix"
        )
    from stages.adapters.sources.folder import FolderScanner

    return FolderScanner(path)


class Services:
    """Every service of one process, each built on first use (a
    :class:`stages.ports.services.Services`)."""

    def __init__(self, env: Mapping[str, str], data_dir: Path) -> None:
        self.env = dict(env)
        self.data_dir = data_dir
        self.settings = PipelineSettings.from_env(env)
        #: Embedders of other models than the configured one (a model switch), by key.
        self._other_embedders: dict[str, Embedder] = {}

    @functools.cached_property
    def assets(self) -> AssetStore:
        return asset_store(self.settings, self.data_dir)

    @functools.cached_property
    def embedder(self) -> Embedder:
        return embedder_for(self.settings.embed)

    def embedder_for(self, model: str) -> Embedder:
        """The embedder of model key ``model``: the configured one, or another one that a
        model switch named (:mod:`stages.db.model_switch`), built once."""
        if self.embedder.model == model:
            return self.embedder
        if model not in self._other_embedders:
            self._other_embedders[model] = embedder_for_key(self.env, model)
        return self._other_embedders[model]

    @functools.cached_property
    def token_counter(self) -> TokenCounter:
        """The configured embedder's token counter, without loading the model."""
        from stages.text.tokens import token_counter_for

        return token_counter_for(self.settings.embed.kind, self.settings.embed.model)

    @functools.cached_property
    def vision(self) -> VisionModel:
        return vision_for(self.settings.vision)

    @functools.cached_property
    def reranker(self) -> Reranker | None:
        return reranker_for(self.settings.rerank)

    @property
    def rerank_provider(self) -> ProviderSpec | None:
        """The reranker and its fleet-wide budget; None without one."""
        if self.reranker is None:
            return None
        return ProviderSpec(name=self.reranker.model, requests_per_min=self.settings.rerank_rpm)

    @functools.cached_property
    def index(self) -> VectorIndex:
        return vector_index(self.settings, self.data_dir)

    @functools.cached_property
    def parser(self) -> ParserProcess:
        """This process's parser process (:mod:`stages.parsing.process`)."""
        from stages.parsing.process import ParserProcess

        return ParserProcess()

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
        if not self.vision.metered:
            return None
        return ProviderSpec(name=self.vision.name, requests_per_min=self.settings.vision_rpm)

    @property
    def vector_collection(self) -> str:
        """The configured embedder's vector collection (a physical one, not a tenant)."""
        return vector_collection_name(self.embedder.model, self.embedder.dimensions)

    def prepare(self, stages: Sequence[str]) -> None:
        """Build the services ``stages`` use now, so what cannot be built (a missing key
        or model file, a bad choice) stops the process at start with one line."""
        self.assets  # noqa: B018 - cached_property: building it is the point
        if "chunk" in stages:
            # The tokenizer loads here, not in the first chunk job's lease.
            self.token_counter  # noqa: B018
        if {"embed", "index"} & set(stages):
            self.embedder  # noqa: B018
            self.index  # noqa: B018
        if "vision" in stages:
            self.vision  # noqa: B018
        if "parse" in stages:
            # Last, once nothing else can fail: it imports PyMuPDF while the worker starts.
            self.parser.start()

    async def aclose(self) -> None:
        # Dropped from the cache as they close, so a later run builds fresh ones.
        others, self._other_embedders = self._other_embedders, {}
        for embedder in others.values():
            await embedder.aclose()
        for name in ("embedder", "vision", "reranker", "index", "assets", "parser"):
            service = self.__dict__.pop(name, None)
            if service is not None:
                await service.aclose()

    @contextlib.asynccontextmanager
    async def lifespan(self) -> AsyncIterator[None]:
        try:
            await self._parser_ready()
            yield
        finally:
            await self.aclose()

    async def _parser_ready(self) -> None:
        """A worker whose parse stage started a parser (:meth:`prepare`) claims nothing
        until it is ready: no document waits on it, and one that cannot start stops the
        worker with one line."""
        parser = self.__dict__.get("parser")
        if parser is None:
            return
        from stages.parsing.process import ParserDied

        try:
            await anyio.to_thread.run_sync(parser.wait_ready)
        except ParserDied as exc:
            raise ConfigurationError(f"cannot parse documents: {exc}") from exc


def services_for(ctx: BuildContext) -> Services:
    """The services of a process the CLI (or a test) builds a pipeline for."""
    return Services(ctx.env, ctx.data_dir)
