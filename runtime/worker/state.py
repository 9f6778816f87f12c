"""What a worker's roles share: its slots, the jobs in flight, the wake-up events, the
stop signal, and the one place that logs database outages."""

from __future__ import annotations

import logging
from typing import Any

import anyio
from opentelemetry.trace import Tracer

from runtime.errors import one_line
from runtime.jobs.clock import Clock
from runtime.jobs.postgres import Pool
from runtime.jobs.store import JobStore
from runtime.models import Job
from runtime.process import metrics
from runtime.process.tracing import TRACER, JobSpans
from runtime.providers.gate import Providers
from runtime.stage import Pipeline, Stage, holds_entry
from runtime.worker.config import WorkerConfig
from runtime.worker.inflight import Context, InFlight

log = logging.getLogger("runtime.worker.worker")

#: Free slots reported for a stage no other worker serves: this worker takes every new
#: job of it, so a completion never NOTIFYs for it.
ALL_OURS = 2**31 - 1
#: A stage's claims pause this long after a job of it snoozed, doubling with each further
#: snooze up to SNOOZE_PAUSE_MAX_S, until one of its jobs succeeds here.
SNOOZE_PAUSE_S = 0.05
SNOOZE_PAUSE_MAX_S = 1.0
#: While the database is unreachable, each place logs it at most once this often.
DB_LOG_EVERY_S = 5.0


class WorkerState:
    """The state of one worker process, shared by its roles (producer, executor,
    heartbeat, listener). The store is attached while the worker runs."""

    def __init__(
        self,
        pipeline: Pipeline,
        config: WorkerConfig,
        clock: Clock,
        worker_id: str,
        tracer: Tracer = TRACER,
    ) -> None:
        self.pipeline = pipeline
        self.config = config
        self.clock = clock
        self.id = worker_id
        self.inflight: dict[int, InFlight] = {}
        self.running = dict.fromkeys(config.stages, 0)
        self.wake = {s: anyio.Event() for s in config.stages}
        self.stopping = anyio.Event()
        self.drained = anyio.Event()
        #: Set once LISTEN is first in place.
        self.listening = anyio.Event()
        self._store: JobStore | None = None
        #: The pool stages read through (None on an in-memory store).
        self.pool: Pool | None = None
        self.providers: Providers | None = None
        #: Stages other live workers serve; None (unknown) counts as all of them.
        self.peer_stages: set[str] | None = None
        self.stopped_at: float | None = None
        self._db_logged: dict[str, float] = {}
        #: Per stage: when its claims resume (monotonic) and its last pause.
        self._paused_until: dict[str, float] = {}
        self._pause_s: dict[str, float] = {}
        self._entry = pipeline.names[0]
        self._holding = tuple(
            s for s in config.stages if s != self._entry and holds_entry(pipeline.stage(s))
        )
        self.log = logging.LoggerAdapter(log, {"worker": self.id})
        self.spans = JobSpans(tracer if config.trace else None, worker_id)

    @property
    def store(self) -> JobStore:
        if self._store is None:
            raise RuntimeError("worker is not running")
        return self._store

    def attach(self, store: JobStore, pool: Pool | None, providers: Providers | None) -> None:
        self._store, self.pool, self.providers = store, pool, providers

    def stop(self) -> None:
        if self.stopped_at is None:
            self.stopped_at = self.clock.monotonic()
        self.stopping.set()
        self.wake_all()

    def cancel_inflight(self) -> None:
        for flight in list(self.inflight.values()):
            flight.scope.cancel()

    def wake_all(self) -> None:
        for event in self.wake.values():
            event.set()

    def wake_next(self, stage: str) -> None:
        """The next stage's job is committed: wake our own loop for it without waiting for
        a NOTIFY (which the database may skip when that queue was not empty)."""
        nxt = self.pipeline.next_stage(stage)
        event = self.wake.get(nxt) if nxt else None
        if event is not None:
            event.set()

    def held_back(self, stage: str) -> bool:
        """``stage`` is the pipeline's first, another live worker serves it too, and one
        of this worker's ``holds_entry`` stages has every slot busy: lease none of its
        jobs now (a slot freeing up wakes its claim loop, :meth:`wake_entry`)."""
        if stage != self._entry or not self._holding:
            return False
        # Alone with the first stage, there is nobody to leave new documents to.
        if self.peer_stages is not None and stage not in self.peer_stages:
            return False
        limits = self.config.concurrency
        return any(self.running[s] >= limits[s] for s in self._holding)

    def wake_entry(self) -> None:
        """A slot freed up: the first stage's claim loop may be held back no longer."""
        if self._holding and (event := self.wake.get(self._entry)) is not None:
            event.set()

    def pause(self, stage: str) -> float:
        """A job of ``stage`` snoozed: claim none of its jobs for a while; returns how long."""
        pause_s = min(2 * self._pause_s.get(stage, SNOOZE_PAUSE_S / 2), SNOOZE_PAUSE_MAX_S)
        self._pause_s[stage] = pause_s
        self._paused_until[stage] = self.clock.monotonic() + pause_s
        return pause_s

    def unpause(self, stage: str) -> None:
        """A job of ``stage`` succeeded here: claim again, and pause briefly at the next
        snooze."""
        self._pause_s.pop(stage, None)
        self._paused_until.pop(stage, None)

    def paused_s(self, stage: str) -> float:
        """How long ``stage``'s claims stay paused (0: not paused)."""
        return max(self._paused_until.get(stage, 0.0) - self.clock.monotonic(), 0.0)

    def free_slots(self) -> dict[str, int]:
        """How many new jobs per stage this worker takes itself when a completion enqueues
        them (:meth:`wake_next`), so they need no NOTIFY: its free slots, or all of them
        for a stage no other worker serves (its busy slots get to them, and nobody else
        could); none while stopping, when it claims nothing, nor for a paused stage."""
        if self.stopping.is_set():
            return {}
        peers = self.peer_stages
        limits = self.config.concurrency
        free: dict[str, int] = {}
        for stage in self.config.stages:
            if self.paused_s(stage) > 0:
                continue
            if peers is not None and stage not in peers:
                free[stage] = ALL_OURS
            elif (n := limits[stage] - self.running[stage]) > 0:
                free[stage] = n
        return free

    def track(self, job: Job, stage: Stage) -> InFlight:
        """Register a job this worker just leased, so heartbeats renew it from now on."""
        flight = InFlight(job, stage, self.clock.monotonic())
        self.inflight[job.id] = flight
        metrics.CLAIMED.labels(stage.name).inc()
        return flight

    def context(self, flight: InFlight) -> Context:
        return Context(
            flight.job, self.store, self.providers, flight, pool=self.pool, spans=self.spans
        )

    def job_log(self, job: Job) -> logging.LoggerAdapter[Any]:
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

    async def db_error(self, where: str, exc: BaseException) -> None:
        metrics.DB_ERRORS.labels(where).inc()
        if self._store is not None:
            # Connections opened before the failure may be half-dead: replace them all on
            # their next use instead of finding out one query at a time.
            await self._store.expire_connections()
        # One line per place per few seconds: an outage must not flood the log.
        now = self.clock.monotonic()
        quiet = now - self._db_logged.get(where, -DB_LOG_EVERY_S) < DB_LOG_EVERY_S
        if not quiet:
            self._db_logged[where] = now
        self.log.log(
            logging.DEBUG if quiet else logging.WARNING,
            "database unavailable (%s): %s",
            where,
            one_line(f"{type(exc).__name__}: {exc}"),
        )
