"""What every request handler reaches through ``app.state``: pool, services, events."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

import asyncpg
import msgspec

from runtime.api import EventHub
from stages.serve.config import ServeConfig
from stages.serve.guard import CsrfSecret
from stages.serve.problems import problem

if TYPE_CHECKING:
    from stages.ports.services import Services


class ServeContext:
    def __init__(
        self,
        config: ServeConfig,
        dsn: str,
        services: Services,
        stage_names: tuple[str, ...],
    ) -> None:
        self.config = config
        self.dsn = dsn
        self.services = services
        self.stage_names = stage_names
        #: What this process's CSRF tokens are made with (:mod:`stages.serve.guard`).
        self.csrf = CsrfSecret()
        #: Set by :meth:`attach` when the server starts.
        self._attached: tuple[asyncpg.Pool[Any], EventHub] | None = None

    @property
    def pool(self) -> asyncpg.Pool[Any]:
        return self._started()[0]

    @property
    def hub(self) -> EventHub:
        return self._started()[1]

    def attach(self, pool: asyncpg.Pool[Any], hub: EventHub) -> None:
        self._attached = (pool, hub)

    def _started(self) -> tuple[asyncpg.Pool[Any], EventHub]:
        if self._attached is None:
            raise RuntimeError("the server is not started")
        return self._attached


def document_id(raw: str) -> uuid.UUID:
    """Validate an id from a path before it reaches SQL (404: it names no document)."""
    try:
        return uuid.UUID(raw)
    except ValueError:
        raise problem(404, f"no document {raw[:80]!r}: ids are UUIDs") from None


def to_json(value: Any) -> Any:
    return msgspec.to_builtins(value)
