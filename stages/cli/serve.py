"""``ragline serve``: run the HTTP API and the web view on uvicorn."""

from __future__ import annotations

import contextlib
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import click

from runtime.api import App, env_option, guarded
from stages.serve.config import (
    DEFAULT_HOST,
    DEFAULT_MAX_UPLOAD_MB,
    DEFAULT_PORT,
    DEFAULT_SSE_HEARTBEAT_S,
    ServeConfig,
    parse_tokens,
)


@click.command()
@env_option("--host", envvar="RAGLINE_HOST", default=DEFAULT_HOST, help="Address to bind.")
@env_option("--port", envvar="RAGLINE_PORT", default=DEFAULT_PORT, type=int, help="Port to bind.")
@env_option(
    "--max-upload-mb",
    envvar="RAGLINE_MAX_UPLOAD_MB",
    default=DEFAULT_MAX_UPLOAD_MB,
    type=int,
    help="Larger uploads get 413.",
)
@env_option(
    "--cors-origins",
    envvar="RAGLINE_CORS_ORIGINS",
    default="",
    help="Comma-separated origins allowed by CORS (empty: CORS off).",
)
@env_option(
    "--allowed-hosts",
    envvar="RAGLINE_ALLOWED_HOSTS",
    default="",
    help="Comma-separated host names the server answers (Host header; * for any). "
    "Default: the bound address, and localhost names on a loopback address.",
)
@env_option(
    "--sse-heartbeat",
    "sse_heartbeat_s",
    envvar="RAGLINE_SSE_HEARTBEAT_S",
    default=DEFAULT_SSE_HEARTBEAT_S,
    type=float,
    help="Seconds between heartbeat comments on /v1/events.",
)
@click.pass_obj
def serve(
    app: App,
    host: str,
    port: int,
    max_upload_mb: int,
    cors_origins: str,
    allowed_hosts: str,
    sse_heartbeat_s: float,
) -> None:
    """Serve the HTTP API (/v1), live events and the web view (/).

    Uploads are stored and queued; workers (`ragline` with no command) process them in
    their own processes. Tokens come from RAGLINE_API_TOKENS (comma-separated; never a
    flag, so they stay out of `ps`), each TOKEN (reads everything) or TOKEN:alice+team
    (reads documents without readers or with one of those principals). Without tokens
    it binds only to a loopback address.
    It answers only the hosts it serves, and a browser may write only from its own pages
    (Origin checked, CSRF token): see docs/serve.md, "Security".
    """
    import os

    def body() -> None:
        config = ServeConfig(
            host=host,
            port=port,
            tokens=parse_tokens(os.environ.get("RAGLINE_API_TOKENS")),
            max_upload_mb=max_upload_mb,
            cors_origins=parse_tokens(cors_origins),
            allowed_hosts=parse_tokens(allowed_hosts),
            sse_heartbeat_s=sse_heartbeat_s,
            upload_dir=Path(app.data_dir) / "uploads",
        )
        # Supervised: a server outlives many a crash of the embedded PostgreSQL, which is
        # started again under it (requests meanwhile are answered 503 with Retry-After).
        app.with_database(lambda dsn: run_server(app, config, dsn), supervise=True)

    with sigterm_unwinds():
        guarded(body)


class Terminated(BaseException):
    """SIGTERM, raised where the main thread is, as Ctrl-C raises KeyboardInterrupt."""


@contextlib.contextmanager
def sigterm_unwinds() -> Iterator[None]:
    """SIGTERM unwinds the command as SIGINT does, so what it set up is undone (its
    registration as a user of the embedded PostgreSQL, the cluster itself when it was the
    last user); then the process dies by the signal, as service managers expect.

    uvicorn catches SIGTERM while it serves, shuts down gracefully, puts this handler back
    and raises the signal again: it lands here. Without this handler Python's default
    would end the process at once, skipping every ``finally``.
    """

    def raise_terminated(_signum: int, _frame: FrameType | None) -> None:
        raise Terminated

    previous = signal.signal(signal.SIGTERM, raise_terminated)
    try:
        yield
    except Terminated:
        sys.stdout.flush()
        sys.stderr.flush()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.raise_signal(signal.SIGTERM)
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_server(app: App, config: ServeConfig, dsn: str) -> None:
    # Imported here: uvicorn, Litestar and the services are not needed for `--help`.
    from stages.serve.context import ServeContext
    from stages.serve.server import run
    from stages.services import Services

    build = app.build_context()
    services = Services(build.env, build.data_dir)
    ctx = ServeContext(config, dsn, services, app.plugin.stage_names)
    run(ctx)
