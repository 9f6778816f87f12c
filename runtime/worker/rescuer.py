"""The rescuer: takes jobs back from workers that died holding them.

Every worker process runs one. A job whose lease expired goes back to queued (the attempt
counts; exhausted → failed with "worker lost N times"). The sweep is a walk of the
``stage_jobs_expiry`` partial index, so it costs next to nothing when no lease expired.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Awaitable, Callable

import anyio
import msgspec

from runtime.db.errors import CONNECTION_ERRORS
from runtime.errors import ConfigurationError
from runtime.jobs.clock import Clock
from runtime.jobs.store import JobStore, Rescued
from runtime.models import JobState
from runtime.process import metrics
from runtime.process.identity import dead_here, host_prefix
from runtime.process.tracing import JobSpans

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_S = 5.0
DEFAULT_BATCH = 500
#: Forget worker rows not seen for this long (they only feed `status`).
WORKER_FORGET_S = 3600.0


class RescuerConfig(msgspec.Struct, frozen=True, kw_only=True):
    interval_s: float = DEFAULT_INTERVAL_S
    batch: int = DEFAULT_BATCH

    def __post_init__(self) -> None:
        if self.interval_s <= 0 or self.batch < 1:
            raise ConfigurationError("rescuer interval_s must be > 0 and batch >= 1")


class Rescuer:
    def __init__(
        self,
        repo: JobStore,
        config: RescuerConfig,
        clock: Clock | None = None,
        on_failed: Callable[[Rescued], Awaitable[None]] | None = None,
        spans: JobSpans | None = None,
    ):
        self.repo = repo
        self.config = config
        self.clock = clock or Clock()
        #: Called for each job the sweep failed (attempts exhausted on lost leases), so
        #: the stage undoes its side effects as it does for any failed job.
        self.on_failed = on_failed
        #: Records each rescue in the job's trace (the lost run's own span died with it).
        self.spans = spans or JobSpans(None, "")

    async def take_over_dead_here(self) -> int:
        """Expire at once the leases of workers that were processes of this host and are
        gone (SIGKILL, OOM): the sweep then requeues their jobs without waiting the lease
        out. Returns how many leases were expired."""
        owners = await self.repo.running_owners_on_host(host_prefix())
        dead = [owner for owner in owners if dead_here(owner)]
        if not dead:
            return 0
        expired = await self.repo.expire_leases_of(dead)
        log.warning(
            "worker(s) %s of this host are gone: %d lease(s) taken over now",
            ", ".join(dead),
            expired,
        )
        return expired

    async def run_once(self) -> list[Rescued]:
        """Sweep until no expired lease is left; returns what was rescued."""
        await self.take_over_dead_here()
        rescued: list[Rescued] = []
        while True:
            batch = await self.repo.rescue_expired(self.config.batch, self.clock.db_now())
            rescued.extend(batch)
            for job in batch:
                metrics.RESCUED.labels(job.stage).inc()
                level = logging.ERROR if job.state is JobState.FAILED else logging.WARNING
                log.log(
                    level,
                    "rescued job %d (%s, document %s): %s -> %s",
                    job.id,
                    job.stage,
                    job.document_id,
                    job.last_error,
                    job.state,
                )
                self.spans.rescued(
                    job.stage,
                    job.trace_context,
                    owner=job.lease_owner,
                    attempt=job.attempts,
                    state=str(job.state),
                )
                if job.state is JobState.FAILED and self.on_failed is not None:
                    await self.on_failed(job)
            if len(batch) < self.config.batch:
                return rescued

    async def run(self) -> None:
        while True:
            try:
                await self.run_once()
                await self.repo.prune_workers(WORKER_FORGET_S)
            except CONNECTION_ERRORS as exc:
                log.warning("rescuer: database unavailable: %s", exc)
            # Jitter so the sweeps of many workers do not line up.
            await anyio.sleep(self.config.interval_s * random.uniform(0.75, 1.25))
