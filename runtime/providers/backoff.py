"""Retry delays: capped exponential backoff with jitter, honouring Retry-After hints."""

from __future__ import annotations

import math
import random
import time
from datetime import UTC
from email.utils import parsedate_to_datetime

DEFAULT_BASE_S = 2.0
DEFAULT_CAP_S = 300.0


def retry_delay_s(
    attempt: int,
    *,
    base_s: float = DEFAULT_BASE_S,
    cap_s: float = DEFAULT_CAP_S,
    retry_after_s: float | None = None,
    rng: random.Random | None = None,
) -> float:
    """Seconds to wait before retrying after failed attempt number ``attempt`` (1-based).

    The ceiling is ``min(base_s * 2**(attempt-1), cap_s)``; "equal jitter" picks uniformly
    from its upper half, so retries of many jobs that failed together spread out but none
    comes back sooner than half the nominal delay. A server's Retry-After is a floor
    (itself capped, so a wild hint cannot park a job for hours).
    """
    if attempt < 1:
        raise ValueError(f"attempt must be >= 1, got {attempt}")
    ceiling = min(base_s * 2 ** min(attempt - 1, 62), cap_s)
    delay: float = ceiling / 2 + (rng or random).uniform(0, ceiling / 2)
    if retry_after_s is not None:
        delay = max(delay, min(retry_after_s, cap_s))
    return delay


def parse_retry_after(value: str | None, *, now_s: float | None = None) -> float | None:
    """A ``Retry-After`` header's value in seconds: a number of them, or an HTTP date
    (from ``now_s``, else now); None when absent or unreadable."""
    if value is None:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        return max(seconds, 0.0) if math.isfinite(seconds) else None
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:  # "-0000": UTC, says RFC 5322
        when = when.replace(tzinfo=UTC)
    return max(when.timestamp() - (time.time() if now_s is None else now_s), 0.0)


class Reconnect:
    """Backoff for reconnecting to the database: 0.1 s doubling to ``max_s``, with jitter."""

    def __init__(self, max_s: float = 5.0, first_s: float = 0.1) -> None:
        self.max_s = max_s
        self.first_s = first_s
        self.failures = 0

    def next_s(self) -> float:
        self.failures += 1
        ceiling = min(self.first_s * 2 ** min(self.failures - 1, 30), self.max_s)
        jittered: float = ceiling / 2 + random.uniform(0, ceiling / 2)
        return jittered

    def reset(self) -> None:
        self.failures = 0
