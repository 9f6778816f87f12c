"""Injected time. Production passes ``None`` to queries so PostgreSQL's own ``now()``
decides leases and run_after, and measures intervals on the monotonic clock; a test
passes a :class:`ManualClock` and moves both forward itself (river's NowOrNil)."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta


class Clock:
    """The server's clock: every query falls back to ``now()``."""

    def db_now(self) -> datetime | None:
        return None

    def monotonic(self) -> float:
        """Seconds for the worker's own intervals (lease renewal, grace, log pacing)."""
        return time.monotonic()


class ManualClock(Clock):
    """Time that moves only when told: the store's ``now`` and the worker's monotonic
    clock advance together."""

    def __init__(self, start: datetime | None = None) -> None:
        self._start = start or datetime(2026, 1, 1, tzinfo=UTC)
        self._elapsed = 0.0

    def db_now(self) -> datetime:
        return self._start + timedelta(seconds=self._elapsed)

    def monotonic(self) -> float:
        return self._elapsed

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("time does not go back")
        self._elapsed += seconds
