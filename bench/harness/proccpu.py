"""CPU seconds of processes, from ``/proc/PID/stat`` (Linux): one process's own, and a
local PostgreSQL server's.

The server's is its processes' own (``utime`` + ``stime``) plus what they collected from
their exited children (``cutime`` + ``cstime``: the postmaster reaps every backend, so a
closed connection's CPU lands there). The difference across a run is the server's share
of it (backends, WAL writer, checkpointer; anything else the server does meanwhile too).
Only for a server on this machine, visible to this user; ``None`` elsewhere (another
host, not Linux), and a benchmark then says it could not count it.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["postgres_cpu_s", "process_cpu_s"]

_PROC = Path("/proc")


def process_cpu_s(pid: int) -> float:
    """CPU seconds process ``pid`` has used so far (its reaped children's not counted)."""
    _, fields = _stat((_PROC / str(pid) / "stat").read_text())
    return _ticks(fields, children=False) / os.sysconf("SC_CLK_TCK")


def postgres_cpu_s() -> float | None:
    """Total CPU seconds of the processes named ``postgres`` now, their reaped children's
    included (None: none visible).

    The processes are read one after another, so a backend reaped between the reading
    of the postmaster and its own would be counted nowhere: the read is taken again
    until the same processes are there before and after it."""
    if not _PROC.is_dir():
        return None
    total: float | None = None
    for _ in range(_STABLE_TRIES):
        before = _pids()
        total = _postgres_cpu_once()
        if _pids() == before:
            break
    return total


#: Reads of the server's processes tried before one that no process left meanwhile.
_STABLE_TRIES = 5


def _pids() -> set[str]:
    return {p.name for p in _PROC.iterdir() if p.name.isdigit()}


def _postgres_cpu_once() -> float | None:
    ticks, found = 0, False
    for stat in _PROC.glob("[0-9]*/stat"):
        try:
            name, fields = _stat(stat.read_text())
        except OSError:  # exited meanwhile, or not ours to read
            continue
        if name == "postgres":
            ticks += _ticks(fields, children=True)
            found = True
    return ticks / os.sysconf("SC_CLK_TCK") if found else None


def _stat(raw: str) -> tuple[str, list[str]]:
    """The command name (in parentheses, may hold spaces) and the fields after it."""
    return raw[raw.find("(") + 1 : raw.rfind(")")], raw[raw.rfind(")") + 2 :].split()


def _ticks(fields: list[str], *, children: bool) -> int:
    # utime, stime, cutime, cstime: fields 14-17 of proc(5), 12-15 after the name.
    return sum(int(v) for v in fields[11 : 15 if children else 13])
