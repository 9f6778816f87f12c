"""``python -m runtime``: the composition root.

Flags take their defaults from environment variables (shown in ``--help``), are parsed
once here and passed down as config structs. The pipeline is loaded by name
(``--pipeline``), which keeps the engine free of pipeline imports.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import anyio
import asyncpg
import click
import msgspec

from runtime import logs
from runtime.database import check_schema, database, ensure_schema
from runtime.errors import ConfigurationError, RaglineError, one_line
from runtime.plugin import DEFAULT_PIPELINE, BuildContext, Plugin, load_plugin
from runtime.private import make_private
from runtime.providers import (
    DEFAULT_CIRCUIT_FAILURES,
    DEFAULT_PROBE_MAX_S,
    DEFAULT_PROBE_S,
    CircuitConfig,
)
from runtime.settings import (
    ENGINE_SETTINGS,
    MAX_CONCURRENCY,
    duration_s,
    validate_env,
    validate_options,
)
from runtime.worker import Worker
from runtime.worker_config import DEFAULT_GRACE_S, DEFAULT_LEASE_S, DEFAULT_POLL_S, WorkerConfig

T = TypeVar("T")

#: Exit codes (documented in the README).
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_UNAVAILABLE, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


class App(msgspec.Struct, kw_only=True):
    """What every command gets: parsed global options and the loaded pipeline."""

    database_url: str | None
    data_dir: Path
    pipeline_spec: str
    auto_migrate: bool
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
    try:
        import uvloop

        return anyio.run(fn, *args, backend_options={"loop_factory": uvloop.new_event_loop})
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux/macOS
        return anyio.run(fn, *args)


def fail(message: str, code: int = EXIT_FAILED) -> NoReturn:
    click.echo(f"ragline: {message}", err=True)
    sys.exit(code)


def parse_stages(value: str | None, known: tuple[str, ...]) -> tuple[str, ...]:
    if not value:
        return known
    stages = tuple(s.strip() for s in value.split(",") if s.strip())
    unknown = [s for s in stages if s not in known]
    if unknown:
        raise ConfigurationError(
            f"RAGLINE_STAGES / --stages: unknown stage(s) {', '.join(unknown)}; "
            f"expected some of {', '.join(known)}"
        )
    return stages


def parse_concurrency(
    value: str | None, stages: tuple[str, ...], defaults: Mapping[str, int]
) -> dict[str, int]:
    """``N`` for every stage, or ``stage=N,...`` on top of the pipeline's defaults."""
    result = {s: defaults.get(s, 1) for s in stages}
    if not value:
        return result
    try:
        if "=" not in value:
            return dict.fromkeys(stages, int(value))
        for part in value.split(","):
            name, _, n = part.partition("=")
            if name.strip() not in stages:
                raise ConfigurationError(
                    f"RAGLINE_CONCURRENCY / --concurrency: stage {name.strip()!r} is not "
                    f"among the stages served ({', '.join(stages)})"
                )
            result[name.strip()] = int(n)
    except ValueError as exc:
        raise ConfigurationError(
            f"RAGLINE_CONCURRENCY / --concurrency: expected N or stage=N,... got {value!r}"
        ) from exc
    if any(not 1 <= n <= MAX_CONCURRENCY for n in result.values()):
        raise ConfigurationError(
            f"RAGLINE_CONCURRENCY / --concurrency: each N must be from 1 to {MAX_CONCURRENCY}"
        )
    return result


class PipelineGroup(click.Group):
    """Adds the pipeline's own commands (submit, ingest, ...) lazily, by name.

    The environment is checked against :data:`ENGINE_SETTINGS` before click parses it, so
    a bad variable is one line naming it (exit 2), not click's usage text.
    """

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        try:
            validate_env(os.environ, ENGINE_SETTINGS)
        except ConfigurationError as exc:
            fail(str(exc), EXIT_USAGE)
        return super().make_context(info_name, args, parent, **extra)

    def _plugin(self, ctx: click.Context) -> Plugin:
        spec = ctx.params.get("pipeline") or os.environ.get("RAGLINE_PIPELINE", DEFAULT_PIPELINE)
        return load_plugin(spec)

    def _plugin_commands(self, ctx: click.Context) -> dict[str, click.Command]:
        try:
            return {c.name: c for c in self._plugin(ctx).commands if c.name}
        except ConfigurationError:
            return {}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self._plugin_commands(ctx)})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        own = super().get_command(ctx, cmd_name)
        if own is not None:
            return own
        try:
            plugin = self._plugin(ctx)
        except ConfigurationError as exc:
            # Not "No such command": the pipeline that would provide it did not load.
            fail(f"{exc} (RAGLINE_PIPELINE / --pipeline)", EXIT_USAGE)
        return {c.name: c for c in plugin.commands if c.name}.get(cmd_name)


