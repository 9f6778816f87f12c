"""The settler: writes what an attempt came to, fenced by the job's lease token.

A success completes the job (group-committed by runtime/worker/completer.py when it has no
output) and leases the stage's next job in the same commit; a failure is retried, deferred
(transient: not counted, within a time budget) or final, and a final one undoes the
stage's side effects. Each of these is recorded on the run's span too: its outcome as
``ragline.outcome``, a retry, a deferral, a snooze or a lost lease as an event."""

from __future__ import annotations

import logging
from typing import Any

from runtime.db.errors import CONNECTION_ERRORS
from runtime.errors import ProviderUnavailable, RateLimited, StorageFull, one_line
from runtime.jobs.store import Claim, Deferral, Release, Rescued
from runtime.models import Failure, Job, JobState
from runtime.process import metrics
from runtime.process.tracing import Value, annotate, event, failed
from runtime.providers.backoff import retry_delay_s
from runtime.stage import DbConn
from runtime.worker.completer import Completer
from runtime.worker.inflight import InFlight
from runtime.worker.outcome import (
    STORAGE_FULL_RETRY_S,
    UNCLASSIFIED,
    Outcome,
    Shutdown,
    Snoozed,
    Success,
    failure_of,
)
from runtime.worker.state import WorkerState

JobLog = logging.LoggerAdapter[Any]


def _marked(flight: InFlight, what: str, name: str | None = None, **values: Value | None) -> None:
    """Record on the run's span how it ended (``what``) and, given a ``name``, the event."""
    annotate(flight.span, {"outcome": what})
    if name is not None:
        event(flight.span, name, **values)


