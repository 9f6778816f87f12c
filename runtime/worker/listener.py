"""The listener: LISTEN on the jobs channel on a connection of its own, and wake the
claim loop of the stage a NOTIFY names (or everything, after a reconnect)."""

from __future__ import annotations

import contextlib

import anyio

from runtime.db.connect import connect
from runtime.db.errors import CONNECTION_ERRORS
from runtime.providers.backoff import Reconnect
from runtime.worker.state import WorkerState

CHANNEL = "ragline_jobs"
#: Payload on CHANNEL when a worker starts: the others re-learn who serves which stage.
JOINED = "+worker"
#: Payload prefix on CHANNEL when a provider's circuit changes (runtime/providers/specs.py).
PROVIDER_PREFIX = "provider:"
#: A listening connection runs a keepalive query this often, to notice a dead socket.
KEEPALIVE_S = 30.0


class Listener:
    def __init__(self, state: WorkerState, dsn: str) -> None:
        self.state = state
        self.dsn = dsn

    async def run(self) -> None:
        reconnect = Reconnect()
        while True:
            try:
                await self.once(reconnect)
            except CONNECTION_ERRORS as exc:
                await self.state.db_error("listen", exc)
            await anyio.sleep(reconnect.next_s())

    async def once(self, reconnect: Reconnect) -> None:
        conn = await connect(self.dsn)
        try:
            closed = anyio.Event()
            conn.add_termination_listener(lambda _c: closed.set())
            await conn.add_listener(CHANNEL, self.on_notify)
            reconnect.reset()
            self.state.listening.set()
            # Notifications may have been missed while we were not listening.
            self.state.wake_all()
            while not conn.is_closed():
                with anyio.move_on_after(KEEPALIVE_S):
                    await closed.wait()
                if not conn.is_closed():
                    await conn.execute("SELECT 1")  # keepalive: notices a dead socket
        finally:
            with anyio.CancelScope(shield=True), contextlib.suppress(*CONNECTION_ERRORS):
                await conn.close(timeout=2)

    def on_notify(self, _conn: object, _pid: int, _channel: str, payload: object) -> None:
        st = self.state
        if isinstance(payload, str) and payload.startswith(PROVIDER_PREFIX):
            if st.providers is not None:
                st.providers.changed()
            return
        if payload == JOINED:
            st.peer_stages = None  # NOTIFY for every stage until the next heartbeat
            return
        event = st.wake.get(str(payload))
        if event is not None:
            event.set()
