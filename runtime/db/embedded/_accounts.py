"""Who runs PostgreSQL: this user, or as root an unprivileged service account (made if needed)."""

from __future__ import annotations

import logging
import os
import pwd
import shutil
import subprocess
from pathlib import Path

import msgspec

from runtime.db.embedded._proc import clean_env, last_log_line
from runtime.errors import ConfigurationError, one_line

logger = logging.getLogger(__name__)

#: As root, PostgreSQL runs as this user when it exists (a PostgreSQL install's account) ...
EXISTING_SERVICE_USER = "postgres"


#: ... else as this system user, which ragline creates (no home, no login shell).
SERVICE_USER = "ragline-pg"


#: useradd/adduser create an account in well under a second; this bounds a hung one.
USER_ADD_TIMEOUT_S = 60.0


# Searched after $PATH, which may lack the sbin directories (e.g. under sudo or cron).
SBIN_DIRS = ("/usr/sbin", "/sbin", "/usr/bin", "/bin")


NOLOGIN_SHELLS = ("/usr/sbin/nologin", "/sbin/nologin", "/bin/false")


class RunAs(msgspec.Struct, frozen=True):
    """Who runs the PostgreSQL commands; ``switch`` when that is not this process's user."""

    name: str
    uid: int
    gid: int
    groups: tuple[int, ...]
    switch: bool


def run_as_for(cluster_dir: Path | None = None) -> RunAs:
    """This process's user; as root, the unprivileged user to run PostgreSQL as.

    As root: the owner of ``cluster_dir`` when it exists (so a cluster keeps its user even
    if a ``postgres`` account appears later), else :func:`service_user`.
    """
    if os.geteuid() != 0:
        entry = pwd.getpwuid(os.geteuid())
        return RunAs(entry.pw_name, entry.pw_uid, entry.pw_gid, tuple(os.getgroups()), False)
    entry = owner(cluster_dir) or service_user()
    groups = tuple(os.getgrouplist(entry.pw_name, entry.pw_gid))
    return RunAs(entry.pw_name, entry.pw_uid, entry.pw_gid, groups, True)


def owner(path: Path | None) -> pwd.struct_passwd | None:
    """The account owning ``path``; None if there is none, it is root, or ``path`` is absent."""
    if path is None:
        return None
    try:
        uid = path.stat().st_uid
        return pwd.getpwuid(uid) if uid != 0 else None
    except (FileNotFoundError, KeyError):
        return None


def service_user(preferred: str | None = None, fallback: str | None = None) -> pwd.struct_passwd:
    """User ``preferred`` if it exists, else ``fallback``, created as a system user if needed.

    They default to :data:`EXISTING_SERVICE_USER` and :data:`SERVICE_USER`, read at call time.

    :raises ConfigurationError: neither exists and ``fallback`` cannot be created.
    """
    preferred = preferred or EXISTING_SERVICE_USER
    fallback = fallback or SERVICE_USER
    for name in (preferred, fallback):
        if (entry := account(name)) is not None:
            return entry
    create_system_user(fallback, preferred)
    if (entry := account(fallback)) is None:
        reason = f"the account tool reported success but '{fallback}' does not exist"
        raise ConfigurationError(no_service_user(preferred, fallback, reason))
    return entry


def account(name: str) -> pwd.struct_passwd | None:
    """The account called ``name``; None if there is none."""
    try:
        return pwd.getpwnam(name)
    except KeyError:
        return None


def create_system_user(name: str, preferred: str) -> None:
    command = user_add_command(name)
    if command is None:
        reason = "neither useradd nor adduser is installed"
        raise ConfigurationError(no_service_user(preferred, name, reason))
    try:
        subprocess.run(
            command,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            env=clean_env(),
            timeout=USER_ADD_TIMEOUT_S,
            check=True,
        )
    except subprocess.CalledProcessError as exc:
        if account(name) is not None:
            return  # another process created it at the same time
        reason = last_log_line(f"{exc.stdout}\n{exc.stderr}")
        raise ConfigurationError(no_service_user(preferred, name, reason)) from exc
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ConfigurationError(no_service_user(preferred, name, str(exc))) from exc
    logger.info("created system user %s to run the embedded PostgreSQL", name)


def user_add_command(name: str) -> list[str] | None:
    search = os.pathsep.join([os.environ.get("PATH", ""), *SBIN_DIRS])
    shell = next((s for s in NOLOGIN_SHELLS if Path(s).exists()), NOLOGIN_SHELLS[-1])
    if useradd := shutil.which("useradd", path=search):
        options = ["--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent"]
        return [useradd, *options, "--shell", shell, name]
    adduser = shutil.which("adduser", path=search)
    if adduser is None:
        return None
    if Path(adduser).resolve().name == "busybox":  # Alpine: short options only
        return [adduser, "-S", "-D", "-H", "-h", "/nonexistent", "-s", shell, name]
    return [adduser, "--system", "--group", "--no-create-home", "--shell", shell, name]


def no_service_user(preferred: str, name: str, reason: str) -> str:
    return one_line(
        f"ragline runs as root, which the embedded PostgreSQL refuses, and there is no user "
        f"'{preferred}' to run it as; creating user '{name}' failed ({reason}): set "
        f"DATABASE_URL or run ragline as a non-root user"
    )
