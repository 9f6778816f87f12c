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
import fcntl
import functools
import hashlib
import importlib.metadata
import importlib.util
import logging
import os
import pwd
import re
import secrets
import shutil
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
#: As root, waiting for another process copying the binaries (about 4 s on a slow disk).
BINARY_COPY_TIMEOUT_S = 120.0
#: Waiting for another process's start or stop, which are bounded by the timeouts above.
LOCK_TIMEOUT_S = START_TIMEOUT_S + INITDB_TIMEOUT_S + BINARY_COPY_TIMEOUT_S + 30.0
LOCK_POLL_S = 0.05
#: As root, PostgreSQL runs as this user when it exists (a PostgreSQL install's account) ...
EXISTING_SERVICE_USER = "postgres"
#: ... else as this system user, which ragline creates (no home, no login shell).
SERVICE_USER = "ragline-pg"
#: useradd/adduser create an account in well under a second; this bounds a hung one.
USER_ADD_TIMEOUT_S = 60.0
#: As root, the cluster goes under here when the service user cannot reach the data dir.
RELOCATED_PARENT = Path("/var/tmp")
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
# The parts of pgserver's pginstall/ that initdb, pg_ctl and postgres use.
_PGINSTALL_PARTS = ("bin", "lib", "share")
_LOCATION_NAME = "pg.location"
# Searched after $PATH, which may lack the sbin directories (e.g. under sudo or cron).
_SBIN_DIRS = ("/usr/sbin", "/sbin", "/usr/bin", "/bin")
_NOLOGIN_SHELLS = ("/usr/sbin/nologin", "/sbin/nologin", "/bin/false")

logger = logging.getLogger(__name__)
# Cluster directories outside their data dir already logged by this process.
_announced: set[Path] = set()


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


def _run_as(cluster_dir: Path | None = None) -> _RunAs:
    """This process's user; as root, the unprivileged user to run PostgreSQL as.

    As root: the owner of ``cluster_dir`` when it exists (so a cluster keeps its user even
    if a ``postgres`` account appears later), else :func:`_service_user`.
    """
    if os.geteuid() != 0:
        entry = pwd.getpwuid(os.geteuid())
        return _RunAs(entry.pw_name, entry.pw_uid, entry.pw_gid, tuple(os.getgroups()), False)
    entry = _owner(cluster_dir) or _service_user()
    groups = tuple(os.getgrouplist(entry.pw_name, entry.pw_gid))
    return _RunAs(entry.pw_name, entry.pw_uid, entry.pw_gid, groups, True)


def _owner(path: Path | None) -> pwd.struct_passwd | None:
    """The account owning ``path``; None if there is none, it is root, or ``path`` is absent."""
    if path is None:
        return None
    try:
        uid = path.stat().st_uid
        return pwd.getpwuid(uid) if uid != 0 else None
    except (FileNotFoundError, KeyError):
        return None


def _service_user(preferred: str | None = None, fallback: str | None = None) -> pwd.struct_passwd:
    """User ``preferred`` if it exists, else ``fallback``, created as a system user if needed.

    They default to :data:`EXISTING_SERVICE_USER` and :data:`SERVICE_USER`, read at call time.

    :raises ConfigurationError: neither exists and ``fallback`` cannot be created.
    """
    preferred = preferred or EXISTING_SERVICE_USER
    fallback = fallback or SERVICE_USER
    for name in (preferred, fallback):
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name)
    _create_system_user(fallback, preferred)
    try:
        return pwd.getpwnam(fallback)
    except KeyError:
        reason = f"the account tool reported success but '{fallback}' does not exist"
        raise ConfigurationError(_no_service_user(preferred, fallback, reason)) from None


