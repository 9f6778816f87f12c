"""What stages and actions need of a process's services: the Protocol they type against.

:class:`stages.services.Services` (the composition root) is the implementation; tests and
benchmarks give stand-ins. Nothing below the composition root imports it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from aiolimiter import AsyncLimiter

from runtime.api import ProviderSpec
from stages.settings import PipelineSettings

if TYPE_CHECKING:
    from stages.parsing.process import ParserProcess
    from stages.ports.assets import AssetStore
    from stages.ports.embedder import Embedder
    from stages.ports.reranker import Reranker
    from stages.ports.vector_index import VectorIndex
    from stages.ports.vision import VisionModel
    from stages.text.tokens import TokenCounter

__all__ = ["Services"]


class Services(Protocol):
    """The services of one process (a worker, the server, a command), each built on first
    use."""

    @property
    def env(self) -> dict[str, str]: ...

    @property
    def data_dir(self) -> Path: ...

    @property
    def settings(self) -> PipelineSettings: ...

    @property
    def assets(self) -> AssetStore: ...

    @property
    def embedder(self) -> Embedder:
        """The configured embedder (the live model may be another: see ``embedder_for``)."""
        ...

    def embedder_for(self, model: str) -> Embedder:
        """The embedder of model key ``model``, built once."""
        ...

    @property
    def token_counter(self) -> TokenCounter: ...

    @property
    def vision(self) -> VisionModel: ...

    @property
    def index(self) -> VectorIndex: ...

    @property
    def reranker(self) -> Reranker | None:
        """Search's reranker (``RAGLINE_RERANK``); None: the fused order stands."""
        ...

    @property
    def rerank_provider(self) -> ProviderSpec | None:
        """The reranker and its fleet-wide budget; None without one."""
        ...

    @property
    def parser(self) -> ParserProcess: ...

    @property
    def limiter(self) -> AsyncLimiter | None:
        """An in-process smoother at the embed rate (metered embedders only)."""
        ...

    @property
    def embed_provider(self) -> ProviderSpec | None:
        """The embedding provider and its fleet-wide budget; None for a local model."""
        ...

    @property
    def vision_provider(self) -> ProviderSpec | None:
        """The hosted vision model and its budget; None for local OCR or none."""
        ...

    @property
    def vector_collection(self) -> str:
        """The configured embedder's vector collection (a physical one, not a tenant)."""
        ...

    def prepare(self, stages: Sequence[str]) -> None: ...

    def lifespan(self) -> contextlib.AbstractAsyncContextManager[None]: ...

    async def aclose(self) -> None: ...
