"""The stage worker: claims jobs of its stages into free slots, runs them, settles them.

One process runs one :class:`Worker`. Per stage it has one claim loop that leases no more
jobs than that stage has free slots; each job runs in its own cancel scope. Side tasks —
LISTEN/NOTIFY wake-ups, the batched heartbeat, the rescuer's sweep, signal handling —
belong to one anyio task group, so if one of them dies the worker stops instead of
limping on. Outcome writes run shielded from cancellation and are fenced by the job's
lease token: a worker that lost its lease commits nothing.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

import anyio
import asyncpg
import msgspec

from runtime import metrics
from runtime.backoff import Reconnect, retry_delay_s
from runtime.clock import Clock
from runtime.completer import Completer
from runtime.dberrors import CONNECTION_ERRORS, is_storage_full
from runtime.errors import (
    ConfigurationError,
    LeaseLost,
    ProviderUnavailable,
    RateLimited,
    StageError,
    StorageFull,
    TransientError,
    one_line,
)
from runtime.identity import new_worker_id
from runtime.models import Failure, Job, JobState
from runtime.provider_gate import Providers
from runtime.providers import SESSION_SETTINGS, CircuitConfig, by_stage
from runtime.repository import Claim, Deferral, JobRepository, Pool, Rescued
from runtime.rescuer import Rescuer, RescuerConfig
from runtime.stage import DbConn, Pipeline, Stage, Writer
from runtime.status import overview

log = logging.getLogger(__name__)

CHANNEL = "ragline_jobs"
#: Payload on CHANNEL when a worker starts: the others re-learn who serves which stage.
JOINED = "+worker"
#: Payload prefix on CHANNEL when a provider's circuit changes (runtime/providers.py).
PROVIDER_PREFIX = "provider:"
#: Free slots reported for a stage no other worker serves: this worker takes every new
#: job of it, so a completion never NOTIFYs for it.
ALL_OURS = 2**31 - 1
DEFAULT_LEASE_S = 60.0
DEFAULT_POLL_S = 2.0
DEFAULT_GRACE_S = 10.0
#: Transient failures retry for this long (from the first of a run), not a count.
DEFAULT_RETRY_FOR_S = 24 * 3600.0
#: While the database is unreachable, each place logs it at most once this often.
DB_LOG_EVERY_S = 5.0


class WorkerConfig(msgspec.Struct, frozen=True, kw_only=True):
    stages: tuple[str, ...]
    concurrency: Mapping[str, int]
    lease_s: float = DEFAULT_LEASE_S
    #: 0 means lease_s / 3.
    heartbeat_s: float = 0.0
    poll_s: float = DEFAULT_POLL_S
    grace_s: float = DEFAULT_GRACE_S
    retry_base_s: float = 2.0
    retry_cap_s: float = 300.0
    retry_for_s: float = DEFAULT_RETRY_FOR_S
    circuit: CircuitConfig = msgspec.field(default_factory=CircuitConfig)
    rescue_every_s: float = 5.0
    exit_when_idle: bool = False
    handle_signals: bool = False
    listen: bool = True
    #: Refresh the queue-depth gauges every this many seconds (0: off).
    gauges_every_s: float = 0.0

    def __post_init__(self) -> None:
        if not self.stages:
            raise ConfigurationError("a worker needs at least one stage")
        for stage in self.stages:
            if self.concurrency.get(stage, 0) < 1:
                raise ConfigurationError(f"concurrency of stage {stage!r} must be >= 1")
        if self.lease_s <= 0 or self.poll_s <= 0 or self.grace_s < 0:
            raise ConfigurationError("lease_s and poll_s must be > 0, grace_s >= 0")
        if self.retry_for_s < 0:
            raise ConfigurationError("retry_for_s must be >= 0")
        if self.heartbeat_s and self.heartbeat_s >= self.lease_s:
            raise ConfigurationError(
                f"heartbeat_s (RAGLINE_HEARTBEAT_S, {self.heartbeat_s:g}) must be shorter "
                f"than lease_s (RAGLINE_LEASE_S, {self.lease_s:g})"
            )

    @property
    def heartbeat_every_s(self) -> float:
        return self.heartbeat_s or self.lease_s / 3


#: The kind of an unclassified exception (a bug, a library error): counted in attempts.
UNCLASSIFIED = "error"
#: A job handed back because storage was full waits at least this long: space rarely
#: comes back within seconds, and every retry would fail the same way meanwhile.
STORAGE_FULL_RETRY_S = 15.0


class Success(msgspec.Struct, frozen=True):
    output: Any


class Lost(msgspec.Struct, frozen=True):
    pass


class Shutdown(msgspec.Struct, frozen=True):
    pass


Outcome = Success | Failure | Lost | Shutdown


class InFlight:
    """A running job: its cancel scope and when its lease was last confirmed."""

    def __init__(self, job: Job, stage: Stage) -> None:
        self.job = job
        self.stage = stage
        self.scope = anyio.CancelScope()
        self.renewed_at = time.monotonic()
        self.started_at = self.renewed_at
        self.lost = False
        #: process() returned; the outcome is being written (its lease is still renewed).
        self.settling = False
        #: The attempt checkpointed something: a failure now does not count as an attempt.
        self.progressed = False

    def lose(self) -> None:
        self.lost = True
        self.scope.cancel()


class Context:
    """The :class:`runtime.stage.JobContext` a stage's ``process`` gets."""

    def __init__(
        self,
        job: Job,
        repo: JobRepository,
        providers: Providers | None = None,
        flight: InFlight | None = None,
    ) -> None:
        self._job = job
        self._repo = repo
        self._providers = providers
        self._flight = flight

    @property
    def job(self) -> Job:
        return self._job

    @property
    def pool(self) -> Pool:
        return self._repo.pool

    async def checkpoint(self, write: Writer) -> None:
        async with self.pool.acquire() as conn, conn.transaction():
            if not await self._repo.check_lease(conn, self._job):
                raise LeaseLost()
            await write(conn)
        if self._flight is not None:
            self._flight.progressed = True

    def calling(
        self, provider: str, *, tokens: int = 0
    ) -> contextlib.AbstractAsyncContextManager[None]:
        if self._providers is None:
            return contextlib.nullcontext()
        return self._providers.call(provider, tokens=tokens)


