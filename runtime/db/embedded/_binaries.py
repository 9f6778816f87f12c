"""pgserver's PostgreSQL binaries, or, as root, a copy that the server user can reach."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.metadata
import importlib.util
import logging
import os
import re
import secrets
import shutil
import stat
import tempfile
import time
from pathlib import Path

from runtime.db.embedded._accounts import RunAs
from runtime.db.embedded._paths import RELOCATED_PARENT, barrier, check_shell_safe, make_var_tmp
from runtime.db.embedded._users import file_lock
from runtime.errors import ConfigurationError, DatabaseUnavailable, one_line

logger = logging.getLogger(__name__)

#: As root, waiting for another process copying the binaries (about 4 s on a slow disk).
BINARY_COPY_TIMEOUT_S = 120.0


# The parts of pgserver's pginstall/ that initdb, pg_ctl and postgres use.
PGINSTALL_PARTS = ("bin", "lib", "share")


@functools.cache
def pgserver_dir() -> Path:
    """The installed ``pgserver`` package directory (its binaries are in ``pginstall/``)."""
    # find_spec locates the wheel without importing pgserver, whose import has side effects.
    spec = importlib.util.find_spec("pgserver")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigurationError(
            "the embedded PostgreSQL needs the 'pgserver' package: pip install pgserver, "
            "or set DATABASE_URL"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def bin_dir(run_as: RunAs) -> Path:
    """The bin directory to run: pgserver's own, or a copy that ``run_as`` can reach."""
    package = pgserver_dir()
    if not any(barrier(package.parent / part, run_as) for part in server_parts(package)):
        check_shell_safe(package)
        return package / "pginstall" / "bin"
    return reachable_copy(package) / package.name / "pginstall" / "bin"


def server_parts(package: Path) -> list[str]:
    """What the server needs, relative to the site-packages dir holding ``package``.

    Not ``pginstall/include`` (headers for building extensions, half of the files). The
    auditwheel-vendored libraries (libpq for initdb and pg_ctl) sit next to the package,
    and the binaries find them through ``$ORIGIN/../../../pgserver.libs``; copying both
    with the same layout keeps that path valid.
    """
    parts = [f"{package.name}/pginstall/{name}" for name in PGINSTALL_PARTS]
    libs = package.with_name(f"{package.name}.libs")
    return [*parts, libs.name] if libs.is_dir() else parts


def copy_dir(package: Path) -> Path:
    digest = hashlib.sha256(os.fsencode(os.path.realpath(package))).hexdigest()[:16]
    version = re.sub(r"[^A-Za-z0-9.+-]", "_", pgserver_version(package))
    return RELOCATED_PARENT / f"ragline-pginstall-{version}-{digest}"


def pgserver_version(package: Path) -> str:
    found = importlib.metadata.distributions(name=package.name, path=[str(package.parent)])
    return next((dist.version for dist in found), "unknown")


def reachable_copy(package: Path) -> Path:
    """A complete root-owned copy of the server's files under /var/tmp, made if needed.

    Every process and data dir using the same pgserver shares it; a dedicated lock keeps
    two processes from copying at once, and the copy is made in a temporary directory
    then renamed, so nobody ever sees half of it.
    """
    target = copy_dir(package)
    lock = target.with_name(f"{target.name}.lock")
    try:
        make_var_tmp()
        with file_lock(lock, BINARY_COPY_TIMEOUT_S, "copying the PostgreSQL binaries"):
            parts = server_parts(package)
            expected = listing(package.parent, parts)
            if not is_copy_of(target, parts, expected):
                copy_server(package, parts, target)
    except DatabaseUnavailable:
        raise  # the lock timed out; it is an OSError too (ConnectionError)
    except OSError as exc:
        raise ConfigurationError(uncopyable(package, target, exc)) from exc
    return target


def uncopyable(package: Path, target: Path, exc: OSError) -> str:
    return one_line(
        f"the embedded PostgreSQL's user cannot reach {package}, and copying its binaries "
        f"to {target} failed ({exc.strerror or exc}): free space there, install ragline "
        f"where that user can read it, or set DATABASE_URL"
    )


def listing(root: Path, parts: list[str]) -> list[tuple[str, str]]:
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
                entries.append((entry.path[start:], describe(entry)))
    return sorted(entries)


def describe(entry: os.DirEntry[str]) -> str:
    if entry.is_symlink():
        return f"-> {os.readlink(entry.path)}"
    return str(entry.stat(follow_symlinks=False).st_size)


def is_copy_of(target: Path, parts: list[str], expected: list[tuple[str, str]]) -> bool:
    try:
        st = target.lstat()
    except FileNotFoundError:
        return False
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise ConfigurationError(
            f"{target} must be a directory owned by root and writable by it only (ragline "
            f"copies the PostgreSQL binaries there): remove it"
        )
    return listing(target, parts) == expected


def copy_server(package: Path, parts: list[str], target: Path) -> None:
    started = time.monotonic()
    temp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        for part in parts:
            shutil.copytree(package.parent / part, temp / part, symlinks=True)
        open_up(temp)
        swap_in(temp, target)
    finally:
        shutil.rmtree(temp, ignore_errors=True)  # left only when something failed
    logger.info(
        "copied the PostgreSQL binaries from %s, which the server's user cannot reach, to "
        "%s in %.1f s",
        package,
        target,
        time.monotonic() - started,
    )


def open_up(tree: Path) -> None:
    """Let everyone read the copy, and run what was executable: it holds no secret."""
    for directory, _dirs, files in os.walk(tree):
        os.chmod(directory, 0o755)
        for name in files:
            path = os.path.join(directory, name)
            if not os.path.islink(path):
                executable = os.stat(path).st_mode & 0o111
                os.chmod(path, 0o755 if executable else 0o644)


def swap_in(temp: Path, target: Path) -> None:
    """Rename ``temp`` to ``target``, replacing an incomplete copy (under the copy lock)."""
    stale = target.with_name(f".{target.name}.stale-{secrets.token_hex(4)}")
    with contextlib.suppress(FileNotFoundError):
        # Servers started from the old copy keep running: they load files by path, and
        # the path now leads to the complete copy.
        target.rename(stale)
    temp.rename(target)
    shutil.rmtree(stale, ignore_errors=True)
