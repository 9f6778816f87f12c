"""The engine CLI's flags as it reads them: typed worker options, case-insensitive
choices, stage sets and per-stage concurrency, durations."""

from __future__ import annotations

import os

import click
import pytest

from bench.harness.pipelines import STAGES
from runtime.cli.main import main
from runtime.cli.options import WorkerOptions, parse_concurrency, parse_duration_s, parse_stages
from runtime.errors import ConfigurationError


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No RAGLINE_* variable from the caller's shell changes a flag's default."""
    for name in list(os.environ):
        if name.startswith("RAGLINE_") or name == "DATABASE_URL":
            monkeypatch.delenv(name)


def parse(*args: str) -> click.Context:
    """main's parameters as click parses them (the command itself does not run)."""
    return main.make_context("ragline", list(args), resilient_parsing=False)


@pytest.mark.usefixtures("clean_env")
def test_worker_options_defaults_are_the_flags_defaults() -> None:
    assert WorkerOptions.from_params(parse().params) == WorkerOptions()


@pytest.mark.usefixtures("clean_env")
def test_worker_options_carry_the_flags_typed() -> None:
    ctx = parse(
        "--stages", "embed,index", "--lease", "60", "--retry-for", "30m", "--exit-when-idle"
    )
    options = WorkerOptions.from_params(ctx.params)
    assert options.stages == "embed,index"
    assert options.lease_s == 60.0
    assert options.retry_for_s == 1800.0
    assert options.exit_when_idle is True


@pytest.mark.usefixtures("clean_env")
@pytest.mark.parametrize("given", ["DEBUG", "Warning", "error"])
def test_log_level_is_case_insensitive(given: str) -> None:
    assert parse("--log-level", given).params["log_level"] == given.lower()


@pytest.mark.usefixtures("clean_env")
def test_log_level_from_the_environment_is_case_insensitive(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RAGLINE_LOG_LEVEL", "INFO")
    monkeypatch.setenv("RAGLINE_LOG_FORMAT", "JSON")
    params = parse().params
    assert (params["log_level"], params["log_format"]) == ("info", "json")


def test_stage_and_concurrency_flags() -> None:
    assert parse_stages("embed, index", STAGES) == ("embed", "index")
    assert parse_stages(None, STAGES) == STAGES
    with pytest.raises(ConfigurationError):
        parse_stages("embed,bogus", STAGES)
    defaults = {"parse": 2}
    assert parse_concurrency(None, ("parse", "embed"), defaults) == {"parse": 2, "embed": 1}
    assert parse_concurrency("4", ("parse", "embed"), defaults) == {"parse": 4, "embed": 4}
    assert parse_concurrency("embed=8", ("parse", "embed"), defaults) == {"parse": 2, "embed": 8}
    for bad in ("x", "chunk=2", "embed=0"):
        with pytest.raises(ConfigurationError):
            parse_concurrency(bad, ("parse", "embed"), defaults)


def test_a_stage_named_twice_in_concurrency_is_refused() -> None:
    """``parse=2,parse=5`` is a mistake either way: refused, naming the stage."""
    with pytest.raises(ConfigurationError, match="'parse' more than once"):
        parse_concurrency("parse=2,embed=1,parse=5", ("parse", "embed"), {})
    with pytest.raises(ConfigurationError, match="more than once"):
        parse_concurrency("embed=2, embed=2", ("parse", "embed"), {})


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90.0), ("30m", 1800.0), ("24h", 86400.0), ("2d", 172800.0), ("3600", 3600.0)],
)
def test_retry_for_takes_a_duration(text: str, seconds: float) -> None:
    assert parse_duration_s(text, "RAGLINE_RETRY_FOR") == seconds


@pytest.mark.parametrize("text", ["forever", "-5m", "", "h"])
def test_a_bad_duration_names_the_variable(text: str) -> None:
    with pytest.raises(click.BadParameter, match="RAGLINE_RETRY_FOR"):
        parse_duration_s(text, "RAGLINE_RETRY_FOR")
