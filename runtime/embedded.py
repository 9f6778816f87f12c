"""The embedded PostgreSQL: a private cluster that ragline starts when ``DATABASE_URL`` is unset.

Layout under the data dir (``RAGLINE_DATA_DIR``, default ``./.ragline``)::

    <data_dir>/lock          flock(2) file: serializes start, stop and the user registry
    <data_dir>/users/        one file per user (``<pid>.<token>``, holding the process start time)
    <data_dir>/pg/data/      the cluster (PGDATA), created once by initdb
    <data_dir>/pg/sock/      its Unix socket directory (or /tmp/ragline-<hash> when too long)
    <data_dir>/pg/log        the server log (initdb's output is appended there too)

Choices, and why:

- **Binaries: the ones bundled in the ``pgserver`` wheel (PostgreSQL 16), always**, never the
  system's ``/usr/lib/postgresql/*/bin``. They come from PyPI, so a fresh machine with only
  Python gets exactly the same server as a developer's or CI's, and a data dir is always
  opened by the major version that initialized it (a 15 cluster cannot be started by 16 or
  the other way round, so picking "whatever is installed" would break data dirs when a
  machine changes). Only the binaries are used: pgserver's Python API creates a system user
  with ``useradd`` when run as root and keeps its own global lock and pid list.
- **Root**: initdb and postgres refuse to run as root, so as root every PostgreSQL command
  runs as the existing unprivileged user ``postgres`` (``subprocess`` switches uid/gid; no
  ``su``). ragline does not create system users itself: adding accounts to a machine is an
  administrator's decision and a surprising side effect of a library call. With no such
  user, :class:`~runtime.errors.ConfigurationError` says what to do.
- **Access for that user**: ``pg/`` is created for it (mode 0700, chowned). A data dir that
  ragline creates itself gets mode 0710 with the user's group, so only that user may enter
  it. Nothing else is chmod-ed: when a parent directory (e.g. ``/root``, mode 0700) or an
  existing data dir is not enterable by the user, a ConfigurationError names it and the
  remedies (choose another ``RAGLINE_DATA_DIR``, grant access, or set ``DATABASE_URL``);
  the cluster is never moved somewhere else behind the user's back.
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
import fcntl
import functools
import hashlib
import importlib.util
import os
import pwd
import re
import secrets
import socket
import stat
import subprocess
import tempfile
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import msgspec

from runtime.errors import ConfigurationError, DatabaseUnavailable, one_line

#: ``pg_ctl start -w`` waits this long for the server to accept connections.
START_TIMEOUT_S = 60.0
#: ``pg_ctl stop -w`` waits this long for the server to shut down.
STOP_TIMEOUT_S = 60.0
#: initdb writes and fsyncs a few MB; it takes about 2 s.
INITDB_TIMEOUT_S = 120.0
#: Waiting for another process's start or stop, which are bounded by the timeouts above.
LOCK_TIMEOUT_S = START_TIMEOUT_S + INITDB_TIMEOUT_S + 30.0
LOCK_POLL_S = 0.05
#: The unprivileged system user that runs PostgreSQL when ragline runs as root.
SERVICE_USER = "postgres"
#: The cluster's superuser and database named in the DSN.
SUPERUSER = "postgres"
DATABASE = "postgres"
#: sun_path is 108 bytes with the terminating NUL; PostgreSQL refuses longer socket paths.
MAX_SOCKET_PATH = 107
#: A short, fixed parent for socket dirs when ``pg/sock`` is too long. Not $TMPDIR, which
#: may itself be long.
SHORT_SOCKET_PARENT = Path("/tmp")

# pg_ctl runs postgres through /bin/sh with paths in double quotes, and
# unix_socket_directories is a comma/space-separated list: keep paths to a plain alphabet.
_SAFE_SOCKET_DIR = re.compile(r"[A-Za-z0-9/._+-]+")
_SHELL_UNSAFE = frozenset('"`$\\\n')
_CONF_NAME = "ragline.conf"


class _RunAs(msgspec.Struct, frozen=True):
    """Who runs the PostgreSQL commands; ``switch`` when that is not this process's user."""

    name: str
    uid: int
    gid: int
    groups: tuple[int, ...]
    switch: bool


class _Postmaster(msgspec.Struct, frozen=True):
    """What a running server wrote to ``postmaster.pid``."""

    pid: int
    port: int
    socket_dir: str
    shm_id: int


