"""``/healthz``, ``/readyz`` and ``/metrics``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import asyncpg
import msgspec
from litestar import Response, get
from litestar.datastructures import State
from litestar.openapi.spec import Operation
from prometheus_client import CONTENT_TYPE_LATEST, Gauge, generate_latest

from runtime.api import CONNECTION_ERRORS, StageStatus, metrics, pending, stage_table
from stages.serve.context import ServeContext
from stages.serve.problems import problem, problems

SSE_CLIENTS = Gauge("ragline_serve_sse_clients", "Open /v1/events streams")
#: Prometheus's text format without its charset: Litestar appends one to text types (it
#: appended a second one to ``CONTENT_TYPE_LATEST``).
METRICS_TYPE = CONTENT_TYPE_LATEST.partition("; charset")[0]


class Health(msgspec.Struct, kw_only=True):
    status: str
    #: The server's event listener is on (LISTEN, registered): ``/v1/events`` is live.
    events: bool


@dataclass
class OpenOperation(Operation):
    """A probe's operation: open even when tokens guard the rest (no security)."""

    def __post_init__(self) -> None:
        self.security = []


@get(
    "/healthz",
    tags=["ops"],
    operation_class=OpenOperation,
    responses=problems(400, database=False),
)
async def healthz(state: State) -> Health:
    """The process is up; ``events``: whether its event listener is on."""
    ctx: ServeContext = state.ctx
    return Health(status="ok", events=ctx.hub.listening)


@get(
    "/readyz",
    tags=["ops"],
    operation_class=OpenOperation,
    responses=problems(400, 503, said={503: "database, migrations or event listener not ready"}),
)
async def readyz(state: State) -> Health:
    """The database answers, its migrations are current and the event listener is on."""
    ctx: ServeContext = state.ctx
    try:
        async with ctx.pool.acquire() as conn:
            waiting = await pending(cast("asyncpg.Connection[Any]", conn))
    except CONNECTION_ERRORS:
        raise problem(503, "database unreachable") from None
    except OSError:
        raise problem(503, "database unreachable") from None
    if waiting:
        raise problem(503, f"migrations pending: {waiting}; run `ragline migrate`")
    if not ctx.hub.listening:
        raise problem(503, "not listening for document events yet")
    return Health(status="ready", events=True)


def export_stages(rows: list[StageStatus]) -> None:
    for r in rows:
        metrics.QUEUED.labels(r.stage).set(r.queued)
        metrics.RUNNING.labels(r.stage).set(r.running)
        metrics.OLDEST_QUEUED.labels(r.stage).set(r.oldest_queued_s)


@get("/metrics", tags=["ops"], media_type=METRICS_TYPE, responses=problems(400, 401))
async def metrics_endpoint(state: State) -> Response[str]:
    """Prometheus text format: queue depth per stage and the server's own counters."""
    ctx: ServeContext = state.ctx
    export_stages(await stage_table(ctx.pool, ctx.stage_names))
    SSE_CLIENTS.set(ctx.hub.subscribers)
    return Response(generate_latest().decode(), media_type=METRICS_TYPE)
