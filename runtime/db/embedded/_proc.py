"""Processes of the embedded cluster: postmaster.pid, /proc, sockets and server output."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import msgspec


class Postmaster(msgspec.Struct, frozen=True):
    """What a running server wrote to ``postmaster.pid``."""

    pid: int
    port: int
    socket_dir: str
    shm_id: int


def clean_env() -> dict[str, str]:
    # PG* variables (PGPORT, PGDATA, PGHOST, ...) would change what the commands do.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env["LC_ALL"] = "C"
    return env


def proc_identity(pid: int) -> str | None:
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


def read_postmaster(data: Path) -> Postmaster | None:
    try:
        lines = (data / "postmaster.pid").read_text().splitlines()
    except (FileNotFoundError, NotADirectoryError):
        return None
    if len(lines) < 8 or not lines[0].strip().isdigit():
        return None  # being written, or not ours to interpret
    shm = lines[6].split()  # "<key> <shmid>" of the interlock SysV segment
    shm_id = int(shm[1]) if len(shm) == 2 and shm[1].isdigit() else -1
    return Postmaster(int(lines[0]), int(lines[3]), lines[4].strip(), shm_id)


def shm_attached(shm_id: int) -> int | None:
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


def accepts(socket_path: str) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(2.0)
        try:
            sock.connect(socket_path)
        except OSError:
            return False
    return True


def last_log_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    serious = [line for line in lines if "FATAL" in line or "ERROR" in line]
    return (serious or lines or ["no output"])[-1]
