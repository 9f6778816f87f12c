"""``/healthz``, ``/readyz`` and ``/metrics``."""

from __future__ import annotations

from typing import Any, cast

import asyncpg
import msgspec
from litestar import Response, get
from litestar.datastructures import State
from prometheus_client import CONTENT_TYPE_LATEST, Gauge, generate_latest

from runtime.api import CONNECTION_ERRORS, StageStatus, metrics, pending, stage_table
from stages.serve.context import ServeContext
from stages.serve.problems import problem

SSE_CLIENTS = Gauge("ragline_serve_sse_clients", "Open /v1/events streams")


class Health(msgspec.Struct, kw_only=True):
    status: str
    events: bool = False


@get("/healthz", tags=["ops"])
async def healthz() -> Health:
    """The process is up."""
    return Health(status="ok")


@get("/readyz", tags=["ops"])
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


@get("/metrics", tags=["ops"])
async def metrics_endpoint(state: State) -> Response[Any]:
    """Prometheus text format: queue depth per stage and the server's own counters."""
    ctx: ServeContext = state.ctx
    export_stages(await stage_table(ctx.pool, ctx.stage_names))
    SSE_CLIENTS.set(ctx.hub.subscribers)
    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)