def env_option(*decls: str, envvar: str, **kwargs: Any) -> Callable[[Any], Any]:
    return click.option(*decls, envvar=envvar, show_envvar=True, show_default=True, **kwargs)


@click.group(
    cls=PipelineGroup,
    invoke_without_command=True,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@env_option(
    "--database-url",
    envvar="DATABASE_URL",
    default=None,
    help="PostgreSQL URL. Unset: an embedded PostgreSQL under --data-dir.",
)
@env_option(
    "--data-dir",
    envvar="RAGLINE_DATA_DIR",
    default=".ragline",
    type=click.Path(file_okay=False, path_type=Path),
    help="Local state: embedded PostgreSQL, assets, vector index.",
)
@env_option(
    "--pipeline",
    envvar="RAGLINE_PIPELINE",
    default=DEFAULT_PIPELINE,
    help="The pipeline to run, as module:attribute.",
)
@env_option(
    "--auto-migrate/--no-auto-migrate",
    envvar="RAGLINE_AUTO_MIGRATE",
    default=True,
    help="Apply pending schema migrations on start.",
)
@env_option(
    "--log-level",
    envvar="RAGLINE_LOG_LEVEL",
    default="info",
    type=click.Choice(["debug", "info", "warning", "error"]),
)
@env_option(
    "--log-format",
    envvar="RAGLINE_LOG_FORMAT",
    default="text",
    type=click.Choice(["text", "json"]),
    help="One line per event; json for machines.",
)
@env_option(
    "--stages",
    envvar="RAGLINE_STAGES",
    default=None,
    help="Worker mode: comma-separated stages this process serves [default: all].",
)
@env_option(
    "--concurrency",
    envvar="RAGLINE_CONCURRENCY",
    default=None,
    help="Worker mode: jobs in flight per stage: N, or stage=N,... "
    "[default: the pipeline's per-stage defaults].",
)
@env_option(
    "--lease",
    "lease_s",
    envvar="RAGLINE_LEASE_S",
    default=DEFAULT_LEASE_S,
    type=float,
    help="Seconds a claimed job stays leased without a heartbeat.",
)
@env_option(
    "--heartbeat",
    "heartbeat_s",
    envvar="RAGLINE_HEARTBEAT_S",
    default=0.0,
    type=float,
    help="Seconds between lease renewals (0: a third of the lease).",
)
@env_option(
    "--poll",
    "poll_s",
    envvar="RAGLINE_POLL_S",
    default=DEFAULT_POLL_S,
    type=float,
    help="Seconds between queue polls when no NOTIFY arrives.",
)
@env_option(
    "--grace",
    "grace_s",
    envvar="RAGLINE_GRACE_S",
    default=DEFAULT_GRACE_S,
    type=float,
    help="On SIGTERM/SIGINT, seconds in-flight jobs get before they are released.",
)
@env_option(
    "--retry-base",
    "retry_base_s",
    envvar="RAGLINE_RETRY_BASE_S",
    default=2.0,
    type=float,
    help="First retry delay in seconds; doubles per attempt, capped at 300.",
)
@env_option(
    "--rescue-every",
    "rescue_every_s",
    envvar="RAGLINE_RESCUE_S",
    default=5.0,
    type=float,
    help="Seconds between sweeps for expired leases (every worker sweeps).",
)
@env_option(
    "--retry-for",
    "retry_for_s",
    envvar="RAGLINE_RETRY_FOR",
    default="24h",
    callback=lambda _ctx, _param, value: parse_duration_s(value, "RAGLINE_RETRY_FOR"),
    help="How long transient failures (provider 5xx, 408, 429, timeouts, connection errors) "
    "are retried, from the first of a run, before the job fails: 90s, 30m, 24h or seconds.",
)
@env_option(
    "--circuit-failures",
    envvar="RAGLINE_CIRCUIT_FAILURES",
    default=DEFAULT_CIRCUIT_FAILURES,
    type=click.IntRange(min=1),
    help="Consecutive transient failures of a provider, across all processes, that open its "
    "circuit (its stages' jobs then wait queued).",
)
@env_option(
    "--probe",
    "probe_s",
    envvar="RAGLINE_PROBE_S",
    default=DEFAULT_PROBE_S,
    type=click.FloatRange(min=0, min_open=True),
    help="Seconds from a circuit opening to its first probe; doubles per failed probe.",
)
@env_option(
    "--probe-max",
    "probe_max_s",
    envvar="RAGLINE_PROBE_MAX_S",
    default=DEFAULT_PROBE_MAX_S,
    type=click.FloatRange(min=0, min_open=True),
    help="Longest interval between probes of an open circuit.",
)
@env_option(
    "--exit-when-idle",
    envvar="RAGLINE_EXIT_WHEN_IDLE",
    is_flag=True,
    default=False,
    help="Worker mode: exit once no job of these stages is queued or running.",
)
@env_option(
    "--metrics-port",
    envvar="RAGLINE_METRICS_PORT",
    default=0,
    type=int,
    help="Serve Prometheus metrics on this port (0: off).",
)
@env_option(
    "--metrics-host",
    envvar="RAGLINE_METRICS_HOST",
    default="127.0.0.1",
    help="Address the metrics server binds (0.0.0.0: every interface).",
)
@click.pass_context
def main(ctx: click.Context, /, **opts: Any) -> None:
    """ragline: PDFs to a vector index through leased, checkpointed stages on PostgreSQL.

    Without a command, runs stage workers (all stages, or --stages) until SIGTERM/SIGINT.
    """
    guarded(lambda: check_settings(opts))
    guarded(lambda: make_private(opts["data_dir"]))  # and the umask: 0600 / 0700
    logs.configure(opts["log_level"], opts["log_format"])
    ctx.obj = App(
        database_url=opts["database_url"],
        data_dir=opts["data_dir"],
        pipeline_spec=opts["pipeline"],
        auto_migrate=opts["auto_migrate"],
    )
    ctx.meta["worker_opts"] = opts
    if ctx.invoked_subcommand is None:
        guarded(lambda: run_workers(ctx.obj, opts))


def check_settings(opts: Mapping[str, Any]) -> None:
    """Every setting, before anything starts: the flags, then the pipeline's variables."""
    validate_options(opts, ENGINE_SETTINGS)
    plugin = load_plugin(opts["pipeline"])
    validate_env(os.environ, plugin.settings)
    stages = parse_stages(opts["stages"], plugin.stage_names)
    worker_config_fields(opts, stages, plugin)


def worker_config(app: App, opts: Mapping[str, Any], **overrides: Any) -> WorkerConfig:
    plugin = app.plugin
    stages = parse_stages(opts["stages"], plugin.stage_names)
    fields = worker_config_fields(opts, stages, plugin)
    fields.update(overrides)
    return WorkerConfig(**fields)


def worker_config_fields(
    opts: Mapping[str, Any], stages: tuple[str, ...], plugin: Plugin
) -> dict[str, Any]:
    """The worker's settings; builds a :class:`WorkerConfig` once to check them together."""
    fields: dict[str, Any] = {
        "stages": stages,
        "concurrency": parse_concurrency(opts["concurrency"], stages, plugin.default_concurrency),
        "lease_s": opts["lease_s"],
        "heartbeat_s": opts["heartbeat_s"],
        "poll_s": opts["poll_s"],
        "grace_s": opts["grace_s"],
        "retry_base_s": opts["retry_base_s"],
        "retry_for_s": opts["retry_for_s"],
        "circuit": circuit_config(opts),
        "rescue_every_s": opts["rescue_every_s"],
        "exit_when_idle": opts["exit_when_idle"],
        "handle_signals": True,
        "gauges_every_s": 5.0 if opts["metrics_port"] else 0.0,
    }
    WorkerConfig(**fields)  # raises ConfigurationError on a bad combination
    return fields


def serve_metrics(opts: Mapping[str, Any]) -> None:
    """Start the Prometheus endpoint when asked; a port in use is a configuration error."""
    if not opts["metrics_port"]:
        return
    from prometheus_client import start_http_server

    host, port = opts["metrics_host"], opts["metrics_port"]
    try:
        start_http_server(port, addr=host)
    except OSError as exc:
        raise ConfigurationError(
            one_line(f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}")
        ) from exc


def parse_duration_s(value: str | float, name: str) -> float:
    """``90s``, ``30m``, ``24h``, ``2d`` or plain seconds (:func:`runtime.settings.duration_s`)."""
    try:
        return duration_s(str(value))
    except ValueError:
        raise click.BadParameter(
            f"{name} must be a duration like 90s, 30m or 24h, got {value!r}"
        ) from None


def circuit_config(opts: Mapping[str, Any]) -> CircuitConfig:
    try:
        return CircuitConfig(
            failures=opts["circuit_failures"],
            probe_s=opts["probe_s"],
            probe_max_s=opts["probe_max_s"],
        )
    except ConfigurationError as exc:
        raise click.BadParameter(f"RAGLINE_PROBE_MAX_S must be >= RAGLINE_PROBE_S ({exc})") from exc


def run_workers(app: App, opts: Mapping[str, Any]) -> None:
    config = worker_config(app, opts)
    # Built before the database starts and before any claim: services that cannot be
    # built (a missing key, a missing model file) stop the worker here, not in a job.
    pipeline = app.plugin.build(app.build_context())
    pipeline.prepare(config.stages)
    serve_metrics(opts)

    def body(dsn: str) -> None:
        run_async(Worker(pipeline, dsn, config).run)

    app.with_database(body, supervise=True)


def guarded(body: Callable[[], T]) -> T:
    """Turn ragline's errors into one line on stderr and an exit code."""
    try:
        try:
            return body()
        except BaseExceptionGroup as group:
            # A task group's failure: report the first real cause, not the group.
            raise _first_leaf(group) from group
    except click.ClickException:
        raise
    except KeyboardInterrupt:
        fail("interrupted", EXIT_INTERRUPTED)
    except ConfigurationError as exc:
        fail(str(exc), EXIT_USAGE)
    except (RaglineError, OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
        fail(*_database_line(exc))


def _first_leaf(group: BaseExceptionGroup[BaseException]) -> BaseException:
    leaf: BaseException = group
    while isinstance(leaf, BaseExceptionGroup):
        leaf = (
            next((e for e in leaf.exceptions if isinstance(e, KeyboardInterrupt)), None)
            or (leaf.exceptions[0])
        )
    return leaf


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


@main.command()
@click.pass_obj
def migrate(app: App) -> None:
    """Apply pending schema migrations (safe to run from many processes at once)."""

    def body(dsn: str) -> None:
        applied = run_async(ensure_schema, dsn)
        click.echo(f"applied {len(applied)} migration(s)" if applied else "schema up to date")

    no_auto = msgspec.structs.replace(app, auto_migrate=False)
    guarded(lambda: no_auto.with_database(body, schema_check=False))


@main.group()
def db() -> None:
    """The embedded PostgreSQL (used when DATABASE_URL is unset)."""


@db.command("stop")
@click.option(
    "--force",
    is_flag=True,
    help="Ask the processes using it to stop (SIGTERM), wait for them, then stop it.",
)
@click.option(
    "--wait",
    "wait_s",
    type=click.FloatRange(min=0),
    default=60.0,
    show_default=True,
    help="With --force: seconds to wait for those processes.",
)
@click.pass_obj
def db_stop(app: App, force: bool, wait_s: float) -> None:
    """Stop the embedded PostgreSQL under --data-dir; refused while ragline processes use
    it, unless --force."""
    from runtime.embedded import EmbeddedPostgres
    from runtime.supervisor import stop_embedded

    cluster = EmbeddedPostgres(app.data_dir)
    stopped = guarded(lambda: stop_embedded(cluster, force=force, wait_s=wait_s))
    click.echo("stopped" if stopped else "not running")
