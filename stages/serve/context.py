"""What every request handler reaches through ``app.state``: pool, services, events."""

from __future__ import annotations

import contextlib
import functools
import uuid
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import asyncpg
import msgspec

from runtime.events import EventHub
from stages.serve.config import ServeConfig
from stages.serve.problems import problem

if TYPE_CHECKING:
    from stages.assets import AssetStore
    from stages.embedder import Embedder
    from stages.vector_index import VectorIndex


class ServeServices:
    """The services the server uses (asset store, vector index, embedder), each built on
    first use. Not :class:`stages.services.Services`: importing that loads PyMuPDF (and
    with it numpy and onnxruntime) for the parse settings, ~70 MB a server never needs."""

    def __init__(self, env: Mapping[str, str], data_dir: Path) -> None:
        self.env = dict(env)
        self.data_dir = data_dir

    @functools.cached_property
    def assets(self) -> AssetStore:
        from stages.assets import asset_store_from_env

        return asset_store_from_env(self.env, self.data_dir)

    @functools.cached_property
    def embedder(self) -> Embedder:
        from stages.embedder import embedder_from_env

        return embedder_from_env(self.env)

    @functools.cached_property
    def index(self) -> VectorIndex:
        from stages.vector_index import vector_index_from_env

        return vector_index_from_env(self.env, self.data_dir)

    @property
    def collection(self) -> str:
        from stages.vector_index import collection_name

        return collection_name(self.embedder.model, self.embedder.dimensions)

    def embedder_for(self, model: str) -> Embedder:
        """The embedder of model key ``model`` (see :mod:`stages.model_switch`)."""
        from stages.model_switch import embedder_for

        return embedder_for(self, model)

    @contextlib.asynccontextmanager
    async def lifespan(self) -> AsyncIterator[None]:
        try:
            yield
        finally:
            from stages.model_switch import close_embedders

            await close_embedders(self)
            for name in ("embedder", "index", "assets"):
                service = self.__dict__.pop(name, None)
                if service is not None:
                    await service.aclose()


class ServeContext:
    def __init__(
        self,
        config: ServeConfig,
        dsn: str,
        services: ServeServices,
        stage_names: tuple[str, ...],
    ) -> None:
        self.config = config
        self.dsn = dsn
        self.services = services
        self.stage_names = stage_names
        self._pool: asyncpg.Pool[Any] | None = None
        self._hub: EventHub | None = None

    @property
    def pool(self) -> asyncpg.Pool[Any]:
        if self._pool is None:
            raise RuntimeError("the server is not started")
        return self._pool

    @property
    def hub(self) -> EventHub:
        if self._hub is None:
            raise RuntimeError("the server is not started")
        return self._hub

    def attach(self, pool: asyncpg.Pool[Any], hub: EventHub) -> None:
        self._pool, self._hub = pool, hub


def document_id(raw: str) -> uuid.UUID:
    """Validate an id from a path before it reaches SQL (404: it names no document)."""
    try:
        return uuid.UUID(raw)
    except ValueError:
        raise problem(404, f"no document {raw[:80]!r}: ids are UUIDs") from None


def to_json(value: Any) -> Any:
    return msgspec.to_builtins(value)
