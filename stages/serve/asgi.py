"""The ASGI app: Litestar with the API, the events stream, the probes, the web view and
the MCP server (streamable HTTP at ``/mcp``)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
from litestar import Litestar, asgi
from litestar.config.cors import CORSConfig
from litestar.exceptions import HTTPException
from litestar.handlers import ASGIRouteHandler
from litestar.middleware import DefineMiddleware
from litestar.openapi import OpenAPIConfig
from litestar.openapi.plugins import SwaggerRenderPlugin
from litestar.openapi.spec import Components, SecurityScheme
from litestar.static_files import create_static_files_router
from litestar.types import Receive, Scope, Send
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

from runtime.api import EventHub, open_pool
from stages.serve import http_api as api
from stages.serve import mcp, ops, web
from stages.serve import sse as events
from stages.serve.auth import MCP_PATH, TokenAuth
from stages.serve.config import api_tokens
from stages.serve.context import ServeContext
from stages.serve.guard import RequestGuard, allowed_hosts
from stages.serve.problems import on_http_error, on_unexpected

STATIC = Path(__file__).parent / "static"


@contextlib.asynccontextmanager
async def lifespan(app: Litestar) -> AsyncIterator[None]:
    ctx: ServeContext = app.state.ctx
    mcp_sessions: StreamableHTTPSessionManager = app.state.mcp_sessions
    async with open_pool(ctx.dsn) as pool, ctx.services.lifespan(), mcp_sessions.run():
        hub = EventHub(ctx.dsn, pool)
        async with anyio.create_task_group() as tg:
            await tg.start(hub.run)
            ctx.attach(pool, hub)
            try:
                yield
            finally:
                tg.cancel_scope.cancel()


def openapi_config(tokens: bool) -> OpenAPIConfig:
    """The schema at ``/v1/schema``; with tokens, every operation but the probes (which
    say ``security: []``) needs the bearer token."""
    bearer = {
        "security": [{"bearer": []}],
        "components": Components(
            security_schemes={"bearer": SecurityScheme(type="http", scheme="bearer")}
        ),
    }
    return OpenAPIConfig(
        title="ragline",
        version="1",
        path="/v1/schema",
        render_plugins=[SwaggerRenderPlugin()],
        **(bearer if tokens else {}),  # type: ignore[arg-type]
    )


def mcp_door(ctx: ServeContext) -> mcp.Door:
    """The MCP tools' view of the server: its pool and services, each request's caller
    (its token's principals), uploads as the API takes them, no paths on this disk."""
    return mcp.Door(
        lambda: ctx.pool,
        ctx.services,
        ctx.stage_names,
        upload_dir=ctx.config.upload_dir,
        max_upload_bytes=ctx.config.max_upload_bytes,
    )


def mcp_route(sessions: StreamableHTTPSessionManager) -> ASGIRouteHandler:
    """``/mcp``: the SDK's streamable HTTP transport, behind this app's middleware."""

    forward: Any = sessions.handle_request  # Starlette's ASGI types: Litestar's, spelled apart

    async def handle(scope: Scope, receive: Receive, send: Send) -> None:
        await forward(scope, receive, send)

    return asgi(MCP_PATH, copy_scope=True)(handle)


def build_app(ctx: ServeContext) -> Litestar:
    cors = (
        CORSConfig(allow_origins=list(ctx.config.cors_origins)) if ctx.config.cors_origins else None
    )
    # A base64 upload is 4/3 of its bytes, in a JSON-RPC envelope.
    sessions = mcp.http_app(mcp_door(ctx), ctx.config.max_upload_bytes * 4 // 3 + (1 << 20))
    app = Litestar(
        route_handlers=[
            api.DocumentsApi,
            mcp_route(sessions),
            events.events,
            ops.healthz,
            ops.readyz,
            ops.metrics_endpoint,
            *web.HANDLERS,
            create_static_files_router(
                path="/static", directories=[STATIC], include_in_schema=False
            ),
        ],
        lifespan=[lifespan],
        state=None,
        middleware=[
            DefineMiddleware(
                RequestGuard,
                hosts=allowed_hosts(ctx.config.host, ctx.config.allowed_hosts),
                trusted_origins=ctx.config.cors_origins,
                secret=ctx.csrf,
            ),
            DefineMiddleware(TokenAuth, tokens=api_tokens(ctx.config.tokens)),
        ],
        exception_handlers={HTTPException: on_http_error, Exception: on_unexpected},
        openapi_config=openapi_config(bool(ctx.config.tokens)),
        cors_config=cors,
        request_max_body_size=1 << 20,
        debug=False,
        logging_config=None,  # ragline configures logging (the CLI), not the framework
    )
    app.state.mcp_sessions = sessions
    return app
