"""The worker's flags: parsed once by the CLI into a typed :class:`WorkerOptions`, turned
into a :class:`runtime.worker.worker.WorkerConfig` against the pipeline's stages."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import click

from runtime.errors import ConfigurationError
from runtime.plugin import Plugin
from runtime.providers.specs import (
    DEFAULT_CIRCUIT_FAILURES,
    DEFAULT_PROBE_MAX_S,
    DEFAULT_PROBE_S,
    CircuitConfig,
)
from runtime.settings import ENGINE_SETTINGS, MAX_CONCURRENCY, duration_s
from runtime.worker.config import WorkerConfig, WorkerKnobs


class WorkerOptions(WorkerKnobs, frozen=True, kw_only=True):
    """The worker flags as given (``--stages``, ``--lease``, ...); defaults are the flags'."""

    #: ``--stages`` as given: comma-separated names; None serves every stage.
    stages: str | None = None
    #: ``--concurrency`` as given: ``N`` or ``stage=N,...``; None: the pipeline's defaults.
    concurrency: str | None = None
    circuit_failures: int = DEFAULT_CIRCUIT_FAILURES
    probe_s: float = DEFAULT_PROBE_S
    probe_max_s: float = DEFAULT_PROBE_MAX_S
    metrics_port: int = 0
    metrics_host: str = "127.0.0.1"

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> WorkerOptions:
        """From click's parameters by name (the global options carry more than these)."""
        return cls(**{name: params[name] for name in cls.__struct_fields__})


def worker_config(plugin: Plugin, options: WorkerOptions) -> WorkerConfig:
    """The worker's settings; raises :class:`ConfigurationError` on a bad combination."""
    stages = parse_stages(options.stages, plugin.stage_names)
    return WorkerConfig(
        **{name: getattr(options, name) for name in WorkerKnobs.__struct_fields__},
        stages=stages,
        concurrency=parse_concurrency(options.concurrency, stages, plugin.default_concurrency),
        circuit=circuit_config(options),
        handle_signals=True,
        gauges_every_s=5.0 if options.metrics_port else 0.0,
    )


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
    if "=" not in value:
        return _concurrency_values(dict.fromkeys(stages, _count(value, value)))
    given: set[str] = set()
    for part in value.split(","):
        name, _, n = part.partition("=")
        _check_concurrency_stage(name.strip(), stages, given)
        result[name.strip()] = _count(n, value)
    return _concurrency_values(result)