def _create_system_user(name: str, preferred: str) -> None:
    command = _user_add_command(name)
    if command is None:
        reason = "neither useradd nor adduser is installed"
        raise ConfigurationError(_no_service_user(preferred, name, reason))
    try:
        subprocess.run(
            command,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            env=_clean_env(),
            timeout=USER_ADD_TIMEOUT_S,
            check=True,
        )
    except subprocess.CalledProcessError as exc:
        with contextlib.suppress(KeyError):
            pwd.getpwnam(name)
            return  # another process created it at the same time
        reason = _last_log_line(f"{exc.stdout}\n{exc.stderr}")
        raise ConfigurationError(_no_service_user(preferred, name, reason)) from exc
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ConfigurationError(_no_service_user(preferred, name, str(exc))) from exc
    logger.info("created system user %s to run the embedded PostgreSQL", name)


def _user_add_command(name: str) -> list[str] | None:
    search = os.pathsep.join([os.environ.get("PATH", ""), *_SBIN_DIRS])
    shell = next((s for s in _NOLOGIN_SHELLS if Path(s).exists()), _NOLOGIN_SHELLS[-1])
    if useradd := shutil.which("useradd", path=search):
        options = ["--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent"]
        return [useradd, *options, "--shell", shell, name]
    adduser = shutil.which("adduser", path=search)
    if adduser is None:
        return None
    if Path(adduser).resolve().name == "busybox":  # Alpine: short options only
        return [adduser, "-S", "-D", "-H", "-h", "/nonexistent", "-s", shell, name]
    return [adduser, "--system", "--group", "--no-create-home", "--shell", shell, name]


def _no_service_user(preferred: str, name: str, reason: str) -> str:
    return one_line(
        f"ragline runs as root, which the embedded PostgreSQL refuses, and there is no user "
        f"'{preferred}' to run it as; creating user '{name}' failed ({reason}): set "
        f"DATABASE_URL or run ragline as a non-root user"
    )


