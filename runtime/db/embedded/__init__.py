"""The embedded PostgreSQL: a private cluster that ragline starts when ``DATABASE_URL`` is unset.

PostgreSQL 16 from the ``pgserver`` wheel (never the system's), on a Unix socket only, in
``<data_dir>/pg`` or where ``<data_dir>/pg.location`` says. The first ``acquire`` starts it,
later ones (any process) join it as users, the last ``release`` stops it. As root each
command runs as an unprivileged user (the cluster's owner, ``postgres`` or ``ragline-pg``),
from a copy of the binaries and a cluster under /var/tmp where that user cannot reach them.
Layout, and why each choice holds: docs/architecture.md, "The embedded PostgreSQL".
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator
from pathlib import Path

from runtime.db.embedded._accounts import run_as_for
from runtime.db.embedded._binaries import BINARY_COPY_TIMEOUT_S
from runtime.db.embedded._cluster import ClusterDir
from runtime.db.embedded._server import INITDB_TIMEOUT_S, START_TIMEOUT_S, Server, socket_dsn
from runtime.db.embedded._users import Users, file_lock

#: Waiting for another process's start or stop, which are bounded by the timeouts above.
LOCK_TIMEOUT_S = START_TIMEOUT_S + INITDB_TIMEOUT_S + BINARY_COPY_TIMEOUT_S + 30.0


class EmbeddedPostgres:
    """A private PostgreSQL cluster for ``data_dir``, shared by the processes using it.

    The cluster lives in ``<data_dir>/pg``, or where ``<data_dir>/pg.location`` says (see
    the package docstring). Every method is synchronous and may block for seconds (initdb,
    start, stop, waiting for another process's lock): call it in a worker thread from async
    code.
    """

    def __init__(self, data_dir: Path, *, port: int = 5432) -> None:
        self._data_dir = Path(data_dir).resolve()
        self._cluster = ClusterDir(self._data_dir, port)
        self._server = Server(self._cluster)
        self._lock = self._data_dir / "lock"
        self._users = Users(self._data_dir / "users")
        self._token = secrets.token_hex(4)
        self._registration: Path | None = None
        self._acquired_dsn: str | None = None

    @property
    def dsn(self) -> str:
        """The asyncpg DSN: the one ``acquire`` returned, else where the cluster would be."""
        if self._acquired_dsn is not None:
            return self._acquired_dsn
        self._cluster.locate()
        return socket_dsn(str(self._cluster.socket_dir()), self._cluster.port)

    @property
    def log_path(self) -> Path:
        self._cluster.locate()
        return self._cluster.log

    def acquire(self) -> str:
        """Start the cluster unless it runs, register this caller as a user, return the DSN.

        The first start runs initdb (about 1 s); later starts take about 0.2 s, and joining a
        running cluster a few milliseconds. A running cluster is joined as it is, whatever
        ``port`` this instance was given.

        :raises ConfigurationError: the cluster cannot be set up here (root and no user to
            run it as, an existing cluster its user cannot reach, a data dir this user
            cannot write, data dir of another major version).
        :raises DatabaseUnavailable: initdb or the server failed or timed out; names the log.
        """
        self._cluster.locate()
        run_as = run_as_for(self._cluster.pg_dir)
        self._cluster.prepare(run_as)
        with file_lock(self._lock, LOCK_TIMEOUT_S):
            self._cluster.settle(run_as)
            info = self._server.running() or self._server.start(run_as)
            if self._registration is None or not self._registration.exists():
                self._registration = self._users.register(self._token)
        self._acquired_dsn = socket_dsn(info.socket_dir, info.port)
        return self._acquired_dsn

    def release(self) -> None:
        """Unregister this caller; stop the cluster if no live user remains."""
        if not self._data_dir.is_dir():
            return
        with file_lock(self._lock, LOCK_TIMEOUT_S):
            if self._registration is not None:
                self._registration.unlink(missing_ok=True)
                self._registration = None
            self._cluster.locate()
            if self._users.prune() == 0 and self._server.running() is not None:
                self._server.stop(run_as_for(self._cluster.pg_dir))

    def stop(self) -> bool:
        """Stop the cluster now, whoever uses it; return False if it was not running."""
        self._cluster.locate()
        if not self._cluster.pgdata.is_dir():
            return False
        with file_lock(self._lock, LOCK_TIMEOUT_S):
            self._users.clear()
            self._registration = None
            if self._server.running() is None:
                return False
            self._server.stop(run_as_for(self._cluster.pg_dir))
            return True

    def registered(self) -> bool:
        """Whether this instance's entry in the users registry is there."""
        return self._registration is not None and self._registration.exists()

    def live_users(self) -> list[int]:
        """Pids of the live processes using the cluster, other than this one."""
        if not self._data_dir.is_dir():
            return []
        with file_lock(self._lock, LOCK_TIMEOUT_S):
            self._users.prune()
            return [pid for pid in self._users.pids() if pid != os.getpid()]

    def is_running(self) -> bool:
        """Whether a server runs on this data dir and accepts connections on its socket."""
        self._cluster.locate()
        return self._server.running() is not None


@contextlib.contextmanager
def embedded_postgres(data_dir: Path, *, port: int = 5432) -> Iterator[str]:
    """Acquire the embedded cluster under ``data_dir`` for the block; yield its DSN."""
    cluster = EmbeddedPostgres(data_dir, port=port)
    dsn = cluster.acquire()
    try:
        yield dsn
    finally:
        cluster.release()


__all__ = ["EmbeddedPostgres", "embedded_postgres"]