def _count(text: str, value: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ConfigurationError(
            f"RAGLINE_CONCURRENCY / --concurrency: expected N or stage=N,... got {value!r}"
        ) from None


def _concurrency_values(result: dict[str, int]) -> dict[str, int]:
    if any(not 1 <= n <= MAX_CONCURRENCY for n in result.values()):
        raise ConfigurationError(
            f"RAGLINE_CONCURRENCY / --concurrency: each N must be from 1 to {MAX_CONCURRENCY}"
        )
    return result


def _check_concurrency_stage(name: str, stages: tuple[str, ...], given: set[str]) -> None:
    """A ``stage=N`` part names a stage served, once (``parse=2,parse=5`` is a mistake
    either way)."""
    if name not in stages:
        raise ConfigurationError(
            f"RAGLINE_CONCURRENCY / --concurrency: stage {name!r} is not "
            f"among the stages served ({', '.join(stages)})"
        )
    if name in given:
        raise ConfigurationError(
            f"RAGLINE_CONCURRENCY / --concurrency: stage {name!r} more than once"
        )
    given.add(name)


def parse_duration_s(value: str | float, name: str) -> float:
    """``90s``, ``30m``, ``24h``, ``2d`` or plain seconds (:func:`runtime.settings.duration_s`)."""
    try:
        return duration_s(str(value))
    except ValueError:
        raise click.BadParameter(
            f"{name} must be a duration like 90s, 30m or 24h, got {value!r}"
        ) from None


def circuit_config(options: WorkerOptions) -> CircuitConfig:
    try:
        return CircuitConfig(
            failures=options.circuit_failures,
            probe_s=options.probe_s,
            probe_max_s=options.probe_max_s,
        )
    except ConfigurationError as exc:
        raise click.BadParameter(f"RAGLINE_PROBE_MAX_S must be >= RAGLINE_PROBE_S ({exc})") from exc


def env_option(*decls: str, envvar: str, **kwargs: Any) -> Callable[[Any], Any]:
    return click.option(*decls, envvar=envvar, show_envvar=True, show_default=True, **kwargs)


#: Each flag's variable, from the settings table (a row's ``option`` names the flag's field).
_VARIABLE = {row.option: row.name for row in ENGINE_SETTINGS if row.option}
_DEFAULTS = WorkerOptions()


def seconds_option(flag: str, field: str, help: str, *, positive: bool = False) -> Any:
    """A flag in seconds setting ``field``: its variable from the settings table, its
    default from :class:`WorkerOptions`; ``positive`` refuses 0."""
    kind = click.FloatRange(min=0, min_open=True) if positive else float
    default = getattr(_DEFAULTS, field)
    return env_option(flag, field, envvar=_VARIABLE[field], default=default, type=kind, help=help)


#: The worker flags, in ``--help`` order; :func:`worker_flags` applies them.
_WORKER_FLAGS: tuple[Callable[[Any], Any], ...] = (
    env_option(
        "--stages",
        envvar="RAGLINE_STAGES",
        default=None,
        help="Worker mode: comma-separated stages this process serves [default: all].",
    ),
    env_option(
        "--concurrency",
        envvar="RAGLINE_CONCURRENCY",
        default=None,
        help="Worker mode: jobs in flight per stage: N, or stage=N,... "
        "[default: the pipeline's per-stage defaults].",
    ),
    seconds_option("--lease", "lease_s", "Seconds a claimed job stays leased without a heartbeat."),
    seconds_option(
        "--heartbeat", "heartbeat_s", "Seconds between lease renewals (0: a third of the lease)."
    ),
    seconds_option("--poll", "poll_s", "Seconds between queue polls when no NOTIFY arrives."),
    seconds_option(
        "--grace",
        "grace_s",
        "On SIGTERM/SIGINT, seconds in-flight jobs get before they are released.",
    ),
    seconds_option(
        "--retry-base",
        "retry_base_s",
        "First retry delay in seconds; doubles per attempt, capped at 300.",
    ),
    seconds_option(
        "--rescue-every",
        "rescue_every_s",
        "Seconds between sweeps for expired leases (every worker sweeps).",
    ),
    env_option(
        "--retry-for",
        "retry_for_s",
        envvar="RAGLINE_RETRY_FOR",
        default="24h",
        callback=lambda _ctx, _param, value: parse_duration_s(value, "RAGLINE_RETRY_FOR"),
        help="How long transient failures (provider 5xx, 408, 429, timeouts, connection "
        "errors) are retried, from the first of a run, before the job fails: 90s, 30m, 24h "
        "or seconds.",
    ),
    env_option(
        "--circuit-failures",
        envvar="RAGLINE_CIRCUIT_FAILURES",
        default=DEFAULT_CIRCUIT_FAILURES,
        type=click.IntRange(min=1),
        help="Consecutive transient failures of a provider, across all processes, that open "
        "its circuit (its stages' jobs then wait queued).",
    ),
    seconds_option(
        "--probe",
        "probe_s",
        "Seconds from a circuit opening to its first probe; doubles per failed probe.",
        positive=True,
    ),
    seconds_option(
        "--probe-max",
        "probe_max_s",
        "Longest interval between probes of an open circuit.",
        positive=True,
    ),
    env_option(
        "--exit-when-idle",
        envvar="RAGLINE_EXIT_WHEN_IDLE",
        is_flag=True,
        default=False,
        help="Worker mode: exit once no job of these stages is queued or running.",
    ),
    env_option(
        "--metrics-port",
        envvar="RAGLINE_METRICS_PORT",
        default=0,
        type=int,
        help="Serve Prometheus metrics on this port (0: off).",
    ),
    env_option(
        "--metrics-host",
        envvar="RAGLINE_METRICS_HOST",
        default="127.0.0.1",
        help="Address the metrics server binds (0.0.0.0: every interface).",
    ),
)


def worker_flags(command: Callable[..., Any]) -> Callable[..., Any]:
    """Add the worker flags to ``command`` (click applies decorators bottom-up)."""
    for flag in reversed(_WORKER_FLAGS):
        command = flag(command)
    return command
