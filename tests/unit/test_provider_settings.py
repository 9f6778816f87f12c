"""Provider settings and messages: durations, circuit validation, the gist of an error."""

from __future__ import annotations

import click
import pytest

from runtime.cli.options import parse_duration_s
from runtime.errors import ConfigurationError
from runtime.providers.specs import CircuitConfig, ProviderSpec, short_reason


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


def test_circuit_and_budget_settings_are_validated() -> None:
    with pytest.raises(ConfigurationError):
        CircuitConfig(failures=0)
    with pytest.raises(ConfigurationError):
        CircuitConfig(probe_s=10, probe_max_s=5)
    with pytest.raises(ConfigurationError):
        ProviderSpec(name="cohere/embed-v4.0", requests_per_min=-1)
    assert not ProviderSpec(name="x").budgeted
    assert ProviderSpec(name="x", tokens_per_min=10).budgeted


@pytest.mark.parametrize(
    ("error", "gist"),
    [
        ("cohere embed: HTTP 503: service unavailable", "HTTP 503"),
        ("cohere embed: timed out (ReadTimeout)", "timed out"),
        ("cohere embed: connection failed (ConnectError: refused)", "connection failed"),
        ("something else", "something else"),
    ],
)
def test_the_gist_of_a_provider_error(error: str, gist: str) -> None:
    assert short_reason(error) == gist
