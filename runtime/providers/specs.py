"""Providers: what a stage calls outside, and each provider's circuit as the fleet sees it.

A stage names the providers its jobs call (:func:`stage_providers`); the engine knows them
only by name. Each provider (and model) has one row in PostgreSQL holding its circuit and
its budget clocks for the whole fleet; :mod:`runtime.providers.gate` is the gate every call
passes, and :func:`provider_states` is how `status` and the workers read the rows.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

import msgspec

import schema
from runtime.errors import ConfigurationError, one_line
from runtime.jobs.postgres import Pool, to_struct

P = schema.load("providers")

#: Session settings of the connections the gate uses (a small pool of their own). A
#: reservation or a circuit update is bookkeeping, not data: waiting for its commit to be
#: flushed (an fsync, ~2 ms on a throttled disk) cost 5x the statement itself. A crash
#: of PostgreSQL can lose the last few hundred ms of them, so the fleet may send a few
#: hundred ms of budget twice after a database crash; nothing else depends on them.
SESSION_SETTINGS = {"synchronous_commit": "off"}

DEFAULT_CIRCUIT_FAILURES = 5
DEFAULT_PROBE_S = 5.0
DEFAULT_PROBE_MAX_S = 60.0


class ProviderSpec(msgspec.Struct, frozen=True, kw_only=True):
    """A provider a stage calls, and its budget for the whole fleet (0: unlimited)."""

    name: str
    requests_per_min: float = 0.0
    tokens_per_min: float = 0.0

    def __post_init__(self) -> None:
        if not self.name or self.requests_per_min < 0 or self.tokens_per_min < 0:
            raise ConfigurationError(f"provider {self.name!r}: budgets must be >= 0")

    @property
    def budgeted(self) -> bool:
        return self.requests_per_min > 0 or self.tokens_per_min > 0


class CircuitConfig(msgspec.Struct, frozen=True, kw_only=True):
    #: Consecutive transient failures (fleet-wide) that open a circuit.
    failures: int = DEFAULT_CIRCUIT_FAILURES
    #: First interval between probes; doubles per failed probe up to ``probe_max_s``.
    probe_s: float = DEFAULT_PROBE_S
    probe_max_s: float = DEFAULT_PROBE_MAX_S

    def __post_init__(self) -> None:
        if self.failures < 1 or self.probe_s <= 0 or self.probe_max_s < self.probe_s:
            raise ConfigurationError(
                "circuit: failures must be >= 1, probe_s > 0 and probe_max_s >= probe_s"
            )


class ProviderState(msgspec.Struct, kw_only=True):
    """A provider's row as `status` and the workers see it."""

    name: str
    stages: list[str]
    state: str
    failures: int
    failing_since: datetime | None
    last_error: str | None
    probes: int
    next_probe_at: datetime | None
    probe_owner: str | None
    paused_until: datetime
    changed_at: datetime

    def waiting_line(self) -> str:
        """ "provider cohere/embed-v4.0 unavailable since 12:01:07 (HTTP 503), next try
        12:04:10"."""
        since = f" since {self.failing_since:%H:%M:%S}" if self.failing_since else ""
        reason = f" ({short_reason(self.last_error)})" if self.last_error else ""
        probe = f", next try {self.next_probe_at:%H:%M:%S}" if self.next_probe_at else ""
        if self.state == "half_open":
            probe = ", probing now"
        return f"provider {self.name} unavailable{since}{reason}{probe}"


def short_reason(error: str | None) -> str:
    """The gist of a provider error: "HTTP 503", "timed out", "connection failed"."""
    text = error or ""
    for marker in ("HTTP ", "timed out", "connection failed"):
        at = text.find(marker)
        if at >= 0:
            return text[at : at + 8] if marker == "HTTP " else marker
    return one_line(text, 80)


async def provider_states(pool: Pool) -> list[ProviderState]:
    """Every provider's circuit (for `status`, `failures` and any other reader)."""
    return [to_struct(ProviderState, r) for r in await pool.fetch(P["provider_states"])]


def stage_providers(stage: object) -> tuple[ProviderSpec, ...]:
    """The providers a stage declares in an optional ``providers`` attribute."""
    specs = getattr(stage, "providers", ())
    return tuple(specs)


def by_stage(stages: Iterable[Any]) -> dict[str, tuple[ProviderSpec, ...]]:
    """``{stage name: its providers}`` for the stages that declare any."""
    return {s.name: specs for s in stages if (specs := stage_providers(s))}
