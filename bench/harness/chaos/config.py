"""What one chaos run is: its knobs, the worker roles, the environment, the counting server."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Any

import msgspec

from bench.harness.fake_cohere import FakeCohere, Fault, FaultRates
from bench.harness.procs import REPO

#: Worker roles: name → ``--stages`` (None: every stage).
ROLES: dict[str, str | None] = {
    "parse-chunk": "parse,chunk",
    "vision-embed": "vision,embed",
    "index": "index",
    "all": None,
}
#: Embed jobs one process of a role can hold at once (the pipeline's default concurrency).
EMBED_SLOTS = {"parse-chunk": 0, "vision-embed": 4, "index": 0, "all": 4}
#: Cohere's maximum texts per embed request, which the embed stage batches at.
EMBED_BATCH = 96
PIPELINE = "stages.app:plugin"


class ChaosConfig(msgspec.Struct, frozen=True, kw_only=True):
    """One chaos run. Times in seconds; rates are probabilities per request."""

    pdfs: int = 56
    max_pages: int = 30
    #: How long the driver keeps injecting faults (it also stops once all are final).
    chaos_s: float = 30.0
    kill_every_s: tuple[float, float] = (2.0, 3.0)
    lease_s: float = 2.0
    heartbeat_s: float = 0.5
    rescue_every_s: float = 0.5
    poll_s: float = 0.3
    grace_s: float = 1.0
    retry_base_s: float = 0.2
    #: Generous: every SIGKILL or SIGSTOP costs the jobs in flight an attempt.
    max_attempts: int = 10
    dims: int = 64
    #: The fake Cohere server's random faults (drawn from ``seed``).
    faults: FaultRates = FaultRates(
        error_500=0.2, rate_429=0.1, slow=0.1, slow_s=1.0, retry_after_s=0.5
    )
    #: "cohere" (chat against the fake server) or "none".
    vision: str = "cohere"
    drain_timeout_s: float = 120.0
    #: The chaos lasts until both ``chaos_s`` passed and this many SIGKILLs were sent
    #: (a loaded machine boots workers slowly), but at most ``chaos_s + 120``.
    min_kills: int = 6
    #: PostgreSQL restarts during the chaos (needs a ``restart_db`` callable).
    pg_restarts: int = 0
    #: SIGKILLs of the embedded postmaster during the chaos (needs a ``kill_db`` callable);
    #: the workers' supervisors must bring it back.
    pg_kills: int = 0
    #: Good documents are held at submit and released over the first ``release_over`` of
    #: ``chaos_s`` (this share at once, the rest evenly), so documents flow through every
    #: injected fault however fast the machine clears the corpus.
    release_over: float = 0.7
    release_at_once: float = 0.3
    seed: int = 7

    def fault_rates(self) -> FaultRates:
        return msgspec.structs.replace(self.faults, seed=self.seed)


class CountingCohere(FakeCohere):
    """A FakeCohere that also counts, per endpoint, answers given and faults injected."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.ok: Counter[str] = Counter()
        self.faults: Counter[str] = Counter()

    def next_fault(self, endpoint: str) -> Fault | None:
        fault = super().next_fault(endpoint)
        if fault is not None and fault.status is not None:
            with self._lock:
                self.faults[f"{endpoint}:{fault.status}"] += 1
        return fault

    def embed_response(self, body: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            self.ok["embed"] += 1  # counted even if the client hung up before reading it
        return super().embed_response(body)

    def chat_response(self, image: bytes, media_type: str, model: str) -> dict[str, Any]:
        with self._lock:
            self.ok["chat"] += 1
        return super().chat_response(image, media_type, model)


def chaos_env(config: ChaosConfig, dsn: str, data_dir: Path, base_url: str) -> dict[str, str]:
    """The environment every worker (and the inspecting process) builds services from."""
    skip = ("RAGLINE_", "COHERE_", "QDRANT_", "MINIO_", "DATABASE_URL")
    env = {k: v for k, v in os.environ.items() if not k.startswith(skip)}
    env.update(
        DATABASE_URL=dsn,
        RAGLINE_DATA_DIR=str(data_dir),
        RAGLINE_PIPELINE=PIPELINE,
        RAGLINE_LOG_LEVEL="info",
        PYTHONPATH=str(REPO),
        COHERE_API_KEY="test",
        COHERE_BASE_URL=base_url,
        RAGLINE_EMBEDDER="cohere",
        RAGLINE_EMBED_DIMENSIONS=str(config.dims),
        RAGLINE_EMBED_TIMEOUT_S="20",
        RAGLINE_VISION=config.vision,
        RAGLINE_VISION_MODEL="fake-vision",
        RAGLINE_VISION_TIMEOUT_S="20",
    )
    return env
