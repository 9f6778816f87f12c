"""What the fake Cohere server answers and counts: vectors, faults, stats, the rate limit."""

from __future__ import annotations

import hashlib
import time

import msgspec
import numpy as np

ENDPOINTS = ("embed", "chat")


def fake_vector(text: str, dims: int, model: str = "embed-v4.0") -> list[float]:
    """The unit vector the fake server returns for ``text``."""
    seed = int.from_bytes(hashlib.sha256(f"{model}\0{text}".encode()).digest()[:8], "big")
    vec = np.random.default_rng(seed).standard_normal(dims)
    return [float(x) for x in vec / np.linalg.norm(vec)]


class Fault(msgspec.Struct, frozen=True, kw_only=True):
    """One scripted misbehaviour, used by the next matching request.

    ``status`` answers with that HTTP status (``retry_after_s`` adds a Retry-After header);
    ``delay_s`` waits first (then answers normally unless ``status``/``reset`` is set);
    ``reset`` closes the socket without any response. ``endpoint`` limits the fault to
    ``"embed"`` or ``"chat"``; None matches either.
    """

    status: int | None = None
    retry_after_s: float | None = None
    delay_s: float = 0.0
    reset: bool = False
    endpoint: str | None = None
    message: str | None = None


class FaultRates(msgspec.Struct, frozen=True, kw_only=True):
    """Random faults, each a probability per request, drawn from ``seed``."""

    error_500: float = 0.0
    rate_429: float = 0.0
    reset: float = 0.0
    slow: float = 0.0
    slow_s: float = 5.0
    retry_after_s: float = 1.0
    seed: int = 0


class Stats(msgspec.Struct, kw_only=True):
    """Counters, all since start or the last reset."""

    requests: dict[str, int] = msgspec.field(default_factory=dict)
    statuses: dict[str, int] = msgspec.field(default_factory=dict)
    texts_embedded: int = 0
    max_batch: int = 0
    images_described: int = 0
    #: Documents the rerank endpoint ordered.
    reranked: int = 0
    rate_limited: int = 0
    input_types: dict[str, int] = msgspec.field(default_factory=dict)
    models: dict[str, int] = msgspec.field(default_factory=dict)
    output_dimensions: dict[str, int] = msgspec.field(default_factory=dict)
    #: Wall-clock time (time.time()) of the first and the last embed/chat request.
    first_request_at: float = 0.0
    last_request_at: float = 0.0
    #: Wall-clock times of the requests an outage answered.
    outage_requests_at: list[float] = msgspec.field(default_factory=list)


def bump(counter: dict[str, int], key: object) -> None:
    counter[str(key)] = counter.get(str(key), 0) + 1


class Bucket:
    """Token bucket for the optional server-side rate limit (not thread-safe alone)."""

    def __init__(self, rate_per_s: float) -> None:
        self.rate = rate_per_s
        self.tokens = max(1.0, rate_per_s)
        self.stamp = time.monotonic()

    def take(self) -> float | None:
        """None if a request may pass, else the seconds until one may."""
        now = time.monotonic()
        self.tokens = min(max(1.0, self.rate), self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return None
        return (1.0 - self.tokens) / self.rate
