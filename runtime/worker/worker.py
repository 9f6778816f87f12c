"""The stage worker: claims jobs of its stages into free slots, runs them, settles them.

One process runs one :class:`Worker`, composed of roles around a shared
:class:`runtime.worker.state.WorkerState` (docs/architecture.md, "The worker's roles"): the
settler writes each outcome shielded from cancellation and fenced by the lease token, and
the side tasks share one anyio task group, so if one dies the worker stops instead of
limping on. :meth:`Worker.run` runs on :class:`runtime.jobs.postgres.JobRepository`;
:meth:`Worker.serve` on any :class:`runtime.jobs.store.JobStore` (tests: the in-memory one).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from typing import Any

import anyio
import anyio.abc
import asyncpg
from opentelemetry.trace import Tracer

from runtime.db.connect import connect_options, init_connection
from runtime.db.errors import CONNECTION_ERRORS
from runtime.jobs.clock import Clock
from runtime.jobs.postgres import JobRepository, Pool
from runtime.jobs.store import JobStore
from runtime.process.identity import new_worker_id
from runtime.process.tracing import TRACER
from runtime.providers.backoff import Reconnect
from runtime.providers.gate import Providers
from runtime.providers.specs import SESSION_SETTINGS, by_stage
from runtime.stage import Pipeline
from runtime.worker.completer import Completer
from runtime.worker.config import WorkerConfig
from runtime.worker.executor import Executor
from runtime.worker.heartbeat import Heartbeat
from runtime.worker.inflight import InFlight
from runtime.worker.listener import CHANNEL, JOINED, Listener
from runtime.worker.producer import Producer
from runtime.worker.rescuer import Rescuer, RescuerConfig
from runtime.worker.settler import Settler
from runtime.worker.state import WorkerState
from runtime.worker.watchers import gauges_loop, providers_loop, signal_loop

#: Planner settings of a worker's connections. The engine's queries are written to plan
#: well generically (schema/queries/stage_jobs.sql): re-planning the hot statement per
#: call cost more than running it (0.4 ms of a 0.5 ms hop). A generic plan is made once
#: per connection, often while ``stage_jobs`` is nearly empty (a fresh queue), and then
#: kept; at the default random_page_cost (4) such a plan reads ``stage_jobs`` whole for
#: the rows a claim leases, and with the cost of solid-state storage (1.1) takes them by
#: primary key (docs/architecture.md, "Worker connections").
WORKER_SESSION = {"plan_cache_mode": "force_generic_plan", "random_page_cost": "1.1"}


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
        tracer: Tracer = TRACER,
    ) -> None:
        for name in config.stages:
            pipeline.stage(name)  # raises on an unknown stage
        self.pipeline = pipeline
        self.dsn = dsn
        self.config = config
        self.clock = clock or Clock()
        self.id = worker_id or new_worker_id()
        #: ``tracer``: where its spans go (default: the process's global provider).
        self.state = WorkerState(pipeline, config, self.clock, self.id, tracer)
        self.heartbeat = Heartbeat(self.state)
        self.log = self.state.log

    @property
    def inflight(self) -> dict[int, InFlight]:
        return self.state.inflight

    @property
    def providers(self) -> Providers | None:
        return self.state.providers

    @property
    def store(self) -> JobStore:
        return self.state.store

    def stop(self) -> None:
        """Stop claiming; in-flight jobs get ``grace_s`` to finish, then are released."""
        self.state.stop()

    def cancel_inflight(self) -> None:
        self.state.cancel_inflight()

    async def heartbeat_once(self) -> None:
        await self.heartbeat.once()

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Work until stopped (signal, :meth:`stop`, or idle with ``exit_when_idle``).
        Started (``task_status``) once registered and listening."""
        specs = by_stage(self.pipeline.stage(n) for n in self.config.stages)
        async with (
            self._pool() as pool,
            self._pool(size=2, settings=SESSION_SETTINGS) as provider_pool,
            self.pipeline.running(),
        ):
            providers = Providers(provider_pool, self.id, specs, self.config.circuit)
            await self.serve(
                JobRepository(pool), pool=pool, providers=providers, task_status=task_status
            )

    async def serve(
        self,
        store: JobStore,
        *,
        pool: Pool | None = None,
        providers: Providers | None = None,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Work on ``store`` until stopped. Without a ``pool``, stages cannot read the
        database and ``listen`` and ``gauges_every_s`` must be off."""
        st = self.state
        st.attach(store, pool, providers)
        completer = Completer(
            store, self.id, self.config.lease_s, self.clock, own_free=st.free_slots
        )
        settler = Settler(st, completer)
        executor = Executor(st, settler)
        producer = Producer(st, executor.run_slot)
        await self._register()
        self.log.info("worker started: stages %s", ",".join(self.config.stages))
        try:
            async with anyio.create_task_group() as side:
                self._start_side_tasks(side, completer, settler)
                if self.config.listen:
                    # Bounded: a worker that cannot LISTEN still polls.
                    with anyio.move_on_after(self.config.poll_s):
                        await st.listening.wait()
                task_status.started()
                await self._work(producer)
                side.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True), contextlib.suppress(*CONNECTION_ERRORS):
                await store.unregister_worker(self.id)
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
            init=init_connection,
            **connect_options({**WORKER_SESSION, **(settings or {})}),
        )
        try:
            yield pool
        finally:
            with anyio.CancelScope(shield=True):
                await pool.close()

    async def _register(self) -> None:
        st = self.state
        reconnect = Reconnect()
        while not st.stopping.is_set():
            try:
                st.peer_stages = await st.store.register_worker(self.id, self.config.stages)
                await st.store.announce_worker(CHANNEL, JOINED)
                if st.providers is not None and st.providers.active:
                    await st.providers.register()
                return
            except CONNECTION_ERRORS as exc:
                await st.db_error("register", exc)
                await anyio.sleep(reconnect.next_s())

    def _start_side_tasks(
        self, side: anyio.abc.TaskGroup, completer: Completer, settler: Settler
    ) -> None:
        st, cfg = self.state, self.config
        rescuer = Rescuer(
            st.store,
            RescuerConfig(interval_s=cfg.rescue_every_s),
            clock=self.clock,
            on_failed=settler.rescued_failed,
            spans=st.spans,
        )
        side.start_soon(rescuer.run)
        if st.providers is not None and st.providers.active:
            side.start_soon(providers_loop, st)
        side.start_soon(completer.run)
        side.start_soon(self.heartbeat.run)
        if cfg.listen:
            side.start_soon(Listener(st, self.dsn).run)
        if cfg.handle_signals:
            side.start_soon(signal_loop, st)
        if cfg.gauges_every_s:
            side.start_soon(gauges_loop, st)

    async def _work(self, producer: Producer) -> None:
        async with anyio.create_task_group() as jobs:
            async with anyio.create_task_group() as loops:
                for name in self.config.stages:
                    loops.start_soon(producer.claim_loop, self.pipeline.stage(name), jobs)
                if self.config.exit_when_idle:
                    loops.start_soon(producer.idle_watch)
            await self._drain()

    async def _drain(self) -> None:
        """After claiming stopped: let jobs finish within the grace period, then cancel."""
        st = self.state
        if st.inflight:
            self.log.info(
                "stopping: %d job(s) in flight, grace %.0fs", len(st.inflight), self.config.grace_s
            )
            with anyio.move_on_after(self.config.grace_s):
                while st.inflight:
                    st.drained = anyio.Event()
                    await st.drained.wait()
        self.cancel_inflight()


async def _keep_session(conn: asyncpg.Connection[Any]) -> None:
    """Skip asyncpg's per-release RESET ALL / UNLISTEN round trip (a second round trip on
    every query): the engine leaves no session state on pooled connections (LISTEN has its
    own connection), and asyncpg still rolls back a transaction left open."""
