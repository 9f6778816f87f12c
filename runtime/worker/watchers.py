"""The worker's smaller side tasks: queue-depth gauges, provider circuits, signals."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator, Sequence

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


#: The signals that stop a worker.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


async def signal_loop(state: WorkerState) -> None:
    """SIGTERM or SIGINT stops claiming; a second one cancels the jobs in flight. When
    the worker ends, the handlers from before it are put back (see :func:`restored`)."""
    with restored(STOP_SIGNALS), anyio.open_signal_receiver(*STOP_SIGNALS) as signals:
        async for signum in signals:
            if state.stopping.is_set():
                state.log.warning("second %s: cancelling jobs now", signal.Signals(signum).name)
                state.cancel_inflight()
            else:
                state.log.info("%s: stopping", signal.Signals(signum).name)
                state.stop()


@contextlib.contextmanager
def restored(signals: Sequence[signal.Signals]) -> Iterator[None]:
    """Put back the handlers of ``signals`` as they were on entry. The event loop, when
    its receiver closes, sets SIGINT's to Python's default, which raises
    KeyboardInterrupt wherever the main thread is: in a command that goes on after a
    worker has run in it (``sync --watch``, ``ingest``), a Ctrl-C could then land inside
    the event loop's own bookkeeping and leave a task waiting for ever, instead of
    cancelling the command's main task as ``asyncio.run``'s handler does."""
    before = [(sig, signal.getsignal(sig)) for sig in signals]
    try:
        yield
    finally:
        for sig, handler in before:
            if handler is not None:  # None: set outside Python, nothing to put back
                signal.signal(sig, handler)
