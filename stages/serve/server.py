"""uvicorn, set up for ragline: its logging, no access log, a short graceful shutdown."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import uvicorn

from stages.serve.asgi import build_app
from stages.serve.context import ServeContext

#: Seconds uvicorn waits for responses in flight when asked to stop.
GRACEFUL_S = 3


class Server(uvicorn.Server):
    """uvicorn's server that, on SIGTERM/SIGINT, also ends the open event streams: they
    never finish by themselves, and uvicorn waits for every response before it stops."""

    def __init__(self, config: uvicorn.Config, ctx: ServeContext) -> None:
        super().__init__(config)
        self.ctx = ctx
        self.loop: asyncio.AbstractEventLoop | None = None

    async def serve(self, sockets: Any = None) -> None:
        self.loop = asyncio.get_running_loop()
        await super().serve(sockets)

    def handle_exit(self, sig: int, frame: Any) -> None:
        if self.loop is not None:
            self.loop.call_soon_threadsafe(self._end_streams)
        super().handle_exit(sig, frame)

    def _end_streams(self) -> None:
        with contextlib.suppress(RuntimeError):  # not started yet: no streams
            self.ctx.hub.end_streams()


def run(ctx: ServeContext) -> None:
    asgi = build_app(ctx)
    asgi.state.ctx = ctx
    config = uvicorn.Config(
        asgi,
        host=ctx.config.host,
        port=ctx.config.port,
        log_config=None,  # ragline's logging, set up by the CLI
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=GRACEFUL_S,
        loop="uvloop",
        http="httptools",  # the C parser (h11, the pure-Python one, costs more CPU)
    )
    Server(config, ctx).run()
