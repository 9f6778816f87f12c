"""runtime.providers.specs: circuit and budget settings are validated, and a provider's
error is shown by its gist."""

from __future__ import annotations

import pytest

from runtime.errors import ConfigurationError
from runtime.providers.specs import CircuitConfig, ProviderSpec, short_reason


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
