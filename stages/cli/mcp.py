"""``ragline mcp``: the MCP server over stdio, for an agent that starts it as a subprocess."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType

import anyio
import click

from runtime.api import App, env_option, guarded, open_pool, run_async
from stages.actions.metadata import check_principals
from stages.cli.serve import Terminated
from stages.serve.config import DEFAULT_MAX_UPLOAD_MB


@click.command("mcp")
@click.option(
    "--as",
    "principals",
    multiple=True,
    metavar="PRINCIPAL",
    help="Answer as a caller with this principal (repeat): only documents it may read, and "
    "what it submits is readable by it. Without it, every document (the operator's view).",
)
@click.option(
    "--no-paths",
    is_flag=True,
    help="Refuse submit by a path on this machine's disk (uploads of content only).",
)
@env_option(
    "--max-upload-mb",
    envvar="RAGLINE_MAX_UPLOAD_MB",
    default=DEFAULT_MAX_UPLOAD_MB,
    type=int,
    help="Larger submitted content is refused.",
)
@click.pass_obj
def mcp(app: App, principals: tuple[str, ...], no_paths: bool, max_upload_mb: int) -> None:
    """Serve the MCP server on stdin/stdout: tools to search, read and list documents,
    submit files and see the pipeline's state (docs/mcp.md). An MCP client (Claude
    Desktop, an agent framework) starts it as a subprocess; `serve` has the same tools
    over HTTP at /mcp. Logs go to stderr; stdout is the protocol's."""
    caller = guarded(lambda: check_principals(principals)) if principals else None
    term = Termination()

    async def go(dsn: str) -> None:
        # Imported here: the SDK, the services and their models are not needed for --help.
        from stages.serve.auth import Caller
        from stages.serve.mcp import Door, run_stdio
        from stages.services import services_for

        with term.cancels(anyio.CancelScope()) as scope:
            if scope.cancel_called:
                return
            services = services_for(app.build_context())
            async with open_pool(dsn) as pool:
                door = Door(
                    lambda: pool,
                    services,
                    app.plugin.stage_names,
                    upload_dir=Path(app.data_dir) / "uploads",
                    max_upload_bytes=max_upload_mb << 20,
                    caller=Caller(caller),
                    paths=not no_paths,
                )
                await run_stdio(door)

    with term.installed():
        guarded(lambda: app.with_database(lambda dsn: run_async(go, dsn), supervise=True))


class Termination:
    """SIGTERM for ``ragline mcp`` (a client stops its server so, with or without closing
    stdin first): in the stdio loop it cancels the server, outside any event loop it
    raises :class:`Terminated`; either way what was set up is undone (the pool, the
    registration as a user of the embedded PostgreSQL, the cluster if this was its last
    user), then the process dies by the signal. In another event loop (the migrations at
    start) it waits: the server then stops before it starts."""

    def __init__(self) -> None:
        self.requested = False
        self._cancel: Callable[[], None] | None = None

    def handle(self, _signum: int, _frame: FrameType | None) -> None:
        self.requested = True
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            raise Terminated from None
        if self._cancel is not None:
            loop.call_soon_threadsafe(self._cancel)

    @contextlib.contextmanager
    def cancels(self, scope: anyio.CancelScope) -> Iterator[anyio.CancelScope]:
        """Within the block, SIGTERM cancels ``scope`` (already cancelled if it came)."""
        self._cancel = scope.cancel
        if self.requested:
            scope.cancel()
        try:
            with scope:
                yield scope
        finally:
            self._cancel = None

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        previous = signal.signal(signal.SIGTERM, self.handle)
        try:
            yield
        except Terminated:
            self.requested = True
        finally:
            signal.signal(signal.SIGTERM, previous)
        if self.requested:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.raise_signal(signal.SIGTERM)
