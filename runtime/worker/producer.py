"""The producer: one claim loop per stage, leasing no more jobs than it has free slots
(River's producer). A slot's later jobs come from its completions (runtime/worker/executor.py)."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

import anyio
import anyio.abc

from runtime.db.errors import CONNECTION_ERRORS
from runtime.models import Job
from runtime.providers.backoff import Reconnect
from runtime.stage import Stage
from runtime.worker.inflight import InFlight
from runtime.worker.state import WorkerState

#: Runs one slot from its first job on.
SlotRunner = Callable[[InFlight], Coroutine[Any, Any, None]]


class Producer:
    def __init__(self, state: WorkerState, run_slot: SlotRunner) -> None:
        self.state = state
        self.run_slot = run_slot

    async def claim_loop(self, stage: Stage, jobs: anyio.abc.TaskGroup) -> None:
        st = self.state
        limit = st.config.concurrency[stage.name]
        reconnect = Reconnect()
        while not st.stopping.is_set():
            # Replace the wake event before claiming, so a NOTIFY that lands during the
            # claim sets the new event and is not lost.
            wake = st.wake[stage.name] = anyio.Event()
            free = limit - st.running[stage.name]
            want = self.claimable(stage.name, free)
            claimed: list[Job] = []
            if want > 0:
                try:
                    claimed = await st.store.claim(
                        stage.name, st.id, want, st.config.lease_s, st.clock.db_now()
                    )
                    reconnect.reset()
                except CONNECTION_ERRORS as exc:
                    await st.db_error("claim", exc)
                    await anyio.sleep(reconnect.next_s())
                    continue
            for job in claimed:
                st.running[stage.name] += 1
                jobs.start_soon(self.run_slot, st.track(job, stage))
            if not claimed or len(claimed) < free:
                with anyio.move_on_after(self.claim_wait_s(stage.name)):
                    await wake.wait()

    def claimable(self, stage: str, free: int) -> int:
        """Free slots to fill now: none while a provider the stage calls has its circuit
        open (its jobs stay queued), one when a probe is due; none while a snooze paused
        the stage, nor while a busy ``holds_entry`` stage holds it back."""
        if self.state.paused_s(stage) > 0 or self.state.held_back(stage):
            return 0
        providers = self.state.providers
        if free <= 0 or providers is None:
            return free
        return providers.claimable(stage, free)

    def claim_wait_s(self, stage: str) -> float:
        providers, poll_s = self.state.providers, self.state.config.poll_s
        if (paused_s := self.state.paused_s(stage)) > 0:
            return min(paused_s, poll_s)
        if providers is not None and providers.blocked(stage):
            return providers.wait_s(stage, poll_s)
        return poll_s

    async def idle_watch(self) -> None:
        """With ``exit_when_idle``: stop once no job of the worker's stages is left."""
        st = self.state
        while not st.stopping.is_set():
            await anyio.sleep(min(st.config.poll_s, 0.25))
            if st.inflight:
                continue
            try:
                live = await st.store.count_live(st.config.stages)
            except CONNECTION_ERRORS as exc:
                await st.db_error("idle check", exc)
                continue
            if live == 0 and not st.inflight:
                st.log.info("no work left for stages %s; exiting", ",".join(st.config.stages))
                st.stop()
