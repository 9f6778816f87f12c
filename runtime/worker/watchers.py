"""The worker's smaller side tasks: queue-depth gauges, provider circuits, signals."""

from __future__ import annotations

import signal

import anyio

from runtime.db.errors import CONNECTION_ERRORS
from runtime.jobs.status import overview
from runtime.process import metrics
from runtime.worker.state import WorkerState


async def gauges_loop(state: WorkerState) -> None:
    """Refresh the queue-depth gauges every ``gauges_every_s`` (needs a database pool)."""
    while True:
        if state.pool is None:
            raise RuntimeError("queue-depth gauges need a database pool")
        try:
            rows = await overview(state.pool, state.config.stages, {})
        except CONNECTION_ERRORS as exc:
            await state.db_error("gauges", exc)
        else:
            for row in rows:
                metrics.QUEUED.labels(row.stage).set(row.queued)
                metrics.RUNNING.labels(row.stage).set(row.running)
                metrics.OLDEST_QUEUED.labels(row.stage).set(row.oldest_queued_s)
        await anyio.sleep(state.config.gauges_every_s)


async def providers_loop(state: WorkerState) -> None:
    """Follow the circuits of the providers the worker's stages call."""
    providers = state.providers
    assert providers is not None
    while True:
        try:
            await providers.run(state.config.poll_s, state.wake_all)
        except CONNECTION_ERRORS as exc:
            await state.db_error("providers", exc)
            await anyio.sleep(state.config.poll_s)


async def signal_loop(state: WorkerState) -> None:
    """SIGTERM or SIGINT stops claiming; a second one cancels the jobs in flight."""
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for signum in signals:
            if state.stopping.is_set():
                state.log.warning("second %s: cancelling jobs now", signal.Signals(signum).name)
                state.cancel_inflight()
            else:
                state.log.info("%s: stopping", signal.Signals(signum).name)
                state.stop()
