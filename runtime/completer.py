"""Group commit for completions that have nothing to write.

Jobs whose stage returned no output complete through one :class:`Completer` per worker
process: what piles up while a batch is in flight goes out as the next batch, one
statement and one commit for all of them. Commits (and their fsyncs) are what bounds a
queue on PostgreSQL; a lone job still goes out at once. River's job completer and
PgQueuer's buffered acknowledgements do the same.
"""

from __future__ import annotations

import logging
from datetime import datetime

import anyio

from runtime.clock import Clock
from runtime.dberrors import CONNECTION_ERRORS
from runtime.models import Job
from runtime.repository import JobRepository

log = logging.getLogger(__name__)

DEFAULT_MAX_BATCH = 500


class _Request:
    __slots__ = ("done", "error", "held", "job", "next_stage")

    def __init__(self, job: Job, next_stage: str | None) -> None:
        self.job = job
        self.next_stage = next_stage
        self.done = anyio.Event()
        self.held = False
        self.error: BaseException | None = None


class Completer:
    def __init__(
        self, repo: JobRepository, clock: Clock | None = None, max_batch: int = DEFAULT_MAX_BATCH
    ) -> None:
        self.repo = repo
        self.clock = clock or Clock()
        self.max_batch = max_batch
        self._pending: list[_Request] = []
        self._work = anyio.Event()
        self._stopped = False

    async def complete(self, job: Job, next_stage: str | None, timeout_s: float) -> bool:
        """Queue a completion and wait for its batch; raises what the batch raised.

        ``timeout_s`` bounds the wait (callers run shielded), in case the completer died.
        """
        if self._stopped:
            raise ConnectionError("the completer stopped")
        request = _Request(job, next_stage)
        self._pending.append(request)
        self._work.set()
        with anyio.fail_after(timeout_s):
            await request.done.wait()
        if request.error is not None:
            raise request.error
        return request.held

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
        try:
            held = await self.repo.complete_many([(r.job, r.next_stage) for r in batch], now)
        except CONNECTION_ERRORS as exc:
            for request in batch:
                request.error = exc
        else:
            for request in batch:
                request.held = request.job.id in held
        finally:
            for request in batch:
                request.done.set()
