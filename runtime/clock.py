"""Injected time. Production passes ``None`` to queries so PostgreSQL's own ``now()``
decides leases and run_after; tests pin it (river's NowOrNil)."""

from __future__ import annotations

from datetime import datetime, timedelta


class Clock:
    """The server's clock: every query falls back to ``now()``."""

    def db_now(self) -> datetime | None:
        return None


class PinnedClock(Clock):
    """A clock tests move by hand."""

    def __init__(self, at: datetime) -> None:
        self.at = at

    def db_now(self) -> datetime | None:
        return self.at

    def advance(self, seconds: float) -> None:
        self.at += timedelta(seconds=seconds)
