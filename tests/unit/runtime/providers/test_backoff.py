"""runtime.providers.backoff: retry delays grow to a cap with jitter and honour Retry-After;
reconnect delays grow to their cap and start again after a success."""

from __future__ import annotations

import random

import pytest

from runtime.providers.backoff import Reconnect, retry_delay_s


def test_backoff_bounds_and_jitter() -> None:
    rng = random.Random(7)
    for attempt in range(1, 12):
        ceiling = min(2.0 * 2 ** (attempt - 1), 300.0)
        delays = [retry_delay_s(attempt, base_s=2.0, rng=rng) for _ in range(200)]
        assert all(ceiling / 2 <= d <= ceiling for d in delays)
        assert len({round(d, 6) for d in delays}) > 150  # jittered, not constant
    assert retry_delay_s(40) <= 300.0


def test_backoff_honours_retry_after() -> None:
    assert retry_delay_s(1, base_s=1.0, retry_after_s=30.0) == 30.0
    assert retry_delay_s(1, base_s=1.0, retry_after_s=10_000.0) == 300.0  # capped
    assert retry_delay_s(5, base_s=10.0, retry_after_s=1.0) >= 80.0  # backoff wins
    with pytest.raises(ValueError):
        retry_delay_s(0)


def test_reconnect_backoff_grows_to_its_cap_and_resets() -> None:
    r = Reconnect(max_s=1.0, first_s=0.1)
    delays = [r.next_s() for _ in range(10)]
    assert delays[0] <= 0.1 and all(d <= 1.0 for d in delays) and delays[-1] >= 0.5
    r.reset()
    assert r.next_s() <= 0.1
