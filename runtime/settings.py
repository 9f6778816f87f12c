"""Every setting in one table: its variable, its type, its range or choices.

``python -m runtime`` checks the environment against :data:`ENGINE_SETTINGS` and the
pipeline's table (:attr:`runtime.plugin.Plugin.settings`) before it starts anything; a bad
value is one line naming the variable and what it accepts (exit 2). A new variable is one
row (``Setting.number("RAGLINE_CIRCUIT_FAILURES", int, minimum=1)``); CLI flags
(``option``) and the pipeline's components (:class:`EnvReader`) go through the same rows,
so a bad value is the same one line wherever it is met.
"""

from __future__ import annotations

import math
import re
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import msgspec

from runtime.errors import ConfigurationError

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})
_SPEC = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")
#: Jobs in flight per stage in one process. Each takes a pooled connection; far more
#: than this only exhausts the database's connections (and, unbounded, memory).
MAX_CONCURRENCY = 1000
#: Upper bound on any duration setting: a day.
MAX_SECONDS = 86_400.0


class Setting(msgspec.Struct, frozen=True, kw_only=True):
    """One variable: ``check`` returns None when ``raw`` is acceptable, else the problem."""

    name: str
    #: What it accepts, for the error line ("a number > 0 (seconds)").
    accepts: str
    check: Callable[[str], bool]
    #: The click parameter that overrides it on the command line, if any.
    option: str | None = None
    #: Whether an empty value means "unset" (otherwise empty is an error).
    empty_ok: bool = False
    #: Values it must refuse (wrong type, out of range): the settings test runs them all.
    bad_examples: tuple[str, ...] = ()

    def problem(self, raw: str) -> str | None:
        if raw.strip() == "" and not self.empty_ok:
            return f"{self.name} is set but empty: unset it or give {self.accepts}"
        if raw.strip() == "":
            return None
        try:
            ok = self.check(raw.strip())
        except (ValueError, OverflowError):
            ok = False
        return None if ok else f"{self.name}={raw!r} is invalid: expected {self.accepts}"

    # -- row builders ------------------------------------------------------------------

    @classmethod
    def number(
        cls,
        name: str,
        kind: type[int] | type[float],
        *,
        minimum: float,
        maximum: float | None = None,
        exclusive: bool = False,
        unit: str = "",
        option: str | None = None,
    ) -> Setting:
        word = "a whole number" if kind is int else "a number"
        bound = f"{'>' if exclusive else '>='} {minimum:g}"
        if maximum is not None:
            bound += f" and <= {maximum:g}"

        def check(raw: str) -> bool:
            value = kind(raw)
            if not math.isfinite(value) or (value <= minimum if exclusive else value < minimum):
                return False
            return maximum is None or value <= maximum

        accepts = f"{word} {bound}" + (f" ({unit})" if unit else "")
        low = f"{minimum:g}" if exclusive else f"{minimum - 1:g}"
        bad: tuple[str, ...] = ("abc", "1.5" if kind is int else "nan", low)
        bad += (f"{maximum * 2:g}",) if maximum is not None else ()
        return cls(name=name, accepts=accepts, check=check, option=option, bad_examples=bad)

    @classmethod
    def seconds(
        cls, name: str, *, option: str | None = None, positive: bool = True, unit: str = "seconds"
    ) -> Setting:
        """A duration in seconds up to :data:`MAX_SECONDS`; ``positive=False`` admits 0."""
        return cls.number(
            name,
            float,
            minimum=0,
            exclusive=positive,
            maximum=MAX_SECONDS,
            unit=unit,
            option=option,
        )

    @classmethod
    def choice(cls, name: str, choices: Iterable[str], *, option: str | None = None) -> Setting:
        options = tuple(choices)
        return cls(
            name=name,
            accepts=f"one of {', '.join(options)}",
            check=lambda raw: raw.lower() in options,
            option=option,
            bad_examples=("bogus",),
        )

    @classmethod
    def boolean(cls, name: str, *, option: str | None = None) -> Setting:
        return cls(
            name=name,
            accepts="true or false (1/0, yes/no, on/off)",
            check=lambda raw: raw.lower() in _TRUE | _FALSE,
            option=option,
            bad_examples=("maybe",),
        )

    @classmethod
    def url(
        cls,
        name: str,
        schemes: Iterable[str],
        *,
        option: str | None = None,
        host_required: bool = True,
    ) -> Setting:
        """A URL with one of ``schemes``; ``host_required=False`` for libpq URLs, where
        ``postgresql:///db`` means the default host (a local socket)."""
        allowed = tuple(schemes)

        def check(raw: str) -> bool:
            parts = urllib.parse.urlsplit(raw)
            return parts.scheme in allowed and (bool(parts.netloc) or not host_required)

        accepts = f"a URL starting with {' or '.join(f'{s}://' for s in allowed)}"
        bad = ("mysql://user@host/db", "not a url")
        return cls(name=name, accepts=accepts, check=check, option=option, bad_examples=bad)

    @classmethod
    def text(
        cls, name: str, *, accepts: str = "a non-empty value", empty_ok: bool = False
    ) -> Setting:
        return cls(name=name, accepts=accepts, check=lambda raw: bool(raw), empty_ok=empty_ok)


