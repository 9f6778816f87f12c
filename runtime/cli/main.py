"""``python -m runtime``: the composition root.

Flags take their defaults from environment variables (shown in ``--help``), are parsed
once here and passed down as config structs (:class:`runtime.cli.options.WorkerOptions`
for the worker's). The pipeline is loaded by name (``--pipeline``), which keeps the engine
free of pipeline imports. Commands are registered explicitly: the engine's own
(:data:`runtime.cli.commands.ENGINE_COMMANDS`) when ``main`` is declared, the pipeline's
(``Plugin.commands``) by :class:`PipelineGroup` when the pipeline loads.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click

from runtime.cli.commands import ENGINE_COMMANDS
from runtime.cli.common import EXIT_USAGE, App, fail, guarded, run_async
from runtime.cli.options import WorkerOptions, env_option, worker_config, worker_flags
from runtime.errors import ConfigurationError, one_line
from runtime.plugin import DEFAULT_PIPELINE, Plugin, load_plugin
from runtime.process import logs, tracing
from runtime.process.interpreter import tune_worker_interpreter
from runtime.process.private import make_private
from runtime.settings import ENGINE_SETTINGS, validate_env, validate_options
from runtime.worker.worker import Worker


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


@click.group(
    cls=PipelineGroup,
    commands=ENGINE_COMMANDS,
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
    type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False),
)
@env_option(
    "--log-format",
    envvar="RAGLINE_LOG_FORMAT",
    default="text",
    type=click.Choice(["text", "json"], case_sensitive=False),
    help="One line per event; json for machines.",
)
@worker_flags
@click.pass_context
def main(ctx: click.Context, /, **opts: Any) -> None:
    """ragline: documents (PDF, EPUB, XPS, DOCX, HTML, Markdown, text, scans, ...) to a
    searchable index, through leased, checkpointed stages on PostgreSQL.

    Without a command, runs stage workers (all stages, or --stages) until SIGTERM/SIGINT.
    """
    guarded(lambda: check_settings(opts))
    guarded(lambda: make_private(opts["data_dir"]))  # and the umask: 0600 / 0700
    logs.configure(opts["log_level"], opts["log_format"])
    # Spans still buffered are flushed when the command ends, however it ends.
    ctx.call_on_close(guarded(tracing.configure))
    ctx.obj = App(
        database_url=opts["database_url"],
        data_dir=opts["data_dir"],
        pipeline_spec=opts["pipeline"],
        auto_migrate=opts["auto_migrate"],
        worker=WorkerOptions.from_params(opts),
    )
    if ctx.invoked_subcommand is None:
        guarded(lambda: run_workers(ctx.obj))


def check_settings(opts: Mapping[str, Any]) -> None:
    """Every setting, before anything starts: the flags, then the pipeline's variables."""
    validate_options(opts, ENGINE_SETTINGS)
    plugin = load_plugin(opts["pipeline"])
    validate_env(os.environ, plugin.settings)
    worker_config(plugin, WorkerOptions.from_params(opts))  # checks them together


def serve_metrics(options: WorkerOptions) -> None:
    """Start the Prometheus endpoint when asked; a port in use is a configuration error."""
    if not options.metrics_port:
        return
    from prometheus_client import start_http_server

    host, port = options.metrics_host, options.metrics_port
    try:
        start_http_server(port, addr=host)
    except OSError as exc:
        raise ConfigurationError(
            one_line(f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}")
        ) from exc


def run_workers(app: App) -> None:
    config = worker_config(app.plugin, app.worker)
    # Built before the database starts and before any claim: services that cannot be
    # built (a missing key, a missing model file) stop the worker here, not in a job.
    pipeline = app.plugin.build(app.build_context())
    pipeline.prepare(config.stages)
    serve_metrics(app.worker)
    tune_worker_interpreter()

    def body(dsn: str) -> None:
        run_async(Worker(pipeline, dsn, config).run)

    app.with_database(body, supervise=True)
