"""The executor: runs a slot's jobs one after another, each in its own cancel scope and
its own span of its document's trace, and has their outcomes written
(runtime/worker/settler.py) shielded from cancellation, retrying through database outages
until the lease would have run out anyway."""

from __future__ import annotations

import contextlib
import logging
from typing import Any

import anyio
from opentelemetry import trace

from runtime.db.errors import CONNECTION_ERRORS, is_storage_full
from runtime.errors import LeaseLost, Snooze, StageError, one_line
from runtime.models import Failure
from runtime.process import metrics
from runtime.process.tracing import current, event
from runtime.providers.backoff import Reconnect
from runtime.worker.inflight import InFlight
from runtime.worker.outcome import (
    Lost,
    Outcome,
    Shutdown,
    Snoozed,
    Success,
    failure_of,
    storage_full,
)
from runtime.worker.settler import Settler
from runtime.worker.state import WorkerState


class Executor:
    def __init__(self, state: WorkerState, settler: Settler) -> None:
        self.state = state
        self.settler = settler

    async def run_slot(self, flight: InFlight) -> None:
        """One slot of a stage: run jobs until a completion leases no next one."""
        st = self.state
        name = flight.stage.name
        current: InFlight | None = flight
        try:
            while current is not None:
                current = await self.run_job(current)
        finally:
            st.running[name] -= 1
            st.wake[name].set()
            st.wake_entry()
            st.drained.set()

    async def run_job(self, flight: InFlight) -> InFlight | None:
        """Run one job and record its outcome; returns the next job of its stage if the
        completion leased one."""
        job = flight.job
        jlog = self.state.job_log(job)
        jlog.debug("claimed (attempt %d/%d)", job.attempts, job.max_attempts)
        span = flight.span = self.state.spans.start(job)
        try:
            with self.current(span):
                outcome = await self.execute(flight)
            flight.settling = True
            following = None
            with anyio.CancelScope(shield=True):
                following = await self.settle(flight, outcome, jlog)
            return following
        finally:
            # The sweep may have requeued this job and this worker claimed it again: the
            # entry then belongs to the new claim, which removes it itself.
            if self.state.inflight.get(job.id) is flight:
                del self.state.inflight[job.id]
            if span.is_recording():
                if flight.provider_calls:
                    span.set_attribute("ragline.provider_calls", flight.provider_calls)
                span.end()

    @staticmethod
    def current(span: trace.Span) -> contextlib.AbstractContextManager[Any]:
        """``span`` as the current span while the stage runs (its provider calls, and a
        library's own spans, nest under it); nothing to do for a span that records nothing."""
        if not span.is_recording():
            return contextlib.nullcontext()
        return current(span)

    async def execute(self, flight: InFlight) -> Outcome:
        with flight.scope:
            try:
                output = await flight.stage.process(self.state.context(flight))
                return Success(output)
            except LeaseLost:
                event(flight.span, "lease_lost", where="checkpoint")
                return Lost()
            except Snooze as exc:
                return Snoozed(one_line(exc.message), max(exc.delay_s, 0.0))
            except Exception as exc:
                return await self.classify(exc)
        return Lost() if flight.lost else Shutdown()

    async def classify(self, exc: Exception) -> Failure:
        if is_storage_full(exc):
            return failure_of(exc)
        if isinstance(exc, CONNECTION_ERRORS) and not isinstance(exc, StageError):
            # Our database blinked: not the document's fault. Hand the job back.
            await self.state.db_error("stage", exc)
            return Failure(
                message=one_line(f"database: {exc}"),
                kind="database",
                permanent=False,
                retry_after_s=1.0,
            )
        return failure_of(exc)

    async def settle(
        self, flight: InFlight, outcome: Outcome, jlog: logging.LoggerAdapter[Any]
    ) -> InFlight | None:
        """Write the outcome, retrying through connection errors until the lease would
        have expired anyway (after that the sweep owns the job). Returns the stage's next
        job when the completion leased one."""
        st = self.state
        deadline = flight.renewed_at + st.config.lease_s
        reconnect = Reconnect(max_s=2.0)
        while True:
            try:
                return await self.settler.write(flight, outcome, jlog)
            except Exception as exc:
                if is_storage_full(exc) and not isinstance(outcome, Failure):
                    # Its output does not fit: hand the job back instead (not counted).
                    jlog.warning("storage full, output not written: %s", one_line(str(exc)))
                    metrics.STORAGE_FULL.labels(flight.stage.name, "settle").inc()
                    outcome = storage_full(exc)
                elif is_storage_full(exc) or isinstance(exc, CONNECTION_ERRORS):
                    await st.db_error("settle", exc)
                else:
                    raise
                # Once stopping, the grace period bounds the wait (Ctrl-C during an
                # outage must end).
                if st.stopped_at is not None:
                    deadline = min(deadline, st.stopped_at + st.config.grace_s)
                if st.clock.monotonic() + reconnect.first_s >= deadline:
                    jlog.warning(
                        "could not record the outcome (database unreachable) before the "
                        "lease or the grace period ran out; "
                        "the sweep will requeue the job"
                    )
                    return None
                await anyio.sleep(reconnect.next_s())