def parse_bool(name: str, raw: str) -> bool:
    lowered = raw.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ConfigurationError(f"{name}={raw!r} is invalid: expected true or false")


def _is_spec(raw: str) -> bool:
    return _SPEC.fullmatch(raw) is not None


def _is_concurrency(raw: str) -> bool:
    """``N`` or ``stage=N,...`` with every N in 1..MAX_CONCURRENCY and no stage named
    twice (stage names are checked against the pipeline later)."""
    if "=" not in raw:
        return 1 <= int(raw) <= MAX_CONCURRENCY
    pairs = [p.partition("=") for p in raw.split(",")]
    names = [name.strip() for name, _, _ in pairs]
    unique = len(set(names)) == len(names)
    return unique and all(1 <= int(n) <= MAX_CONCURRENCY for _, _, n in pairs)


def _is_port(raw: str) -> bool:
    return 0 <= int(raw) <= 65535


_DURATION_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def duration_s(raw: str) -> float:
    """``90s``, ``30m``, ``24h``, ``2d`` or plain seconds, in seconds; ValueError unless it
    is finite and >= 0."""
    text = raw.strip().lower()
    scale = _DURATION_UNITS.get(text[-1:], 1.0)
    number = text[:-1] if text[-1:] in _DURATION_UNITS else text
    seconds = float(number) * scale
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"not a duration: {raw!r}")
    return seconds


def _is_duration(raw: str) -> bool:
    return duration_s(raw) >= 0


def _is_stage_list(raw: str) -> bool:
    return all(re.fullmatch(r"[\w-]+", s.strip()) for s in raw.split(","))


#: The engine's settings (the README's configuration table, first part).
ENGINE_SETTINGS: tuple[Setting, ...] = (
    Setting.url(
        "DATABASE_URL", ("postgresql", "postgres"), option="database_url", host_required=False
    ),
    Setting.text("RAGLINE_DATA_DIR", accepts="a directory path"),
    Setting(
        name="RAGLINE_PIPELINE",
        accepts="module:attribute (e.g. stages.app:plugin)",
        check=_is_spec,
        option="pipeline",
        bad_examples=("no-colon", "a b:c"),
    ),
    Setting.boolean("RAGLINE_AUTO_MIGRATE", option="auto_migrate"),
    Setting(
        name="RAGLINE_STAGES",
        accepts="comma-separated stage names",
        check=_is_stage_list,
        option="stages",
        bad_examples=("parse;chunk", "parse,,"),
    ),
    Setting(
        name="RAGLINE_CONCURRENCY",
        accepts=f"N or stage=N,... (each stage once) with N from 1 to {MAX_CONCURRENCY}",
        check=_is_concurrency,
        option="concurrency",
        bad_examples=("many", "0", "-3", "99999999", "parse=0", "parse=x", "parse=2,parse=5"),
    ),
    Setting.number("RAGLINE_INFERENCE_SLOTS", int, minimum=1, maximum=1024),
    Setting.seconds("RAGLINE_LEASE_S", option="lease_s"),
    Setting.seconds(
        "RAGLINE_HEARTBEAT_S",
        option="heartbeat_s",
        positive=False,
        unit="seconds, 0: a third of the lease",
    ),
    Setting.seconds("RAGLINE_POLL_S", option="poll_s"),
    Setting.seconds("RAGLINE_GRACE_S", option="grace_s", positive=False),
    Setting.seconds("RAGLINE_RETRY_BASE_S", option="retry_base_s"),
    Setting.seconds("RAGLINE_RESCUE_S", option="rescue_every_s"),
    Setting(
        name="RAGLINE_RETRY_FOR",
        accepts="a duration like 90s, 30m, 24h or 2d, or plain seconds (>= 0)",
        check=_is_duration,
        option="retry_for_s",
        bad_examples=("soon", "-5", "24x"),
    ),
    Setting.number(
        "RAGLINE_CIRCUIT_FAILURES", int, minimum=1, maximum=1_000_000, option="circuit_failures"
    ),
    Setting.seconds("RAGLINE_PROBE_S", option="probe_s"),
    Setting.seconds("RAGLINE_PROBE_MAX_S", option="probe_max_s"),
    Setting.boolean("RAGLINE_EXIT_WHEN_IDLE", option="exit_when_idle"),
    Setting(
        name="RAGLINE_METRICS_PORT",
        accepts="a port from 1 to 65535, or 0 for off",
        check=_is_port,
        option="metrics_port",
        bad_examples=("http", "-1", "70000"),
    ),
    Setting.text("RAGLINE_METRICS_HOST", accepts="a host name or address to bind"),
    Setting.choice("RAGLINE_LOG_LEVEL", ("debug", "info", "warning", "error"), option="log_level"),
    Setting.choice("RAGLINE_LOG_FORMAT", ("text", "json"), option="log_format"),
)


