"""The composition root: the services the stages share in one process, and the factories
that pick each port's adapter.

Each service is built on first use, so a worker that runs only ``--stages parse`` never
loads the embedding model or opens the vector index, and each adapter module is imported
only by its factory here: a parse worker never loads minio, qdrant-client or cohere (an
import-linter contract and ``tests/unit/test_ports.py`` keep it so). The server uses the
same :class:`Services`. :meth:`Services.aclose` closes what was opened.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import anyio.to_thread
from aiolimiter import AsyncLimiter

from runtime.api import ConfigurationError, ProviderSpec
from stages.settings import PipelineSettings

if TYPE_CHECKING:
    from stages.assets import AssetStore
    from stages.embedder_protocol import Embedder
    from stages.parser_process import ParserProcess
    from stages.tokens import TokenCounter
    from stages.vector_index import VectorIndex
    from stages.vision_protocol import VisionModel


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
        from stages.minio_store import MinioStore

        return MinioStore(settings.minio)
    from stages.dir_store import DirStore

    return DirStore(Path(data_dir) / "assets")


def vector_index(settings: PipelineSettings, data_dir: Path) -> VectorIndex:
    """Qdrant server when ``QDRANT_URL`` is set, else an embedded index under the data dir."""
    if settings.qdrant is not None:
        from stages.qdrant_index import QdrantConfig, QdrantIndex

        return QdrantIndex(QdrantConfig(url=settings.qdrant.url, api_key=settings.qdrant.api_key))
    from stages.edge_index import EdgeIndex, EdgeIndexConfig

    return EdgeIndex(EdgeIndexConfig(root=Path(data_dir) / "qdrant"))


class Services:
    def __init__(self, env: Mapping[str, str], data_dir: Path) -> None:
        self.env = dict(env)
        self.data_dir = data_dir
        self.settings = PipelineSettings.from_env(env)

    @functools.cached_property
    def assets(self) -> AssetStore:
        return asset_store(self.settings, self.data_dir)

    @functools.cached_property
    def embedder(self) -> Embedder:
        from stages.embedder import embedder_for

        return embedder_for(self.settings.embed)

    def embedder_for(self, model: str) -> Embedder:
        """The embedder of model key ``model`` (the configured one, or another one that a
        model switch named; see :mod:`stages.model_switch`), built once."""
        from stages.model_switch import embedder_for

        return embedder_for(self, model)

    @functools.cached_property
    def token_counter(self) -> TokenCounter:
        """The configured embedder's token counter, without loading the model."""
        from stages.tokens import token_counter_for

        return token_counter_for(self.settings.embed.kind, self.settings.embed.model)

    @functools.cached_property
    def vision(self) -> VisionModel:
        from stages.vision_model import vision_for

        return vision_for(self.settings.vision)

    @functools.cached_property
    def index(self) -> VectorIndex:
        return vector_index(self.settings, self.data_dir)

    @functools.cached_property
    def parser(self) -> ParserProcess:
        """This process's parser process (:mod:`stages.parser_process`)."""
        from stages.parser_process import ParserProcess

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
        from stages.model_switch import close_embedders

        await close_embedders(self)
        for name in ("embedder", "vision", "index", "assets", "parser"):
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
        from stages.parser_process import ParserDied

        try:
            await anyio.to_thread.run_sync(parser.wait_ready)
        except ParserDied as exc:
            raise ConfigurationError(f"cannot parse documents: {exc}") from exc
