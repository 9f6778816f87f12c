"""Where things may live: directories the server user can reach, socket paths that fit."""

from __future__ import annotations

import hashlib
import os
import re
import stat
from pathlib import Path

from runtime.db.embedded._accounts import RunAs
from runtime.errors import ConfigurationError

#: As root, the cluster goes under here when the service user cannot reach the data dir.
RELOCATED_PARENT = Path("/var/tmp")


#: sun_path is 108 bytes with the terminating NUL; PostgreSQL refuses longer socket paths.
MAX_SOCKET_PATH = 107


#: A short, fixed parent for socket dirs when ``pg/sock`` is too long. Not $TMPDIR, which
#: may itself be long.
SHORT_SOCKET_PARENT = Path("/tmp")


# pg_ctl runs postgres through /bin/sh with paths in double quotes, and
# unix_socket_directories is a comma/space-separated list: keep paths to a plain alphabet.
SAFE_SOCKET_DIR = re.compile(r"[A-Za-z0-9/._+-]+")


SHELL_UNSAFE = frozenset('"`$\\\n')


def make_var_tmp() -> None:
    if not RELOCATED_PARENT.is_dir():
        RELOCATED_PARENT.mkdir(parents=True, exist_ok=True)
        RELOCATED_PARENT.chmod(0o1777)  # what a stock /var/tmp is


def can_enter(path: Path, user: RunAs) -> bool:
    # Plain mode bits only: POSIX ACLs are not consulted, so an ACL grant may be missed
    # (the error then names the directory, and DATABASE_URL remains a way out).
    st = path.stat()
    if st.st_uid == user.uid:
        return bool(st.st_mode & stat.S_IXUSR)
    if st.st_gid in user.groups:
        return bool(st.st_mode & stat.S_IXGRP)
    return bool(st.st_mode & stat.S_IXOTH)


def barrier(path: Path, user: RunAs) -> Path | None:
    """The first directory on the way to ``path`` that ``user`` cannot enter, if any."""
    if not user.switch:
        return None
    path = path.resolve()
    for directory in [*reversed(path.parents), path]:
        if directory.exists() and not can_enter(directory, user):
            return directory
    return None


def check_reachable(path: Path, user: RunAs, what: str) -> None:
    blocked = barrier(path, user)
    if blocked is not None:
        raise ConfigurationError(
            f"the embedded PostgreSQL runs as user '{user.name}', who cannot enter "
            f"{blocked} (needed for {what}): choose a RAGLINE_DATA_DIR it can reach, "
            f"grant it access (e.g. chmod o+x {blocked}), or set DATABASE_URL"
        )


def relocated_dir(data_dir: Path) -> Path:
    digest = hashlib.sha256(os.fsencode(os.path.realpath(data_dir))).hexdigest()[:16]
    return RELOCATED_PARENT / f"ragline-pg-{digest}"


def check_shell_safe(path: Path) -> None:
    if SHELL_UNSAFE & set(str(path)):
        raise ConfigurationError(
            f'the embedded PostgreSQL cannot use a path containing any of " ` $ \\ or a '
            f"newline: {path}"
        )


def socket_fits(directory: Path, port: int) -> bool:
    text = str(directory)
    full = len(os.fsencode(text)) + len(f"/.s.PGSQL.{port}")
    return full <= MAX_SOCKET_PATH and SAFE_SOCKET_DIR.fullmatch(text) is not None


def short_socket_dir(pg_dir: Path) -> Path:
    digest = hashlib.sha256(os.fsencode(str(pg_dir))).hexdigest()[:16]
    return SHORT_SOCKET_PARENT / f"ragline-{digest}"
