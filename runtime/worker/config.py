"""How a worker runs: its stages, their slots, its lease and its timings."""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from runtime.errors import ConfigurationError
from runtime.providers.specs import CircuitConfig


class WorkerKnobs(msgspec.Struct, frozen=True, kw_only=True):
    """What a worker flag sets as it is given: the fields and defaults that
    :class:`runtime.cli.options.WorkerOptions` and :class:`WorkerConfig` share."""

    lease_s: float = 60.0
    #: 0 means lease_s / 3.
    heartbeat_s: float = 0.0
    poll_s: float = 2.0
    grace_s: float = 10.0
    retry_base_s: float = 2.0
    #: Transient failures retry for this long (from the first of a run), not a count.
    retry_for_s: float = 24 * 3600.0
    rescue_every_s: float = 5.0
    exit_when_idle: bool = False


class WorkerConfig(WorkerKnobs, frozen=True, kw_only=True):
    stages: tuple[str, ...]
    concurrency: Mapping[str, int]
    retry_cap_s: float = 300.0
    circuit: CircuitConfig = msgspec.field(default_factory=CircuitConfig)
    handle_signals: bool = False
    listen: bool = True
    #: Refresh the queue-depth gauges every this many seconds (0: off).
    gauges_every_s: float = 0.0
    #: Open a span per job run in its document's trace (docs/tracing.md); a no-op unless
    #: an SDK is configured. False only to measure what that costs (bench.queue).
    trace: bool = True

    def __post_init__(self) -> None:
        if not self.stages:
            raise ConfigurationError("a worker needs at least one stage")
        for stage in self.stages:
            if self.concurrency.get(stage, 0) < 1:
                raise ConfigurationError(f"concurrency of stage {stage!r} must be >= 1")
        if self.lease_s <= 0 or self.poll_s <= 0 or self.grace_s < 0:
            raise ConfigurationError("lease_s and poll_s must be > 0, grace_s >= 0")
        if self.retry_for_s < 0:
            raise ConfigurationError("retry_for_s must be >= 0")
        if self.heartbeat_s and self.heartbeat_s >= self.lease_s:
            raise ConfigurationError(
                f"heartbeat_s (RAGLINE_HEARTBEAT_S, {self.heartbeat_s:g}) must be shorter "
                f"than lease_s (RAGLINE_LEASE_S, {self.lease_s:g})"
            )

    @property
    def heartbeat_every_s(self) -> float:
        return self.heartbeat_s or self.lease_s / 3
