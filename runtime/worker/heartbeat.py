"""The heartbeat: renews every lease the worker holds in one statement, refreshes who
else serves which stage, and cancels the jobs whose lease is gone (PgQueuer's heartbeat)."""

from __future__ import annotations

import anyio

from runtime.db.errors import CONNECTION_ERRORS, DeadPeer
from runtime.process.tracing import event
from runtime.worker.inflight import InFlight
from runtime.worker.state import WorkerState

#: A heartbeat waits at least this long for PostgreSQL's answer (see Heartbeat.budget_s).
MIN_BUDGET_S = 1.0


class Heartbeat:
    def __init__(self, state: WorkerState) -> None:
        self.state = state
        #: How long one beat waits for PostgreSQL: until the next beat is due. On a cut
        #: link (packets dropped, not refused) a statement would otherwise wait for the
        #: socket to time out, and the leases it should fence would expire meanwhile.
        self.budget_s = max(state.config.heartbeat_every_s, MIN_BUDGET_S)

    async def run(self) -> None:
        every = self.state.config.heartbeat_every_s
        while True:
            await anyio.sleep(every)
            await self.once()

    async def once(self) -> None:
        """Renew every held lease in one statement; cancel the jobs whose lease is gone."""
        st = self.state
        flights = [f for f in st.inflight.values() if not f.lost]
        asked_at = st.clock.monotonic()
        try:
            held = await self._renew(flights)
        except CONNECTION_ERRORS as exc:
            await st.db_error("heartbeat", exc)
            self.lose_unconfirmed(flights)
            return
        if held is None:
            return
        for flight in flights:
            if flight.job.id in held:
                flight.renewed_at = asked_at
            elif not flight.settling:  # a settling job may just have completed
                st.job_log(flight.job).warning("lease lost (heartbeat); cancelling the job")
                event(flight.span, "lease_lost", where="heartbeat")
                flight.lose()

    async def _renew(self, flights: list[InFlight]) -> set[int] | None:
        """Register, then renew ``flights``' leases: the ids still held (None: no flights).
        Raises :class:`DeadPeer` when PostgreSQL does not answer within the budget."""
        st = self.state
        with anyio.move_on_after(self.budget_s):
            st.peer_stages = await st.store.register_worker(st.id, st.config.stages)
            if not flights:
                return None
            return await st.store.heartbeat(
                [(f.job.id, f.job.lease_token) for f in flights],
                st.config.lease_s,
                st.clock.db_now(),
            )
        raise DeadPeer(f"PostgreSQL did not answer a heartbeat within {self.budget_s:g} s")

    def lose_unconfirmed(self, flights: list[InFlight]) -> None:
        # We cannot reach the database, so we cannot know; assume a lease lost before the
        # next heartbeat could renew it (another worker may already hold it by then).
        st = self.state
        horizon = st.clock.monotonic() + st.config.heartbeat_every_s
        for flight in flights:
            if flight.renewed_at + st.config.lease_s <= horizon and not flight.settling:
                st.job_log(flight.job).warning("lease cannot be renewed; cancelling the job")
                event(flight.span, "lease_lost", where="heartbeat (database unreachable)")
                flight.lose()
