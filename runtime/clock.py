"""Injected time. Production passes ``None`` to queries so PostgreSQL's own ``now()``
decides leases and run_after; a test passes its own clock, or calls the repository's
methods with ``now`` (river's NowOrNil)."""

from __future__ import annotations

from datetime import datetime


class Clock:
    """The server's clock: every query falls back to ``now()``."""

    def db_now(self) -> datetime | None:
        return None
