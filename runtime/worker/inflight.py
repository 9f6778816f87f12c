"""A job a worker holds: its cancel scope, its lease's last renewal, its span, and the
:class:`runtime.stage.JobContext` its stage gets."""

from __future__ import annotations

import contextlib

import anyio
from opentelemetry.trace import INVALID_SPAN, Span

from runtime.errors import LeaseLost
from runtime.jobs.postgres import Pool
from runtime.jobs.store import JobStore
from runtime.models import Job
from runtime.process.tracing import JobSpans, Value, annotate
from runtime.providers.gate import Providers
from runtime.stage import Stage, Writer


class InFlight:
    """A running job: its cancel scope and when its lease was last confirmed."""

    def __init__(self, job: Job, stage: Stage, now: float) -> None:
        self.job = job
        self.stage = stage
        self.scope = anyio.CancelScope()
        self.renewed_at = now
        self.started_at = now
        self.lost = False
        #: process() returned; the outcome is being written (its lease is still renewed).
        self.settling = False
        #: The attempt checkpointed something: a failure now does not count as an attempt.
        self.progressed = False
        #: This run's span in its document's trace (a no-op one when untraced).
        self.span: Span = INVALID_SPAN
        #: Calls made through the provider gate (the span's ``ragline.provider_calls``).
        self.provider_calls = 0

    def lose(self) -> None:
        self.lost = True
        self.scope.cancel()


class Context:
    """The :class:`runtime.stage.JobContext` a stage's ``process`` gets."""

    def __init__(
        self,
        job: Job,
        store: JobStore,
        providers: Providers | None = None,
        flight: InFlight | None = None,
        *,
        pool: Pool | None = None,
        spans: JobSpans | None = None,
    ) -> None:
        self._job = job
        self._store = store
        self._providers = providers
        self._flight = flight
        self._pool = pool
        self._spans = spans or JobSpans(None, "")

    @property
    def job(self) -> Job:
        return self._job

    @property
    def pool(self) -> Pool:
        if self._pool is None:
            raise RuntimeError("no database pool: this job runs on an in-memory job store")
        return self._pool

    async def checkpoint(self, write: Writer) -> None:
        if not await self._store.checkpoint(self._job, write):
            raise LeaseLost()
        if self._flight is not None:
            self._flight.progressed = True

    def calling(
        self, provider: str, *, tokens: int = 0
    ) -> contextlib.AbstractAsyncContextManager[None]:
        gate: contextlib.AbstractAsyncContextManager[None] = (
            contextlib.nullcontext()
            if self._providers is None
            else self._providers.call(provider, tokens=tokens)
        )
        if self._flight is None:
            return gate
        self._flight.provider_calls += 1
        return self._spans.provider_call(self._flight.span, provider, tokens, gate)

    def note(self, **values: Value | None) -> None:
        if self._flight is not None:
            annotate(self._flight.span, values)