def storage_full(exc: BaseException) -> Failure:
    return Failure(
        message=one_line(f"storage full: {type(exc).__name__}: {exc}"),
        kind=StorageFull.kind,
        permanent=False,
        retry_after_s=STORAGE_FULL_RETRY_S,
    )


def failure_of(exc: BaseException) -> Failure:
    """Classify an exception from a stage: permanent, transient, or rate-limited."""
    if is_storage_full(exc) and not isinstance(exc, StageError):
        return storage_full(exc)
    if isinstance(exc, StageError):
        retry_after = exc.retry_after_s if isinstance(exc, TransientError) else None
        return Failure(
            message=one_line(exc.message or type(exc).__name__),
            kind=exc.kind,
            permanent=not isinstance(exc, TransientError),
            retry_after_s=retry_after,
        )
    if isinstance(exc, asyncpg.DataError):
        # Bad data for a column (e.g. invalid text): the same input fails the same way.
        return Failure(
            message=one_line(f"{type(exc).__name__}: {exc}"), kind="invalid_data", permanent=True
        )
    # Anything unclassified (a bug, a library error) gets retried within max_attempts;
    # the message keeps the type so the person reading it can tell.
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return Failure(message=one_line(text), kind="error", permanent=False)


class Worker:
    """Runs the stages of ``pipeline`` named in ``config.stages``."""

    def __init__(
        self,
        pipeline: Pipeline,
        dsn: str,
        config: WorkerConfig,
        *,
        clock: Clock | None = None,
        worker_id: str | None = None,
    ) -> None:
        for name in config.stages:
            pipeline.stage(name)  # raises on an unknown stage
        self.pipeline = pipeline
        self.dsn = dsn
        self.config = config
        self.clock = clock or Clock()
        self.id = worker_id or new_worker_id()
        self.inflight: dict[int, InFlight] = {}
        self.running = dict.fromkeys(config.stages, 0)
        self._wake = {s: anyio.Event() for s in config.stages}
        self._stopping = anyio.Event()
        self._drained = anyio.Event()
        self._repo: JobRepository | None = None
        self._completer: Completer | None = None
        self.providers: Providers | None = None
        #: Stages other live workers serve; None (unknown) counts as all of them.
        self._peer_stages: set[str] | None = None
        self._db_logged: dict[str, float] = {}
        self._stopped_at: float | None = None
        self.log = logging.LoggerAdapter(log, {"worker": self.id})

    @property
    def repo(self) -> JobRepository:
        if self._repo is None:
            raise RuntimeError("worker is not running")
        return self._repo

    def stop(self) -> None:
        """Stop claiming; in-flight jobs get ``grace_s`` to finish, then are released."""
        if self._stopped_at is None:
            self._stopped_at = time.monotonic()
        self._stopping.set()
        for event in self._wake.values():
            event.set()

    def cancel_inflight(self) -> None:
        for flight in list(self.inflight.values()):
            flight.scope.cancel()

    async def run(self) -> None:
        """Work until stopped (signal, :meth:`stop`, or idle with ``exit_when_idle``)."""
        specs = by_stage(self.pipeline.stage(n) for n in self.config.stages)
        async with (
            self._pool() as pool,
            self._pool(size=2, settings=SESSION_SETTINGS) as provider_pool,
            self.pipeline.running(),
        ):
            self._repo = JobRepository(pool)
            self.providers = Providers(provider_pool, self.id, specs, self.config.circuit)
            self._completer = Completer(
                self._repo, self.id, self.config.lease_s, self.clock, own_free=self._free_slots
            )
            await self._register()
            self.log.info("worker started: stages %s", ",".join(self.config.stages))
            try:
                async with anyio.create_task_group() as side:
                    self._start_side_tasks(side)
                    await self._work()
                    side.cancel_scope.cancel()
            finally:
                with anyio.CancelScope(shield=True), contextlib.suppress(*CONNECTION_ERRORS):
                    await self.repo.unregister_worker(self.id)
                self.log.info("worker stopped")

    @contextlib.asynccontextmanager
    async def _pool(
        self, size: int = 0, settings: Mapping[str, str] | None = None
    ) -> AsyncIterator[Pool]:
        size = size or sum(self.config.concurrency[s] for s in self.config.stages) + 3
        # min_size=0: nothing connects eagerly, so a worker starts while the database
        # is still down and connects when it comes back.
        pool = await asyncpg.create_pool(
            self.dsn,
            min_size=0,
            max_size=size,
            reset=_keep_session,
            # The engine's queries are written to plan well generically (schema/queries/
            # stage_jobs.sql); re-planning the hot statement per call cost more than
            # running it (0.4 ms of a 0.5 ms hop).
            server_settings={"plan_cache_mode": "force_generic_plan", **(settings or {})},
        )
        try:
            yield pool
        finally:
            with anyio.CancelScope(shield=True):
                await pool.close()

    async def _register(self) -> None:
        reconnect = Reconnect()
        while not self._stopping.is_set():
            try:
                self._peer_stages = await self.repo.register_worker(self.id, self.config.stages)
                await self.repo.announce_worker(CHANNEL, JOINED)
                if self.providers is not None and self.providers.active:
                    await self.providers.register()
                return
            except CONNECTION_ERRORS as exc:
                await self._db_error("register", exc)
                await anyio.sleep(reconnect.next_s())

    def _start_side_tasks(self, side: anyio.abc.TaskGroup) -> None:
        rescuer = Rescuer(
            self.repo,
            RescuerConfig(interval_s=self.config.rescue_every_s),
            clock=self.clock,
            on_failed=self._rescued_failed,
        )
        side.start_soon(rescuer.run)
        if self.providers is not None and self.providers.active:
            side.start_soon(self._providers_loop)
        if self._completer is not None:
            side.start_soon(self._completer.run)
        side.start_soon(self._heartbeat_loop)
        if self.config.listen:
            side.start_soon(self._listen_loop)
        if self.config.handle_signals:
            side.start_soon(self._signal_loop)
        if self.config.gauges_every_s:
            side.start_soon(self._gauges_loop)

    async def _work(self) -> None:
        async with anyio.create_task_group() as jobs:
            async with anyio.create_task_group() as loops:
                for name in self.config.stages:
                    loops.start_soon(self._claim_loop, self.pipeline.stage(name), jobs)
                if self.config.exit_when_idle:
                    loops.start_soon(self._idle_watch)
            await self._drain()

    async def _drain(self) -> None:
        """After claiming stopped: let jobs finish within the grace period, then cancel."""
        if self.inflight:
            self.log.info(
                "stopping: %d job(s) in flight, grace %.0fs",
                len(self.inflight),
                self.config.grace_s,
            )
            with anyio.move_on_after(self.config.grace_s):
                while self.inflight:
                    self._drained = anyio.Event()
                    await self._drained.wait()
        self.cancel_inflight()

    # -- claiming ---------------------------------------------------------------------

    async def _claim_loop(self, stage: Stage, jobs: anyio.abc.TaskGroup) -> None:
        limit = self.config.concurrency[stage.name]
        reconnect = Reconnect()
        while not self._stopping.is_set():
            # Replace the wake event before claiming, so a NOTIFY that lands during the
            # claim sets the new event and is not lost.
            wake = self._wake[stage.name] = anyio.Event()
            free = limit - self.running[stage.name]
            want = self._claimable(stage.name, free)
            claimed: list[Job] = []
            if want > 0:
                try:
                    claimed = await self.repo.claim(
                        stage.name, self.id, want, self.config.lease_s, self.clock.db_now()
                    )
                    reconnect.reset()
                except CONNECTION_ERRORS as exc:
                    await self._db_error("claim", exc)
                    await anyio.sleep(reconnect.next_s())
                    continue
            for job in claimed:
                self.running[stage.name] += 1
                jobs.start_soon(self._run_slot, self._track(job, stage))
            if not claimed or len(claimed) < free:
                with anyio.move_on_after(self._claim_wait_s(stage.name)):
                    await wake.wait()

    def _claimable(self, stage: str, free: int) -> int:
        """Free slots to fill now: none while a provider the stage calls has its circuit
        open (its jobs stay queued), one when a probe is due."""
        if free <= 0 or self.providers is None:
            return free
        return self.providers.claimable(stage, free)

    def _claim_wait_s(self, stage: str) -> float:
        if self.providers is not None and self.providers.blocked(stage):
            return self.providers.wait_s(stage, self.config.poll_s)
        return self.config.poll_s

    async def _idle_watch(self) -> None:
        while not self._stopping.is_set():
            await anyio.sleep(min(self.config.poll_s, 0.25))
            if self.inflight:
                continue
            try:
                live = await self.repo.count_live(self.config.stages)
            except CONNECTION_ERRORS as exc:
                await self._db_error("idle check", exc)
                continue
            if live == 0 and not self.inflight:
                self.log.info("no work left for stages %s; exiting", ",".join(self.config.stages))
                self.stop()

    # -- running a job ----------------------------------------------------------------

    def _track(self, job: Job, stage: Stage) -> InFlight:
        """Register a job this worker just leased, so heartbeats renew it from now on."""
        flight = InFlight(job, stage)
        self.inflight[job.id] = flight
        metrics.CLAIMED.labels(stage.name).inc()
        return flight

    async def _run_slot(self, flight: InFlight) -> None:
        """One slot of a stage: run jobs until a completion leases no next one."""
        name = flight.stage.name
        current: InFlight | None = flight
        try:
            while current is not None:
                current = await self._run_job(current)
        finally:
            self.running[name] -= 1
            self._wake[name].set()
            self._drained.set()

    async def _run_job(self, flight: InFlight) -> InFlight | None:
        """Run one job and record its outcome; returns the next job of its stage if the
        completion leased one."""
        job = flight.job
        jlog = self._job_log(job)
        jlog.debug("claimed (attempt %d/%d)", job.attempts, job.max_attempts)
        try:
            outcome = await self._execute(flight)
            flight.settling = True
            following = None
            with anyio.CancelScope(shield=True):
                following = await self._settle(flight, outcome, jlog)
            return following
        finally:
            # The sweep may have requeued this job and this worker claimed it again: the
            # entry then belongs to the new claim, which removes it itself.
            if self.inflight.get(job.id) is flight:
                del self.inflight[job.id]

    async def _execute(self, flight: InFlight) -> Outcome:
        with flight.scope:
            try:
                output = await flight.stage.process(
                    Context(flight.job, self.repo, self.providers, flight)
                )
                return Success(output)
            except LeaseLost:
                return Lost()
            except Exception as exc:
                return await self._classify(exc)
        return Lost() if flight.lost else Shutdown()

    async def _classify(self, exc: Exception) -> Failure:
        if is_storage_full(exc):
            return failure_of(exc)
        if isinstance(exc, CONNECTION_ERRORS) and not isinstance(exc, StageError):
            # Our database blinked: not the document's fault. Hand the job back.
            await self._db_error("stage", exc)
            return Failure(
                message=one_line(f"database: {exc}"),
                kind="database",
                permanent=False,
                retry_after_s=1.0,
            )
        return failure_of(exc)

    async def _settle(
        self, flight: InFlight, outcome: Outcome, jlog: logging.LoggerAdapter[Any]
    ) -> InFlight | None:
        """Write the outcome, retrying through connection errors until the lease would
        have expired anyway (after that the sweep owns the job). Returns the stage's next
        job when the completion leased one."""
        deadline = flight.renewed_at + self.config.lease_s
        reconnect = Reconnect(max_s=2.0)
        while True:
            try:
                return await self._write_outcome(flight, outcome, jlog)
            except Exception as exc:
                if is_storage_full(exc) and not isinstance(outcome, Failure):
                    # Its output does not fit: hand the job back instead (not counted).
                    jlog.warning("storage full, output not written: %s", one_line(str(exc)))
                    metrics.STORAGE_FULL.labels(flight.stage.name, "settle").inc()
                    outcome = storage_full(exc)
                elif is_storage_full(exc) or isinstance(exc, CONNECTION_ERRORS):
                    await self._db_error("settle", exc)
                else:
                    raise
                # Once stopping, the grace period bounds the wait (Ctrl-C during an
                # outage must end).
                if self._stopped_at is not None:
                    deadline = min(deadline, self._stopped_at + self.config.grace_s)
                if time.monotonic() + reconnect.first_s >= deadline:
                    jlog.warning(
                        "could not record the outcome (database unreachable) before the "
                        "lease or the grace period ran out; "
                        "the sweep will requeue the job"
                    )
                    return None
                await anyio.sleep(reconnect.next_s())

    async def _write_outcome(
        self, flight: InFlight, outcome: Outcome, jlog: logging.LoggerAdapter[Any]
    ) -> InFlight | None:
        job, name = flight.job, flight.stage.name
        elapsed = time.monotonic() - flight.started_at
        following = None
        if isinstance(outcome, Success):
            following = await self._complete(flight, outcome.output, jlog)
        elif isinstance(outcome, Failure):
            await self._fail(flight, outcome, jlog)
        elif isinstance(outcome, Shutdown):
            released = await self.repo.release(job, 0.0, None, None, self.clock.db_now())
            metrics.RELEASED.labels(name).inc()
            jlog.info("released on shutdown" if released else "shutdown: lease already gone")
        else:
            metrics.LEASE_LOST.labels(name).inc()
            jlog.warning("lease lost; abandoned the job without committing")
        metrics.DURATION.labels(name, type(outcome).__name__.lower()).observe(elapsed)
        return following

    async def _complete(
        self, flight: InFlight, output: Any, jlog: logging.LoggerAdapter[Any]
    ) -> InFlight | None:
        """Complete the job; unless stopping, lease the stage's next job in the same
        commit, so a busy slot moves on without a separate claim."""
        job, stage = flight.job, flight.stage
        nxt = self.pipeline.next_stage(stage.name)
        want_next = not self._stopping.is_set() and not (
            self.providers is not None and self.providers.blocked(stage.name)
        )
        following: Job | None = None
        try:
            if output is None and self._completer is not None:
                # Nothing to write: group-commit it with the other jobs finishing now.
                held, following = await self._completer.complete(job, nxt, want_next)
            else:

                async def write(conn: DbConn) -> None:
                    await stage.write(conn, job, output)

                claim = Claim(self.id, self.config.lease_s, {stage.name: 1}) if want_next else None
                settled = await self.repo.settle(
                    [(job, nxt)],
                    claim,
                    None if output is None else write,
                    self.clock.db_now(),
                    own_free=self._free_slots(),
                )
                held = job.id in settled.held
                following = settled.claimed[0] if settled.claimed else None
        except CONNECTION_ERRORS:
            raise
        except Exception as exc:  # the stage's writer failed: that is a failed attempt
            await self._fail(flight, failure_of(exc), jlog)
            return None
        if held:
            metrics.SUCCEEDED.labels(stage.name).inc()
            self._wake_next(stage.name)
            jlog.debug("succeeded in %.3fs", time.monotonic() - flight.started_at)
        else:
            metrics.LEASE_LOST.labels(stage.name).inc()
            jlog.warning("lease lost before commit; nothing written")
        return self._track(following, stage) if following is not None else None

    async def _fail(
        self, flight: InFlight, failure: Failure, jlog: logging.LoggerAdapter[Any]
    ) -> None:
        if not failure.permanent and (failure.kind != UNCLASSIFIED or flight.progressed):
            await self._defer(flight, failure, jlog)
            return
        job, name = flight.job, flight.stage.name
        delay = retry_delay_s(
            job.attempts,
            base_s=self.config.retry_base_s,
            cap_s=self.config.retry_cap_s,
            retry_after_s=failure.retry_after_s,
        )
        state = await self.repo.retry_or_fail(job, failure, delay, self.clock.db_now())
        if state is JobState.FAILED:
            metrics.FAILED.labels(name, failure.kind).inc()
            jlog.error("failed: %s", failure.message)
            await self._undo(flight, jlog)
        elif state is JobState.QUEUED:
            metrics.RETRIED.labels(name, failure.kind).inc()
            jlog.warning(
                "attempt %d failed, retrying in %.1fs: %s", job.attempts, delay, failure.message
            )
        else:
            metrics.LEASE_LOST.labels(name).inc()
            jlog.warning("lease lost before recording failure: %s", failure.message)

    async def _defer(
        self, flight: InFlight, failure: Failure, jlog: logging.LoggerAdapter[Any]
    ) -> None:
        """A transient failure, or any failure of an attempt that made progress: hand the
        job back without counting the attempt; the retry budget is time, not a count."""
        name = flight.stage.name
        floor_s = failure.retry_after_s or 0.0
        if failure.kind == StorageFull.kind:  # scales with the retry base (tests)
            floor_s = min(STORAGE_FULL_RETRY_S, 8 * self.config.retry_base_s)
            metrics.STORAGE_FULL.labels(name, "job").inc()
        how = Deferral(
            floor_s=floor_s,
            # An open circuit already holds the stage's claims: no backoff on top.
            base_s=0.0 if failure.kind == ProviderUnavailable.kind else self.config.retry_base_s,
            cap_s=self.config.retry_cap_s,
            retry_for_s=self.config.retry_for_s,
            progressed=flight.progressed,
        )
        state = await self.repo.defer(
            flight.job, failure.message, failure.kind, how, self.clock.db_now()
        )
        if state is JobState.FAILED:
            metrics.FAILED.labels(name, failure.kind).inc()
            jlog.error("failed: retried for %.0fs: %s", self.config.retry_for_s, failure.message)
            await self._undo(flight, jlog)
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
        else:
            metrics.LEASE_LOST.labels(name).inc()
            jlog.warning("lease lost before recording failure: %s", failure.message)

    async def _rescued_failed(self, rescued: Rescued) -> None:
        """The sweep failed a job whose attempts ran out on lost leases: undo its side
        effects as a failure seen by its own worker would."""
        try:
            stage = self.pipeline.stage(rescued.stage)
            await stage.on_failed(rescued.as_job())
        except Exception as exc:  # best effort: verify --repair reconciles what is left
            self.log.warning(
                "could not undo side effects of job %d (%s): %s",
                rescued.id,
                rescued.stage,
                one_line(str(exc)),
            )

    async def _undo(self, flight: InFlight, jlog: logging.LoggerAdapter[Any]) -> None:
        try:
            await flight.stage.on_failed(flight.job)
        except Exception as exc:  # best effort: verify --repair reconciles what is left
            jlog.warning("could not undo side effects of the failed job: %s", one_line(str(exc)))

    # -- side tasks -------------------------------------------------------------------

    async def _heartbeat_loop(self) -> None:
        every = self.config.heartbeat_every_s
        while True:
            await anyio.sleep(every)
            await self.heartbeat_once()

    async def heartbeat_once(self) -> None:
        """Renew every held lease in one statement; cancel the jobs whose lease is gone."""
        flights = [f for f in self.inflight.values() if not f.lost]
        try:
            self._peer_stages = await self.repo.register_worker(self.id, self.config.stages)
            if not flights:
                return
            asked_at = time.monotonic()
            held = await self.repo.heartbeat(
                [(f.job.id, f.job.lease_token) for f in flights],
                self.config.lease_s,
                self.clock.db_now(),
            )
        except CONNECTION_ERRORS as exc:
            await self._db_error("heartbeat", exc)
            self._lose_unconfirmed(flights)
            return
        for flight in flights:
            if flight.job.id in held:
                flight.renewed_at = asked_at
            elif not flight.settling:  # a settling job may just have completed
                self._job_log(flight.job).warning("lease lost (heartbeat); cancelling the job")
                flight.lose()

    def _lose_unconfirmed(self, flights: list[InFlight]) -> None:
        # We cannot reach the database, so we cannot know; assume a lease lost before the
        # next heartbeat could renew it (another worker may already hold it by then).
        horizon = time.monotonic() + self.config.heartbeat_every_s
        for flight in flights:
            if flight.renewed_at + self.config.lease_s <= horizon and not flight.settling:
                self._job_log(flight.job).warning("lease cannot be renewed; cancelling the job")
                flight.lose()

    async def _listen_loop(self) -> None:
        reconnect = Reconnect()
        while True:
            try:
                await self._listen_once(reconnect)
            except CONNECTION_ERRORS as exc:
                await self._db_error("listen", exc)
            await anyio.sleep(reconnect.next_s())

    async def _listen_once(self, reconnect: Reconnect) -> None:
        conn = await asyncpg.connect(self.dsn)
        try:
            closed = anyio.Event()
            conn.add_termination_listener(lambda _c: closed.set())
            await conn.add_listener(CHANNEL, self._on_notify)
            reconnect.reset()
            # Notifications may have been missed while we were not listening.
            for event in self._wake.values():
                event.set()
            while not conn.is_closed():
                with anyio.move_on_after(30):
                    await closed.wait()
                if not conn.is_closed():
                    await conn.execute("SELECT 1")  # keepalive: notices a dead socket
        finally:
            with anyio.CancelScope(shield=True), contextlib.suppress(*CONNECTION_ERRORS):
                await conn.close(timeout=2)

    def _free_slots(self) -> dict[str, int]:
        """How many new jobs per stage this worker takes itself when a completion enqueues
        them (:meth:`_wake_next`), so they need no NOTIFY: its free slots, or all of them
        for a stage no other worker serves (its busy slots get to them, and nobody else
        could); none while stopping, when it claims nothing."""
        if self._stopping.is_set():
            return {}
        peers = self._peer_stages
        limits = self.config.concurrency
        free: dict[str, int] = {}
        for stage in self.config.stages:
            if peers is not None and stage not in peers:
                free[stage] = ALL_OURS
            elif (n := limits[stage] - self.running[stage]) > 0:
                free[stage] = n
        return free

    def _wake_next(self, stage: str) -> None:
        """The next stage's job is committed: wake our own loop for it without waiting for
        a NOTIFY (which the database may skip when that queue was not empty)."""
        nxt = self.pipeline.next_stage(stage)
        event = self._wake.get(nxt) if nxt else None
        if event is not None:
            event.set()

    async def _providers_loop(self) -> None:
        assert self.providers is not None
        while True:
            try:
                await self.providers.run(self.config.poll_s, self._wake_all)
            except CONNECTION_ERRORS as exc:
                await self._db_error("providers", exc)
                await anyio.sleep(self.config.poll_s)

    def _wake_all(self) -> None:
        for event in self._wake.values():
            event.set()

    def _on_notify(self, _conn: object, _pid: int, _channel: str, payload: object) -> None:
        if isinstance(payload, str) and payload.startswith(PROVIDER_PREFIX):
            if self.providers is not None:
                self.providers.changed()
            return
        if payload == JOINED:
            self._peer_stages = None  # NOTIFY for every stage until the next heartbeat
            return
        event = self._wake.get(str(payload))
        if event is not None:
            event.set()

    async def _gauges_loop(self) -> None:
        while True:
            try:
                rows = await overview(self.repo.pool, self.config.stages, {})
            except CONNECTION_ERRORS as exc:
                await self._db_error("gauges", exc)
            else:
                for row in rows:
                    metrics.QUEUED.labels(row.stage).set(row.queued)
                    metrics.RUNNING.labels(row.stage).set(row.running)
                    metrics.OLDEST_QUEUED.labels(row.stage).set(row.oldest_queued_s)
            await anyio.sleep(self.config.gauges_every_s)

    async def _signal_loop(self) -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for signum in signals:
                if self._stopping.is_set():
                    self.log.warning("second %s: cancelling jobs now", signal.Signals(signum).name)
                    self.cancel_inflight()
                else:
                    self.log.info("%s: stopping", signal.Signals(signum).name)
                    self.stop()

    # -- helpers ----------------------------------------------------------------------

    def _job_log(self, job: Job) -> logging.LoggerAdapter[Any]:
        return logging.LoggerAdapter(
            log,
            {
                "worker": self.id,
                "job": job.id,
                "stage": job.stage,
                "document": job.document_id,
                "attempt": job.attempts,
            },
        )

    async def _db_error(self, where: str, exc: BaseException) -> None:
        metrics.DB_ERRORS.labels(where).inc()
        if self._repo is not None:
            # Connections opened before the failure may be half-dead: replace them all on
            # their next use instead of finding out one query at a time.
            await self._repo.pool.expire_connections()
        # One line per place per few seconds: an outage must not flood the log.
        now = time.monotonic()
        quiet = now - self._db_logged.get(where, -DB_LOG_EVERY_S) < DB_LOG_EVERY_S
        if not quiet:
            self._db_logged[where] = now
        self.log.log(
            logging.DEBUG if quiet else logging.WARNING,
            "database unavailable (%s): %s",
            where,
            one_line(f"{type(exc).__name__}: {exc}"),
        )


async def _keep_session(conn: asyncpg.Connection[Any]) -> None:
    """Skip asyncpg's per-release RESET ALL / UNLISTEN round trip (a second round trip on
    every query): the engine leaves no session state on pooled connections (LISTEN has its
    own connection), and asyncpg still rolls back a transaction left open."""
