"""Group commit for completions that have nothing to write.

Jobs whose stage returned no output complete through one :class:`Completer` per worker
process: what piles up while a batch is in flight goes out as the next batch, one
statement and one commit for all of them. Commits (and their fsyncs) are what bounds a
queue on PostgreSQL; a lone job still goes out at once. River's job completer and
PgQueuer's buffered acknowledgements do the same.

The same statement leases the next job for each slot that asked for one, so a busy slot
goes from one job to the next in a single round trip.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Mapping
from datetime import datetime

import anyio

from runtime.db.errors import CONNECTION_ERRORS
from runtime.jobs.clock import Clock
from runtime.jobs.store import Claim, JobStore
from runtime.models import Job

log = logging.getLogger(__name__)

DEFAULT_MAX_BATCH = 500


class _Request:
    __slots__ = ("done", "error", "held", "job", "next_job", "next_stage", "want_next")

    def __init__(self, job: Job, next_stage: str | None, want_next: bool) -> None:
        self.job = job
        self.next_stage = next_stage
        self.want_next = want_next
        self.done = anyio.Event()
        self.held = False
        self.next_job: Job | None = None
        self.error: BaseException | None = None


class Completer:
    def __init__(
        self,
        repo: JobStore,
        worker_id: str,
        lease_s: float,
        clock: Clock | None = None,
        max_batch: int = DEFAULT_MAX_BATCH,
        own_free: Callable[[], Mapping[str, int]] = dict,
    ) -> None:
        self.repo = repo
        #: The worker's free slots per stage at flush time (see Settlement.own_free).
        self.own_free = own_free
        self.worker_id = worker_id
        self.lease_s = lease_s
        self.clock = clock or Clock()
        self.max_batch = max_batch
        self._pending: list[_Request] = []
        self._work = anyio.Event()
        self._stopped = False

    async def complete(
        self, job: Job, next_stage: str | None, want_next: bool = False
    ) -> tuple[bool, Job | None]:
        """Queue a completion and wait for its batch; raises what the batch raised.

        Returns whether the job's lease held, and, if ``want_next``, the next job of its
        stage leased in the same commit (None when none was due). The wait is bounded by
        the lease (callers run shielded), in case the completer died.
        """
        if self._stopped:
            raise ConnectionError("the completer stopped")
        request = _Request(job, next_stage, want_next)
        self._pending.append(request)
        self._work.set()
        with anyio.fail_after(self.lease_s):
            await request.done.wait()
        if request.error is not None:
            raise request.error
        return request.held, request.next_job

    async def run(self) -> None:
        try:
            while True:
                await self._work.wait()
                self._work = anyio.Event()
                while self._pending:
                    batch = self._pending[: self.max_batch]
                    del self._pending[: len(batch)]
                    await self._flush(batch, self.clock.db_now())
        finally:
            self._stopped = True
            for request in self._pending:
                request.error = ConnectionError("the completer stopped")
                request.done.set()

    async def _flush(self, batch: list[_Request], now: datetime | None) -> None:
        wanted = Counter(r.job.stage for r in batch if r.want_next)
        claim = Claim(self.worker_id, self.lease_s, wanted) if wanted else None
        try:
            settled = await self.repo.settle(
                [(r.job, r.next_stage) for r in batch], claim, now=now, own_free=self.own_free()
            )
        except CONNECTION_ERRORS as exc:
            for request in batch:
                request.error = exc
        else:
            claimed: dict[str, list[Job]] = {}
            for job in settled.claimed:
                claimed.setdefault(job.stage, []).append(job)
            for request in batch:
                request.held = request.job.id in settled.held
                if request.want_next and claimed.get(request.job.stage):
                    request.next_job = claimed[request.job.stage].pop(0)
        finally:
            for request in batch:
                request.done.set()