def _run_as() -> _RunAs:
    if os.geteuid() != 0:
        entry = pwd.getpwuid(os.geteuid())
        return _RunAs(entry.pw_name, entry.pw_uid, entry.pw_gid, tuple(os.getgroups()), False)
    try:
        entry = pwd.getpwnam(SERVICE_USER)
    except KeyError:
        raise ConfigurationError(
            f"ragline runs as root and the embedded PostgreSQL refuses root, but there is no "
            f"user '{SERVICE_USER}' to run it as: create one (useradd --system {SERVICE_USER}) "
            f"or set DATABASE_URL"
        ) from None
    groups = tuple(os.getgrouplist(entry.pw_name, entry.pw_gid))
    return _RunAs(entry.pw_name, entry.pw_uid, entry.pw_gid, groups, True)


@functools.cache
def _bin_dir() -> Path:
    # find_spec locates the wheel without importing pgserver, whose import has side effects.
    spec = importlib.util.find_spec("pgserver")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigurationError(
            "the embedded PostgreSQL needs the 'pgserver' package: pip install pgserver, "
            "or set DATABASE_URL"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


def _can_enter(path: Path, user: _RunAs) -> bool:
    # Plain mode bits only: POSIX ACLs are not consulted, so an ACL grant may be missed
    # (the error then names the directory, and DATABASE_URL remains a way out).
    st = path.stat()
    if st.st_uid == user.uid:
        return bool(st.st_mode & stat.S_IXUSR)
    if st.st_gid in user.groups:
        return bool(st.st_mode & stat.S_IXGRP)
    return bool(st.st_mode & stat.S_IXOTH)


def _check_reachable(path: Path, user: _RunAs, what: str) -> None:
    if not user.switch:
        return
    path = path.resolve()
    for directory in [*reversed(path.parents), path]:
        if directory.exists() and not _can_enter(directory, user):
            raise ConfigurationError(
                f"the embedded PostgreSQL runs as user '{user.name}', who cannot enter "
                f"{directory} (needed for {what}): choose a RAGLINE_DATA_DIR it can reach, "
                f"grant it access (e.g. chmod o+x {directory}), or set DATABASE_URL"
            )


def _check_shell_safe(path: Path) -> None:
    if _SHELL_UNSAFE & set(str(path)):
        raise ConfigurationError(
            f'the embedded PostgreSQL cannot use a path containing any of " ` $ \\ or a '
            f"newline: {path}"
        )


def _socket_fits(directory: Path, port: int) -> bool:
    text = str(directory)
    full = len(os.fsencode(text)) + len(f"/.s.PGSQL.{port}")
    return full <= MAX_SOCKET_PATH and _SAFE_SOCKET_DIR.fullmatch(text) is not None


def _short_socket_dir(pg_dir: Path) -> Path:
    digest = hashlib.sha256(os.fsencode(str(pg_dir))).hexdigest()[:16]
    return SHORT_SOCKET_PARENT / f"ragline-{digest}"


def _clean_env() -> dict[str, str]:
    # PG* variables (PGPORT, PGDATA, PGHOST, ...) would change what the commands do.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env["LC_ALL"] = "C"
    return env


def _proc_identity(pid: int) -> str | None:
    """The process's start time (clock ticks since boot), '' off Linux, None if gone.

    Comparing start times tells a live user from a dead one whose pid was reused; a zombie
    (killed, not yet reaped) counts as gone.
    """
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except FileNotFoundError:
        return None if Path("/proc/self/stat").exists() else ""
    return None if fields[0] in ("Z", "X") else fields[19]


def _read_postmaster(data: Path) -> _Postmaster | None:
    try:
        lines = (data / "postmaster.pid").read_text().splitlines()
    except (FileNotFoundError, NotADirectoryError):
        return None
    if len(lines) < 8 or not lines[0].strip().isdigit():
        return None  # being written, or not ours to interpret
    shm = lines[6].split()  # "<key> <shmid>" of the interlock SysV segment
    shm_id = int(shm[1]) if len(shm) == 2 and shm[1].isdigit() else -1
    return _Postmaster(int(lines[0]), int(lines[3]), lines[4].strip(), shm_id)


def _shm_attached(shm_id: int) -> int | None:
    """How many processes are attached to SysV segment ``shm_id``; None if unknown."""
    try:
        rows = Path("/proc/sysvipc/shm").read_text().splitlines()[1:]
    except OSError:
        return None
    for row in rows:
        fields = row.split()
        if len(fields) > 6 and fields[1] == str(shm_id):
            return int(fields[6])
    return 0  # the segment is gone


def _accepts(socket_path: str) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(2.0)
        try:
            sock.connect(socket_path)
        except OSError:
            return False
    return True


def _dsn(socket_dir: str, port: int) -> str:
    host = urllib.parse.quote(socket_dir, safe="/")
    return f"postgresql://{SUPERUSER}@/{DATABASE}?host={host}&port={port}"


def _last_log_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    serious = [line for line in lines if "FATAL" in line or "ERROR" in line]
    return (serious or lines or ["no output"])[-1]


@contextlib.contextmanager
def _flock(path: Path, timeout_s: float) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise DatabaseUnavailable(
                        f"timed out after {timeout_s:.0f} s waiting for {path}, held by "
                        f"another process starting or stopping the embedded PostgreSQL"
                    ) from None
                time.sleep(LOCK_POLL_S)
        yield
    finally:
        os.close(fd)  # closing drops the lock


class _Users:
    """The registry of processes using the cluster: one file per acquire."""

    def __init__(self, directory: Path) -> None:
        self._dir = directory

    def register(self, token: str) -> Path:
        self._dir.mkdir(mode=0o700, exist_ok=True)
        path = self._dir / f"{os.getpid()}.{token}"
        path.write_text(_proc_identity(os.getpid()) or "")
        return path

    def prune(self) -> int:
        """Forget users whose process is gone; return how many remain."""
        live = 0
        for path in self._dir.glob("*.*"):
            if self._alive(path):
                live += 1
            else:
                path.unlink(missing_ok=True)
        return live

    def clear(self) -> None:
        for path in self._dir.glob("*.*"):
            path.unlink(missing_ok=True)

    @staticmethod
    def _alive(path: Path) -> bool:
        pid_text = path.name.partition(".")[0]
        if not pid_text.isdigit():
            return False
        identity = _proc_identity(int(pid_text))
        return identity is not None and identity == path.read_text().strip()


class EmbeddedPostgres:
    """A private PostgreSQL cluster under ``<data_dir>/pg``, shared by the processes using it.

    Every method is synchronous and may block for seconds (initdb, start, stop, waiting for
    another process's lock): call it in a worker thread from async code.
    """

    def __init__(self, data_dir: Path, *, port: int = 5432) -> None:
        self._data_dir = Path(data_dir).resolve()
        self._port = port
        self._pg_dir = self._data_dir / "pg"
        self._pgdata = self._pg_dir / "data"
        self._log = self._pg_dir / "log"
        self._users = _Users(self._data_dir / "users")
        self._token = secrets.token_hex(4)
        self._registration: Path | None = None
        self._acquired_dsn: str | None = None

    @property
    def dsn(self) -> str:
        """The asyncpg DSN: the one ``acquire`` returned, else where the cluster would be."""
        if self._acquired_dsn is not None:
            return self._acquired_dsn
        return _dsn(str(self._socket_dir()), self._port)

    @property
    def log_path(self) -> Path:
        return self._log

    def acquire(self) -> str:
        """Start the cluster unless it runs, register this caller as a user, return the DSN.

        The first start runs initdb (about 1 s); later starts take about 0.2 s, and joining a
        running cluster a few milliseconds. A running cluster is joined as it is, whatever
        ``port`` this instance was given.

        :raises ConfigurationError: the cluster cannot be set up here (root without user
            ``postgres``, unreachable data dir, data dir of another major version).
        :raises DatabaseUnavailable: initdb or the server failed or timed out; names the log.
        """
        run_as = _run_as()
        self._prepare(run_as)
        with _flock(self._data_dir / "lock", LOCK_TIMEOUT_S):
            info = self._running() or self._start(run_as)
            if self._registration is None or not self._registration.exists():
                self._registration = self._users.register(self._token)
        self._acquired_dsn = _dsn(info.socket_dir, info.port)
        return self._acquired_dsn

    def release(self) -> None:
        """Unregister this caller; stop the cluster if no live user remains."""
        if not self._data_dir.is_dir():
            return
        with _flock(self._data_dir / "lock", LOCK_TIMEOUT_S):
            if self._registration is not None:
                self._registration.unlink(missing_ok=True)
                self._registration = None
            if self._users.prune() == 0 and self._running() is not None:
                self._stop(_run_as())

    def stop(self) -> bool:
        """Stop the cluster now, whoever uses it; return False if it was not running."""
        if not self._pgdata.is_dir():
            return False
        with _flock(self._data_dir / "lock", LOCK_TIMEOUT_S):
            self._users.clear()
            self._registration = None
            if self._running() is None:
                return False
            self._stop(_run_as())
            return True

    def is_running(self) -> bool:
        """Whether a server runs on this data dir and accepts connections on its socket."""
        return self._running() is not None

    # -- setup -------------------------------------------------------------------------

    def _prepare(self, run_as: _RunAs) -> None:
        _check_shell_safe(self._data_dir)
        _check_shell_safe(_bin_dir())
        _check_reachable(_bin_dir(), run_as, "the PostgreSQL binaries")
        # Before creating anything, then again for what mkdir created under the umask.
        _check_reachable(self._data_dir, run_as, "the data dir")
        self._make_data_dir(run_as)
        _check_reachable(self._data_dir, run_as, "the data dir")

    def _prepare_pg_dir(self, run_as: _RunAs) -> None:
        # Under the lock: a racing process must not see pg/ between mkdir and chown.
        self._make_owned_dir(self._pg_dir, run_as)
        if not self._log.exists():
            # Created here so that it belongs to the server's user, who appends to it.
            self._log.touch(mode=0o600)
            os.chown(self._log, run_as.uid, run_as.gid)

    def _make_data_dir(self, run_as: _RunAs) -> None:
        if self._data_dir.is_dir():
            return
        self._data_dir.mkdir(parents=True, exist_ok=True)
        if run_as.switch:
            # Let only the service user's group in: it needs to reach pg/, nothing more.
            os.chown(self._data_dir, -1, run_as.gid)
            self._data_dir.chmod(0o710)

    def _make_owned_dir(self, path: Path, run_as: _RunAs) -> None:
        with contextlib.suppress(FileExistsError):
            path.mkdir(mode=0o700)
            os.chown(path, run_as.uid, run_as.gid)
        st = path.lstat()
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != run_as.uid or st.st_mode & 0o077:
            raise ConfigurationError(
                f"{path} must be a directory owned by user '{run_as.name}' with mode 0700 "
                f"(the embedded PostgreSQL runs as that user): fix or remove it"
            )

    def _socket_dir(self) -> Path:
        preferred = self._pg_dir / "sock"
        return preferred if _socket_fits(preferred, self._port) else _short_socket_dir(self._pg_dir)

    # -- server ------------------------------------------------------------------------

    def _running(self) -> _Postmaster | None:
        info = _read_postmaster(self._pgdata)
        if info is None or _proc_identity(info.pid) is None:
            return None
        if not _accepts(f"{info.socket_dir}/.s.PGSQL.{info.port}"):
            return None
        return info

    def _start(self, run_as: _RunAs) -> _Postmaster:
        self._prepare_pg_dir(run_as)
        if not (self._pgdata / "PG_VERSION").exists():
            self._initdb(run_as)
        else:
            self._check_version(run_as)
        self._clear_stale_pid_file()
        socket_dir = self._socket_dir()
        self._make_owned_dir(socket_dir, run_as)
        self._write_conf(socket_dir, run_as)
        self._pg_ctl(run_as, "start", "-t", f"{START_TIMEOUT_S:.0f}", "-l", str(self._log))
        info = self._running()
        if info is None:
            raise DatabaseUnavailable(
                f"the embedded PostgreSQL started but accepts no connection; log: {self._log}"
            )
        return info

    def _clear_stale_pid_file(self) -> None:
        """Remove the lock files of a server that died and is a zombie.

        PostgreSQL removes a stale postmaster.pid itself unless its pid still exists, and
        the zombie of a killed postmaster exists until it is reaped; where pid 1 reaps late
        (containers) that blocks every restart. Removing the file is safe only when no
        process (an orphaned backend) is still attached to the dead server's shared
        memory, which /proc/sysvipc/shm tells (the server then recycles that segment).
        """
        info = _read_postmaster(self._pgdata)
        if info is None or _proc_identity(info.pid) is not None:
            return
        if _shm_attached(info.shm_id) == 0:
            # The socket's lock file names the same dead pid and blocks the same way.
            Path(info.socket_dir, f".s.PGSQL.{info.port}.lock").unlink(missing_ok=True)
            (self._pgdata / "postmaster.pid").unlink(missing_ok=True)

    def _stop(self, run_as: _RunAs) -> None:
        info = _read_postmaster(self._pgdata)
        self._pg_ctl(run_as, "stop", "-m", "fast", "-t", f"{STOP_TIMEOUT_S:.0f}")
        if info is not None and Path(info.socket_dir).parent == SHORT_SOCKET_PARENT:
            # The server removed its socket; the empty /tmp dir would only pile up.
            with contextlib.suppress(OSError):
                Path(info.socket_dir).rmdir()

    def _initdb(self, run_as: _RunAs) -> None:
        if self._pgdata.exists() and any(self._pgdata.iterdir()):
            raise ConfigurationError(
                f"{self._pgdata} is not empty but holds no PostgreSQL cluster (no PG_VERSION): "
                f"remove it to let ragline create a new one"
            )
        args = ["-D", str(self._pgdata), "-U", SUPERUSER, "-E", "UTF8", "--no-locale"]
        # Trust on the socket (0700, owner only); host lines are moot with no TCP listener,
        # reject keeps them so should someone enable listen_addresses.
        args += ["--auth-local=trust", "--auth-host=reject", "--no-instructions"]
        self._run(run_as, "initdb", args, INITDB_TIMEOUT_S, "initdb")
        with (self._pgdata / "postgresql.conf").open("a") as conf:
            conf.write(
                "\n# ragline: socket and port, rewritten at every start because the socket\n"
                f"# path depends on where the data dir lives.\ninclude_if_exists = '{_CONF_NAME}'\n"
            )

    def _check_version(self, run_as: _RunAs) -> None:
        data_major = (self._pgdata / "PG_VERSION").read_text().strip()
        output = self._run(run_as, "pg_ctl", ["--version"], 10.0, "pg_ctl --version")
        bin_major = output.split()[-1].split(".")[0]
        if data_major != bin_major:
            raise ConfigurationError(
                f"{self._pgdata} holds a PostgreSQL {data_major} cluster but the bundled server "
                f"is PostgreSQL {bin_major}: dump and restore it, or remove it to start afresh"
            )

    def _write_conf(self, socket_dir: Path, run_as: _RunAs) -> None:
        path = self._pgdata / _CONF_NAME
        path.write_text(
            "# Written by ragline at every start; edits are lost.\n"
            "listen_addresses = ''\n"
            f"port = {self._port}\n"
            f"unix_socket_directories = '{socket_dir}'\n"
            "unix_socket_permissions = 0700\n"
        )
        os.chown(path, run_as.uid, run_as.gid)

    def _pg_ctl(self, run_as: _RunAs, action: str, *args: str) -> None:
        timeout_s = max(START_TIMEOUT_S, STOP_TIMEOUT_S) + 15.0
        args_ = ["-D", str(self._pgdata), "-w", action, *args]
        self._run(run_as, "pg_ctl", args_, timeout_s, f"pg_ctl {action}")

    def _run(
        self, run_as: _RunAs, program: str, args: list[str], timeout_s: float, label: str
    ) -> str:
        """Run a bundled PostgreSQL program as ``run_as``; failures append to the log."""
        command = [str(_bin_dir() / program), *args]
        with tempfile.TemporaryFile("w+") as output:
            try:
                # Output goes to a file, not a pipe: with a pipe, pg_ctl start can hang
                # (pgserver saw this). A new session keeps the server out of our
                # terminal's Ctrl-C; it stops through release() or stop().
                subprocess.run(
                    command,
                    stdin=subprocess.DEVNULL,
                    stdout=output,
                    stderr=subprocess.STDOUT,
                    cwd=self._pg_dir,
                    env=_clean_env(),
                    timeout=timeout_s,
                    check=True,
                    start_new_session=True,
                    user=run_as.uid if run_as.switch else None,
                    group=run_as.gid if run_as.switch else None,
                    extra_groups=list(run_as.groups) if run_as.switch else None,
                )
            except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
                output.seek(0)
                raise self._failure(label, command, output.read(), exc) from exc
            output.seek(0)
            return output.read()

    def _failure(
        self, label: str, command: list[str], output: str, exc: subprocess.SubprocessError
    ) -> DatabaseUnavailable:
        with contextlib.suppress(OSError), self._log.open("a") as log:
            log.write(f"ragline: {' '.join(command)}\n{output}\n")
        with contextlib.suppress(OSError):
            output += "\n" + self._log.read_text()[-4000:]
        timed_out = isinstance(exc, subprocess.TimeoutExpired)
        what = "timed out" if timed_out else f"failed ({_last_log_line(output)})"
        return DatabaseUnavailable(
            one_line(f"embedded PostgreSQL: {label} {what}; log: {self._log}")
        )


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
