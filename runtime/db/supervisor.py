"""Keeps the embedded PostgreSQL up while a long-running command (workers, ingest, sync,
serve, mcp) uses it.

Every such process watches the cluster from a thread: when its postmaster is gone (killed,
crashed, stopped under it), the process starts it again through
:meth:`EmbeddedPostgres.acquire`, which holds the data dir's lock, so of several
processes one starts it and the others find it running (they "wait for the owner"). The
acquire also puts back this process's entry in the users registry if it was removed.
Meanwhile the workers' own reconnect logic holds their jobs: a stage that hits the outage
is handed back without counting an attempt, a completion is retried until its lease runs
out, and claims back off; the HTTP API answers 503 with Retry-After.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Iterator

from runtime.db.embedded import EmbeddedPostgres
from runtime.errors import RaglineError, one_line
from runtime.process import metrics

log = logging.getLogger(__name__)

#: Seconds between checks: a check reads postmaster.pid and connects to the socket.
DEFAULT_CHECK_EVERY_S = 1.0


class Supervisor:
    def __init__(self, cluster: EmbeddedPostgres, check_every_s: float = DEFAULT_CHECK_EVERY_S):
        self.cluster = cluster
        self.check_every_s = check_every_s
        self.restarts = 0
        self._stop = threading.Event()

    def check_once(self) -> bool:
        """Start the cluster again if it is gone; True if this call found it gone."""
        if self.cluster.is_running():
            if not self.cluster.registered():  # removed under us (a forced stop)
                self.cluster.acquire()
            return False
        log.warning("the embedded PostgreSQL is not running; starting it again")
        self.cluster.acquire()  # under the lock: whoever gets there first starts it
        self.restarts += 1
        metrics.DB_RESTARTS.inc()
        log.warning("the embedded PostgreSQL is back")
        return True

    def run(self) -> None:
        while not self._stop.wait(self.check_every_s):
            try:
                self.check_once()
            except (RaglineError, OSError) as exc:
                log.error("could not start the embedded PostgreSQL: %s", one_line(str(exc)))

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        thread = threading.Thread(target=self.run, name="ragline-pg-supervisor", daemon=True)
        thread.start()
        try:
            yield
        finally:
            self._stop.set()
            thread.join(timeout=5.0)


class InUse(RaglineError):
    """The embedded PostgreSQL is in use."""


#: ``db stop --force`` waits this long for the processes it asked to stop (their grace
#: period is 10 s by default, plus releasing their jobs).
DEFAULT_STOP_WAIT_S = 60.0


def stop_embedded(cluster: EmbeddedPostgres, *, force: bool, wait_s: float) -> bool:
    """``db stop``: refuse while other processes use the cluster; with ``force``, ask them
    to stop (SIGTERM: workers release their jobs), wait for them, then stop it. The users
    registry is never cleared under a live process. Returns whether it was running.

    :raises InUse: users remain (without ``force``, or still alive after ``wait_s``).
    """
    was_running = cluster.is_running()
    users = cluster.live_users()
    if users and not force:
        raise InUse(
            f"the embedded PostgreSQL is in use by {len(users)} process(es) "
            f"(pid {', '.join(map(str, users))}): stop them first, or run 'db stop --force' "
            f"to ask them to stop (SIGTERM) and then stop it"
        )
    for pid in users:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + wait_s
    while users and time.monotonic() < deadline:
        time.sleep(0.2)
        users = cluster.live_users()
    if users:
        raise InUse(
            f"process(es) {', '.join(map(str, users))} still use the embedded PostgreSQL "
            f"after {wait_s:.0f} s; it was left running"
        )
    # The last of them stopped it on its way out, or it is stopped now.
    return cluster.stop() or was_running
