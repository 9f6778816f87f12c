"""Worker ids that say where a worker runs: ``host:pid:ns.random``.

``ns`` is this process's PID namespace (the inode of ``/proc/self/ns/pid``, ``0`` where
there is none), so a process can tell that a lease owner is a process of its own host
and namespace, and whether that process still exists. Two containers sharing a host
name but not a PID namespace never take each other's jobs early.
"""

from __future__ import annotations

import functools
import os
import secrets
import socket
from pathlib import Path


@functools.cache
def _namespace() -> str:
    try:
        return format(os.stat("/proc/self/ns/pid").st_ino, "x")
    except OSError:
        return "0"


def host_prefix() -> str:
    """The start of every worker id of this host: ``host:``."""
    return f"{socket.gethostname()}:"


def new_worker_id() -> str:
    """``host:pid:ns.random``, unique per process start."""
    return f"{host_prefix()}{os.getpid()}:{_namespace()}.{secrets.token_hex(3)}"


def dead_here(owner: str) -> bool:
    """Whether ``owner`` is a worker id of this host and PID namespace whose process is
    gone. False when unsure (another host or namespace, an id of another shape, a pid that
    now belongs to another process): its lease then runs out as usual."""
    host, _, rest = owner.partition(":")
    pid_text, _, tail = rest.partition(":")
    ns = tail.partition(".")[0] if "." in tail else None
    if f"{host}:" != host_prefix() or ns != _namespace() or not pid_text.isdigit():
        return False
    pid = int(pid_text)
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False  # exists, another user's
    return _is_zombie(pid)


def _is_zombie(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return False
    return state in ("Z", "X")