def validate_env(env: Mapping[str, str], table: Iterable[Setting]) -> None:
    """Raise :class:`ConfigurationError` (one line) for the first bad variable in ``env``."""
    for setting in table:
        raw = env.get(setting.name)
        if raw is not None and (problem := setting.problem(raw)):
            raise ConfigurationError(problem)


class EnvReader:
    """Typed values of the variables in ``table``, read from ``env``.

    Every read goes through the variable's row, so a bad value fails the same way wherever
    it is read: :class:`ConfigurationError` with the row's one line, the one
    :func:`validate_env` gives at start (the CLI exits 2). An unset or empty variable gives
    ``default``; reading a variable that has no row is a bug (KeyError).
    """

    def __init__(self, env: Mapping[str, str], table: Iterable[Setting]) -> None:
        self._env = env
        self._rows = {setting.name: setting for setting in table}

    def raw(self, name: str) -> str | None:
        """The stripped value, checked against its row; None when unset or empty."""
        row = self._rows.get(name)
        if row is None:
            raise KeyError(f"{name} has no row in the settings table")
        raw = self._env.get(name)
        # Empty reads as unset, as the factories always did (callers override a variable
        # away with ""); the start-up check refuses an empty value where the row does.
        if raw is None or raw.strip() == "":
            return None
        if problem := row.problem(raw):
            raise ConfigurationError(problem)
        return raw.strip()

    def text(self, name: str, default: str | None = None) -> str | None:
        return self.raw(name) or default

    def integer(self, name: str, default: int) -> int:
        raw = self.raw(name)
        return default if raw is None else int(raw)

    def optional_integer(self, name: str) -> int | None:
        raw = self.raw(name)
        return None if raw is None else int(raw)

    def number(self, name: str, default: float) -> float:
        raw = self.raw(name)
        return default if raw is None else float(raw)

    def flag(self, name: str, default: bool) -> bool:
        raw = self.raw(name)
        return default if raw is None else parse_bool(name, raw)

    def choice(self, name: str, default: str) -> str:
        raw = self.raw(name)
        return default if raw is None else raw.lower()


def validate_options(values: Mapping[str, Any], table: Iterable[Setting]) -> None:
    """The same checks for values given as command-line flags (``values`` by parameter
    name), naming the flag."""
    for setting in table:
        if setting.option is None or values.get(setting.option) is None:
            continue
        value = values[setting.option]
        raw = str(value).lower() if isinstance(value, bool) else str(value)
        problem = setting.problem(raw)
        if problem:
            flag = "--" + setting.option.removesuffix("_s").replace("_", "-")
            raise ConfigurationError(problem.replace(setting.name, f"{flag} ({setting.name})", 1))


__all__ = [
    "ENGINE_SETTINGS",
    "MAX_CONCURRENCY",
    "EnvReader",
    "Setting",
    "duration_s",
    "parse_bool",
    "validate_env",
    "validate_options",
]
