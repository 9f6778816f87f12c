"""What every command gets: the parsed global options (:class:`App`), exit codes, and one
way to turn an error into one line on stderr (:func:`guarded`)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import anyio
import asyncpg
import click
import msgspec

from runtime.cli.options import WorkerOptions
from runtime.db.connect import check_schema, database, ensure_schema
from runtime.db.errors import CONNECTION_ERRORS
from runtime.errors import ConfigurationError, RaglineError, first_leaf, one_line
from runtime.plugin import BuildContext, Plugin, load_plugin

T = TypeVar("T")

log = logging.getLogger(__name__)

#: Exit codes (documented in the README).
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_UNAVAILABLE, EXIT_INTERRUPTED = 0, 1, 2, 3, 130

json_option = click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")


class App(msgspec.Struct, kw_only=True):
    """What every command gets: parsed global options and the loaded pipeline."""

    database_url: str | None
    data_dir: Path
    pipeline_spec: str
    auto_migrate: bool
    #: The worker flags (``--stages``, ``--lease``, ...), for commands that run workers.
    worker: WorkerOptions = msgspec.field(default_factory=WorkerOptions)
    json: bool = False
    _plugin: Plugin | None = None

    @property
    def plugin(self) -> Plugin:
        if self._plugin is None:
            self._plugin = load_plugin(self.pipeline_spec)
        return self._plugin

    def build_context(self) -> BuildContext:
        return BuildContext(data_dir=self.data_dir, env=dict(os.environ))

    def with_database(
        self, body: Callable[[str], T], *, schema_check: bool = True, supervise: bool = False
    ) -> T:
        """Run ``body(dsn)`` with the database up (embedded if needed) and migrated.

        With ``--no-auto-migrate``, a database with pending migrations is refused (exit 2)
        before anything touches it, instead of failing query by query.
        """
        with database(self.database_url, self.data_dir, supervise=supervise) as dsn:
            if self.auto_migrate:
                run_async(ensure_schema, dsn)
            elif schema_check:
                run_async(check_schema, dsn)
            return body(dsn)


def run_async(fn: Callable[..., Any], *args: Any) -> Any:
    async def main() -> Any:
        asyncio.get_running_loop().set_exception_handler(quiet_connection_errors)
        return await fn(*args)

    try:
        import uvloop

        return anyio.run(main, backend_options={"loop_factory": uvloop.new_event_loop})
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux/macOS
        return anyio.run(main)


def quiet_connection_errors(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """The event loop's handler of errors nobody awaited: a database connection's error
    there is one line at DEBUG, anything else goes to asyncio's own handler (a traceback).

    asyncpg closes the connections the worker expired after a database error
    (``WorkerState.db_error``) in tasks of its own; when the server died meanwhile, that
    close fails with a broken pipe that nothing awaits, and asyncio printed its traceback
    into a run that recovered (seen once in ``test_embedded_outage``)."""
    exc = context.get("exception")
    if isinstance(exc, CONNECTION_ERRORS):
        log.debug("%s: %s", context.get("message", "background task"), one_line(repr(exc)))
        return
    loop.default_exception_handler(context)


def fail(message: str, code: int = EXIT_FAILED) -> NoReturn:
    click.echo(f"ragline: {message}", err=True)
    sys.exit(code)


def emit(data: Any) -> None:
    click.echo(json.dumps(msgspec.to_builtins(data), default=str))


def guarded(body: Callable[[], T]) -> T:
    """Turn ragline's errors into one line on stderr and an exit code."""
    try:
        try:
            return body()
        except BaseExceptionGroup as group:
            # A task group's failure: report the first real cause, not the group.
            raise first_leaf(group) from group
    except click.ClickException:
        raise
    except KeyboardInterrupt:
        fail("interrupted", EXIT_INTERRUPTED)
    except ConfigurationError as exc:
        fail(str(exc), EXIT_USAGE)
    except (RaglineError, OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
        fail(*_database_line(exc))


_UNAVAILABLE = (
    ConnectionError,
    asyncpg.PostgresConnectionError,
    asyncpg.InterfaceError,
    asyncpg.exceptions.OperatorInterventionError,
)


def _database_line(exc: BaseException) -> tuple[str, int]:
    """The line and exit code for an error that reached the top of a command."""
    code = EXIT_UNAVAILABLE if isinstance(exc, _UNAVAILABLE) else EXIT_FAILED
    if isinstance(exc, RaglineError | OSError) and not isinstance(exc, _UNAVAILABLE[1:]):
        text = str(exc)
    else:
        text = (
            f"database unavailable: {type(exc).__name__}: {exc}"
            if code == 3
            else (f"{type(exc).__name__}: {exc}")
        )
    return one_line(text), code
