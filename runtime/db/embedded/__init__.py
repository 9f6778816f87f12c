"""The embedded PostgreSQL: a private cluster that ragline starts when ``DATABASE_URL`` is unset.

Layout under the data dir (``RAGLINE_DATA_DIR``, default ``./.ragline``)::

    <data_dir>/lock          flock(2) file: serializes start, stop and the user registry
    <data_dir>/users/        one file per user (``<pid>.<token>``, holding the process start time)
    <data_dir>/pg.location   only when the cluster lives elsewhere (see Root below): its path
    <cluster>/data/          the cluster (PGDATA), created once by initdb
    <cluster>/sock/          its Unix socket directory (or /tmp/ragline-<hash> when too long)
    <cluster>/log            the server log (initdb's output is appended there too)

where ``<cluster>`` is ``<data_dir>/pg``, or the directory that ``pg.location`` names.
As root, when the server's user cannot reach pgserver's own files, it runs a copy of them::

    /var/tmp/ragline-pginstall-<pgserver version>-<sha256(package path)[:16]>/
        pgserver/pginstall/{bin,lib,share}    pgserver.libs/

Choices, and why:

- **Binaries: the ones bundled in the ``pgserver`` wheel (PostgreSQL 16), always**, never the
  system's ``/usr/lib/postgresql/*/bin``. They come from PyPI, so a fresh machine with only
  Python gets exactly the same server as a developer's or CI's, and a data dir is always
  opened by the major version that initialized it (a 15 cluster cannot be started by 16 or
  the other way round, so picking "whatever is installed" would break data dirs when a
  machine changes). Only the binaries are used: pgserver's Python API keeps its own global
  lock and pid list, and creates a login user with a shell.
- **Root**: initdb and postgres refuse to run as root, so as root every PostgreSQL command
  runs as an unprivileged user (``subprocess`` switches uid/gid; no ``su``): the owner of an
  existing cluster directory; else ``postgres`` when that user exists; else
  :data:`SERVICE_USER`, which ragline creates (``useradd --system``, no home, no login
  shell; ``adduser`` where useradd is missing). The README promises that ``pip install .``
  then ``python -m runtime ingest`` works on a fresh machine with only Python, which is
  typically a container running as root without a ``postgres`` user. When the account
  cannot be created, :class:`~runtime.errors.ConfigurationError` says to set
  ``DATABASE_URL`` or to run as a non-root user.
- **Binaries, as root**: when that user cannot reach pgserver's files (a venv under
  ``/root``, mode 0700, is the usual case: the README's first command creates one when the
  repo is cloned there), they are copied once to ``/var/tmp/ragline-pginstall-...`` (see
  above; about 4 s, 27 MB) and run from there. Only what the server needs is copied:
  ``pginstall/{bin,lib,share}`` (not the C headers) and the auditwheel libraries next to
  the package, in the same layout, because initdb and postgres find ``share/`` and
  ``lib/`` relative to their own path and libpq through ``$ORIGIN/../../../pgserver.libs``.
  The copy is root-owned, readable by all, made under a lock
  (``/var/tmp/ragline-pginstall-....lock``) in a temporary directory then renamed, and
  shared by every data dir and process using the same pgserver. Before every use its
  listing (paths and sizes) is compared with the source's, so a copy that a /var/tmp
  cleaner thinned or a crash truncated is made again.
- **Where the cluster lives, as root**: ``<data_dir>/pg`` when that user can enter the data
  dir (a data dir that ragline creates gets mode 0710 with the user's group, so only that
  user may enter it; nothing else is chmod-ed). When it cannot (a checkout under ``/root``,
  mode 0700, is the usual case), the cluster goes to
  ``/var/tmp/ragline-pg-<sha256(data dir)[:16]>`` (mode 0700, owned by that user) and
  ``<data_dir>/pg.location`` records it, so that every process on the data dir, and
  ``ragline db stop``, finds it; the lock and the users stay in the data dir, which root
  reaches. /var/tmp, not /tmp: it survives reboots. Its cleaners (systemd-tmpfiles ages
  /var/tmp out after 30 days by default) may still delete a long-idle cluster, which a
  warning then reports; set ``DATABASE_URL`` for data that must last. An existing
  ``<data_dir>/pg`` is never moved: if its user cannot reach it, a ConfigurationError names
  the directory and the remedies.
- **Unprivileged**: everything runs as the calling user under the data dir; a data dir it
  cannot create or write is a ConfigurationError.
- **Unix socket only** (``listen_addresses = ''``) with trust auth on that socket and host
  connections rejected: no port is taken, nothing is reachable from the network, and the
  socket directory is readable by its owner only (root bypasses this).
- **Shared between processes**: the first ``acquire`` starts the cluster; later ones (any
  process) find it through ``postmaster.pid`` plus a connect to its socket, and register as
  users. ``release`` unregisters, prunes users whose process died, and stops the cluster
  (``pg_ctl stop -m fast``) when none remain.
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