@functools.cache
def _pgserver_dir() -> Path:
    """The installed ``pgserver`` package directory (its binaries are in ``pginstall/``)."""
    # find_spec locates the wheel without importing pgserver, whose import has side effects.
    spec = importlib.util.find_spec("pgserver")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigurationError(
            "the embedded PostgreSQL needs the 'pgserver' package: pip install pgserver, "
            "or set DATABASE_URL"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def _binaries(run_as: _RunAs) -> Path:
    """The bin directory to run: pgserver's own, or a copy that ``run_as`` can reach."""
    package = _pgserver_dir()
    if not any(_barrier(package.parent / part, run_as) for part in _server_parts(package)):
        _check_shell_safe(package)
        return package / "pginstall" / "bin"
    return _reachable_copy(package) / package.name / "pginstall" / "bin"


def _server_parts(package: Path) -> list[str]:
    """What the server needs, relative to the site-packages dir holding ``package``.

    Not ``pginstall/include`` (headers for building extensions, half of the files). The
    auditwheel-vendored libraries (libpq for initdb and pg_ctl) sit next to the package,
    and the binaries find them through ``$ORIGIN/../../../pgserver.libs``; copying both
    with the same layout keeps that path valid.
    """
    parts = [f"{package.name}/pginstall/{name}" for name in _PGINSTALL_PARTS]
    libs = package.with_name(f"{package.name}.libs")
    return [*parts, libs.name] if libs.is_dir() else parts


def _copy_dir(package: Path) -> Path:
    digest = hashlib.sha256(os.fsencode(os.path.realpath(package))).hexdigest()[:16]
    version = re.sub(r"[^A-Za-z0-9.+-]", "_", _pgserver_version(package))
    return RELOCATED_PARENT / f"ragline-pginstall-{version}-{digest}"


def _pgserver_version(package: Path) -> str:
    found = importlib.metadata.distributions(name=package.name, path=[str(package.parent)])
    return next((dist.version for dist in found), "unknown")


def _reachable_copy(package: Path) -> Path:
    """A complete root-owned copy of the server's files under /var/tmp, made if needed.

    Every process and data dir using the same pgserver shares it; a dedicated lock keeps
    two processes from copying at once, and the copy is made in a temporary directory
    then renamed, so nobody ever sees half of it.
    """
    target = _copy_dir(package)
    lock = target.with_name(f"{target.name}.lock")
    try:
        _make_var_tmp()
        with _flock(lock, BINARY_COPY_TIMEOUT_S, "copying the PostgreSQL binaries"):
            parts = _server_parts(package)
            expected = _listing(package.parent, parts)
            if not _is_copy_of(target, parts, expected):
                _copy_server(package, parts, target)
    except DatabaseUnavailable:
        raise  # the lock timed out; it is an OSError too (ConnectionError)
    except OSError as exc:
        raise ConfigurationError(_uncopyable(package, target, exc)) from exc
    return target


def _make_var_tmp() -> None:
    if not RELOCATED_PARENT.is_dir():
        RELOCATED_PARENT.mkdir(parents=True, exist_ok=True)
        RELOCATED_PARENT.chmod(0o1777)  # what a stock /var/tmp is


def _uncopyable(package: Path, target: Path, exc: OSError) -> str:
    return one_line(
        f"the embedded PostgreSQL's user cannot reach {package}, and copying its binaries "
        f"to {target} failed ({exc.strerror or exc}): free space there, install ragline "
        f"where that user can read it, or set DATABASE_URL"
    )


def _listing(root: Path, parts: list[str]) -> list[tuple[str, str]]:
    """Every entry under ``root/part``: its path relative to ``root``, and its size or kind.

    Comparing listings tells a complete copy from one a /var/tmp cleaner has thinned, or
    one a crash truncated (sizes differ), for the cost of a few hundred stat calls.
    """
    start = len(str(root)) + 1
    pending = [str(root / part) for part in parts]
    entries: list[tuple[str, str]] = []
    while pending:
        directory = pending.pop()
        try:
            with os.scandir(directory) as scan:
                found = list(scan)
        except FileNotFoundError:
            entries.append((directory[start:], "missing"))
            continue
        entries.append((directory[start:], "dir"))
        for entry in found:
            if entry.is_dir(follow_symlinks=False):
                pending.append(entry.path)
            else:
                entries.append((entry.path[start:], _describe(entry)))
    return sorted(entries)


def _describe(entry: os.DirEntry[str]) -> str:
    if entry.is_symlink():
        return f"-> {os.readlink(entry.path)}"
    return str(entry.stat(follow_symlinks=False).st_size)


def _is_copy_of(target: Path, parts: list[str], expected: list[tuple[str, str]]) -> bool:
    try:
        st = target.lstat()
    except FileNotFoundError:
        return False
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise ConfigurationError(
            f"{target} must be a directory owned by root and writable by it only (ragline "
            f"copies the PostgreSQL binaries there): remove it"
        )
    return _listing(target, parts) == expected


def _copy_server(package: Path, parts: list[str], target: Path) -> None:
    started = time.monotonic()
    temp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        for part in parts:
            shutil.copytree(package.parent / part, temp / part, symlinks=True)
        _open_up(temp)
        _swap_in(temp, target)
    finally:
        shutil.rmtree(temp, ignore_errors=True)  # left only when something failed
    logger.info(
        "copied the PostgreSQL binaries from %s, which the server's user cannot reach, to "
        "%s in %.1f s",
        package,
        target,
        time.monotonic() - started,
    )


def _open_up(tree: Path) -> None:
    """Let everyone read the copy, and run what was executable: it holds no secret."""
    for directory, _dirs, files in os.walk(tree):
        os.chmod(directory, 0o755)
        for name in files:
            path = os.path.join(directory, name)
            if not os.path.islink(path):
                executable = os.stat(path).st_mode & 0o111
                os.chmod(path, 0o755 if executable else 0o644)


def _swap_in(temp: Path, target: Path) -> None:
    """Rename ``temp`` to ``target``, replacing an incomplete copy (under the copy lock)."""
    stale = target.with_name(f".{target.name}.stale-{secrets.token_hex(4)}")
    with contextlib.suppress(FileNotFoundError):
        # Servers started from the old copy keep running: they load files by path, and
        # the path now leads to the complete copy.
        target.rename(stale)
    temp.rename(target)
    shutil.rmtree(stale, ignore_errors=True)


def _can_enter(path: Path, user: _RunAs) -> bool:
    # Plain mode bits only: POSIX ACLs are not consulted, so an ACL grant may be missed
    # (the error then names the directory, and DATABASE_URL remains a way out).
    st = path.stat()
    if st.st_uid == user.uid:
        return bool(st.st_mode & stat.S_IXUSR)
    if st.st_gid in user.groups:
        return bool(st.st_mode & stat.S_IXGRP)
    return bool(st.st_mode & stat.S_IXOTH)


def _barrier(path: Path, user: _RunAs) -> Path | None:
    """The first directory on the way to ``path`` that ``user`` cannot enter, if any."""
    if not user.switch:
        return None
    path = path.resolve()
    for directory in [*reversed(path.parents), path]:
        if directory.exists() and not _can_enter(directory, user):
            return directory
    return None


def _check_reachable(path: Path, user: _RunAs, what: str) -> None:
    barrier = _barrier(path, user)
    if barrier is not None:
        raise ConfigurationError(
            f"the embedded PostgreSQL runs as user '{user.name}', who cannot enter "
            f"{barrier} (needed for {what}): choose a RAGLINE_DATA_DIR it can reach, "
            f"grant it access (e.g. chmod o+x {barrier}), or set DATABASE_URL"
        )


def _relocated_dir(data_dir: Path) -> Path:
    digest = hashlib.sha256(os.fsencode(os.path.realpath(data_dir))).hexdigest()[:16]
    return RELOCATED_PARENT / f"ragline-pg-{digest}"


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
def _flock(
    path: Path, timeout_s: float, holder: str = "starting or stopping the embedded PostgreSQL"
) -> Iterator[None]:
    # O_NOFOLLOW: the copy lock lives in /var/tmp, where anyone may plant a symlink.
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
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
                        f"another process {holder}"
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

    def pids(self) -> list[int]:
        """The pids of registered users (call :meth:`prune` first for the live ones)."""
        found = {path.name.partition(".")[0] for path in self._dir.glob("*.*")}
        return sorted(int(pid) for pid in found if pid.isdigit())

    @staticmethod
    def _alive(path: Path) -> bool:
        pid_text = path.name.partition(".")[0]
        if not pid_text.isdigit():
            return False
        identity = _proc_identity(int(pid_text))
        return identity is not None and identity == path.read_text().strip()


class EmbeddedPostgres:
    """A private PostgreSQL cluster for ``data_dir``, shared by the processes using it.

    The cluster lives in ``<data_dir>/pg``, or where ``<data_dir>/pg.location`` says (see
    the module docstring). Every method is synchronous and may block for seconds (initdb,
    start, stop, waiting for another process's lock): call it in a worker thread from async
    code.
    """

    def __init__(self, data_dir: Path, *, port: int = 5432) -> None:
        self._data_dir = Path(data_dir).resolve()
        self._port = port
        self._location_file = self._data_dir / _LOCATION_NAME
        self._use(self._data_dir / "pg")
        self._users = _Users(self._data_dir / "users")
        self._token = secrets.token_hex(4)
        self._registration: Path | None = None
        self._acquired_dsn: str | None = None

    @property
    def dsn(self) -> str:
        """The asyncpg DSN: the one ``acquire`` returned, else where the cluster would be."""
        if self._acquired_dsn is not None:
            return self._acquired_dsn
        self._locate()
        return _dsn(str(self._socket_dir()), self._port)

    @property
    def log_path(self) -> Path:
        self._locate()
        return self._log

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
        self._locate()
        run_as = _run_as(self._pg_dir)
        self._prepare(run_as)
        with _flock(self._data_dir / "lock", LOCK_TIMEOUT_S):
            self._settle_location(run_as)
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
            self._locate()
            if self._users.prune() == 0 and self._running() is not None:
                self._stop(_run_as(self._pg_dir))

    def stop(self) -> bool:
        """Stop the cluster now, whoever uses it; return False if it was not running."""
        self._locate()
        if not self._pgdata.is_dir():
            return False
        with _flock(self._data_dir / "lock", LOCK_TIMEOUT_S):
            self._users.clear()
            self._registration = None
            if self._running() is None:
                return False
            self._stop(_run_as(self._pg_dir))
            return True

    def registered(self) -> bool:
        """Whether this instance's entry in the users registry is there."""
        return self._registration is not None and self._registration.exists()

    def live_users(self) -> list[int]:
        """Pids of the live processes using the cluster, other than this one."""
        if not self._data_dir.is_dir():
            return []
        with _flock(self._data_dir / "lock", LOCK_TIMEOUT_S):
            self._users.prune()
            return [pid for pid in self._users.pids() if pid != os.getpid()]

    def is_running(self) -> bool:
        """Whether a server runs on this data dir and accepts connections on its socket."""
        self._locate()
        return self._running() is not None

    # -- where the cluster lives -------------------------------------------------------

    def _use(self, pg_dir: Path) -> None:
        self._pg_dir = pg_dir
        self._pgdata = pg_dir / "data"
        self._log = pg_dir / "log"

    def _locate(self) -> None:
        """Point at the cluster that ``pg.location`` records, else at ``<data_dir>/pg``."""
        self._use(self._recorded_location() or self._data_dir / "pg")

    def _recorded_location(self) -> Path | None:
        try:
            text = self._location_file.read_text().strip()
        except (FileNotFoundError, NotADirectoryError):
            return None
        if not text.startswith("/"):
            raise ConfigurationError(
                f"{self._location_file} must hold the absolute path of the embedded "
                f"PostgreSQL's directory, not {text!r}: fix or remove it"
            )
        return Path(text)

    def _settle_location(self, run_as: _RunAs) -> None:
        """Decide where the cluster lives (under the lock: every process must agree)."""
        recorded = self._recorded_location()
        default = self._data_dir / "pg"
        if recorded is None and not default.exists() and _barrier(self._data_dir, run_as):
            recorded = self._relocate()
        elif recorded is not None and not recorded.exists():
            logger.warning(
                "%s names %s, which no longer exists (removed by a /var/tmp cleaner?): "
                "creating a new, empty cluster there",
                self._location_file,
                recorded,
            )
        self._use(recorded or default)
        _check_shell_safe(self._pg_dir)
        _check_reachable(self._pg_dir.parent, run_as, "the embedded PostgreSQL's directory")
        if recorded is not None and recorded not in _announced:
            _announced.add(recorded)
            logger.info(
                "the embedded PostgreSQL for %s lives in %s (recorded in %s)",
                self._data_dir,
                recorded,
                self._location_file,
            )

    def _relocate(self) -> Path:
        """Record a cluster directory outside the data dir, which the server cannot enter."""
        _make_var_tmp()
        location = _relocated_dir(self._data_dir)
        # Written whole, then renamed: a crash leaves no half-written path behind.
        partial = self._location_file.with_name(f".{_LOCATION_NAME}.{os.getpid()}")
        partial.write_text(f"{location}\n")
        partial.replace(self._location_file)
        return location

    # -- setup -------------------------------------------------------------------------

    def _prepare(self, run_as: _RunAs) -> None:
        _pgserver_dir()  # fail early when pgserver is missing
        self._make_data_dir(run_as)
        if not os.access(self._data_dir, os.W_OK | os.X_OK):
            raise ConfigurationError(self._unwritable("permission denied"))

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
        try:
            self._data_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigurationError(self._unwritable(exc.strerror or str(exc))) from exc
        if run_as.switch:
            # Let only the service user's group in: it needs to reach pg/, nothing more.
            os.chown(self._data_dir, -1, run_as.gid)
            self._data_dir.chmod(0o710)

    def _unwritable(self, reason: str) -> str:
        return (
            f"ragline cannot create or write its data dir {self._data_dir} ({reason}): "
            f"choose a RAGLINE_DATA_DIR this user can write, or set DATABASE_URL"
        )

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
        command = [str(_binaries(run_as) / program), *args]
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