class Settler:
    def __init__(self, state: WorkerState, completer: Completer | None) -> None:
        self.state = state
        self.completer = completer

    async def write(self, flight: InFlight, outcome: Outcome, jlog: JobLog) -> InFlight | None:
        st = self.state
        job, name = flight.job, flight.stage.name
        elapsed = st.clock.monotonic() - flight.started_at
        following = None
        if isinstance(outcome, Success):
            following = await self.complete(flight, outcome.output, jlog)
        elif isinstance(outcome, Failure):
            await self.fail(flight, outcome, jlog)
        elif isinstance(outcome, Snoozed):
            await self.snooze(flight, outcome, jlog)
        elif isinstance(outcome, Shutdown):
            released = await st.store.release(job, now=st.clock.db_now())
            metrics.RELEASED.labels(name).inc()
            jlog.info("released on shutdown" if released else "shutdown: lease already gone")
            if released:
                _marked(flight, "released", "released")
            else:
                _marked(flight, "lost", "lease_lost", where="shutdown")
        else:
            metrics.LEASE_LOST.labels(name).inc()
            jlog.warning("lease lost; abandoned the job without committing")
            _marked(flight, "lost")
        metrics.DURATION.labels(name, type(outcome).__name__.lower()).observe(elapsed)
        return following

    async def complete(self, flight: InFlight, output: Any, jlog: JobLog) -> InFlight | None:
        """Complete the job; unless stopping, lease the stage's next job in the same
        commit, so a busy slot moves on without a separate claim."""
        st = self.state
        job, stage = flight.job, flight.stage
        nxt = st.pipeline.next_stage(stage.name)
        want_next = (
            not st.stopping.is_set()
            and not st.held_back(stage.name)
            and not (st.providers is not None and st.providers.blocked(stage.name))
        )
        following: Job | None = None
        try:
            if output is None and self.completer is not None:
                # Nothing to write: group-commit it with the other jobs finishing now.
                held, following = await self.completer.complete(job, nxt, want_next)
            else:

                async def write(conn: DbConn) -> None:
                    await stage.write(conn, job, output)

                claim = Claim(st.id, st.config.lease_s, {stage.name: 1}) if want_next else None
                settled = await st.store.settle(
                    [(job, nxt)],
                    claim,
                    None if output is None else write,
                    st.clock.db_now(),
                    own_free=st.free_slots(),
                )
                held = job.id in settled.held
                following = settled.claimed[0] if settled.claimed else None
        except CONNECTION_ERRORS:
            raise
        except Exception as exc:  # the stage's writer failed: that is a failed attempt
            await self.fail(flight, failure_of(exc), jlog)
            return None
        if held:
            st.unpause(stage.name)
            metrics.SUCCEEDED.labels(stage.name).inc()
            st.wake_next(stage.name)
            jlog.debug("succeeded in %.3fs", st.clock.monotonic() - flight.started_at)
            _marked(flight, "succeeded")
        else:
            metrics.LEASE_LOST.labels(stage.name).inc()
            jlog.warning("lease lost before commit; nothing written")
            _marked(flight, "lost", "lease_lost", where="commit")
        return st.track(following, stage) if following is not None else None

    async def snooze(self, flight: InFlight, snoozed: Snoozed, jlog: JobLog) -> None:
        """Hand the job back untried (the attempt not counted) for another worker to
        claim, and stop claiming the stage here for a while, so this worker does not
        claim and snooze the same jobs in a loop (the pause doubles while it lasts)."""
        st = self.state
        name = flight.stage.name
        # Paused before the release's NOTIFY wakes this worker's own claim loop.
        pause_s = st.pause(name)
        # Not an error: the job's last error and its kind stay as they were.
        how = Release(delay_s=snoozed.delay_s)
        if await st.store.release(flight.job, how, now=st.clock.db_now()):
            metrics.SNOOZED.labels(name).inc()
            jlog.debug("snoozed (claims paused %.2fs): %s", pause_s, snoozed.message)
            _marked(flight, "snoozed", "snoozed", delay_s=snoozed.delay_s, reason=snoozed.message)
        else:
            metrics.LEASE_LOST.labels(name).inc()
            jlog.warning("lease lost before snoozing: %s", snoozed.message)
            _marked(flight, "lost", "lease_lost", where="snooze")

    async def fail(self, flight: InFlight, failure: Failure, jlog: JobLog) -> None:
        if not failure.permanent and (failure.kind != UNCLASSIFIED or flight.progressed):
            await self.defer(flight, failure, jlog)
            return
        st = self.state
        job, name = flight.job, flight.stage.name
        delay = retry_delay_s(
            job.attempts,
            base_s=st.config.retry_base_s,
            cap_s=st.config.retry_cap_s,
            retry_after_s=failure.retry_after_s,
        )
        state = await st.store.retry_or_fail(job, failure, delay, st.clock.db_now())
        failed(flight.span, failure.message)
        said = {"error.kind": failure.kind, "error.message": failure.message}
        if state is JobState.FAILED:
            metrics.FAILED.labels(name, failure.kind).inc()
            jlog.error("failed: %s", failure.message)
            _marked(flight, "failed", "failed", **said)
            await self.undo(flight, jlog)
        elif state is JobState.QUEUED:
            metrics.RETRIED.labels(name, failure.kind).inc()
            jlog.warning(
                "attempt %d failed, retrying in %.1fs: %s", job.attempts, delay, failure.message
            )
            _marked(flight, "retry", "retry", **said, delay_s=delay, attempt=job.attempts)
        else:
            metrics.LEASE_LOST.labels(name).inc()
            jlog.warning("lease lost before recording failure: %s", failure.message)
            _marked(flight, "lost", "lease_lost", where="failure", **said)

    async def defer(self, flight: InFlight, failure: Failure, jlog: JobLog) -> None:
        """A transient failure, or any failure of an attempt that made progress: hand the
        job back without counting the attempt; the retry budget is time, not a count."""
        st = self.state
        name = flight.stage.name
        floor_s = failure.retry_after_s or 0.0
        if failure.kind == StorageFull.kind:  # scales with the retry base (tests)
            floor_s = min(STORAGE_FULL_RETRY_S, 8 * st.config.retry_base_s)
            metrics.STORAGE_FULL.labels(name, "job").inc()
        how = Deferral(
            floor_s=floor_s,
            # An open circuit already holds the stage's claims: no backoff on top.
            base_s=0.0 if failure.kind == ProviderUnavailable.kind else st.config.retry_base_s,
            cap_s=st.config.retry_cap_s,
            retry_for_s=st.config.retry_for_s,
            progressed=flight.progressed,
        )
        state = await st.store.defer(
            flight.job, failure.message, failure.kind, how, st.clock.db_now()
        )
        failed(flight.span, failure.message)
        said = {"error.kind": failure.kind, "error.message": failure.message}
        if state is JobState.FAILED:
            metrics.FAILED.labels(name, failure.kind).inc()
            jlog.error("failed: retried for %.0fs: %s", st.config.retry_for_s, failure.message)
            _marked(flight, "failed", "failed", **said)
            await self.undo(flight, jlog)
        elif state is JobState.QUEUED:
            counter = (
                metrics.RATE_LIMITED.labels(name)
                if failure.kind == RateLimited.kind
                else (metrics.RETRIED.labels(name, failure.kind))
            )
            counter.inc()
            level = logging.DEBUG if failure.kind == ProviderUnavailable.kind else logging.INFO
            level = logging.WARNING if failure.kind == StorageFull.kind else level
            jlog.log(level, "%s; retrying later (attempt not counted)", failure.message)
            _marked(flight, "deferred", "deferred", **said, floor_s=floor_s)
        else:
            metrics.LEASE_LOST.labels(name).inc()
            jlog.warning("lease lost before recording failure: %s", failure.message)
            _marked(flight, "lost", "lease_lost", where="failure", **said)

    async def rescued_failed(self, rescued: Rescued) -> None:
        """The sweep failed a job whose attempts ran out on lost leases: undo its side
        effects as a failure seen by its own worker would."""
        try:
            stage = self.state.pipeline.stage(rescued.stage)
            await stage.on_failed(rescued.as_job())
        except Exception as exc:  # best effort: verify --repair reconciles what is left
            self.state.log.warning(
                "could not undo side effects of job %d (%s): %s",
                rescued.id,
                rescued.stage,
                one_line(str(exc)),
            )

    async def undo(self, flight: InFlight, jlog: JobLog) -> None:
        try:
            await flight.stage.on_failed(flight.job)
        except Exception as exc:  # best effort: verify --repair reconciles what is left
            jlog.warning("could not undo side effects of the failed job: %s", one_line(str(exc)))
