"""CPU seconds a local PostgreSQL server has used: its processes' own (``utime`` +
``stime``) plus what they collected from their exited children (``cutime`` + ``cstime``:
the postmaster reaps every backend, so a closed connection's CPU lands there).

The difference across a run is the server's share of it (backends, WAL writer,
checkpointer; anything else the server does meanwhile too). Read from ``/proc``, so only
for a server on this machine, visible to this user; ``None`` elsewhere (another host, not
Linux), and a benchmark then says it could not count it.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["postgres_cpu_s"]

_PROC = Path("/proc")


def postgres_cpu_s() -> float | None:
    """Total CPU seconds of the processes named ``postgres`` now (None: none visible)."""
    if not _PROC.is_dir():
        return None
    ticks, found = 0, False
    for stat in _PROC.glob("[0-9]*/stat"):
        try:
            raw = stat.read_text()
        except OSError:  # exited meanwhile, or not ours to read
            continue
        # The command name sits in parentheses and may hold spaces; fields follow it.
        name = raw[raw.find("(") + 1 : raw.rfind(")")]
        if name != "postgres":
            continue
        fields = raw[raw.rfind(")") + 2 :].split()
        # utime, stime, cutime, cstime: fields 14-17 of proc(5), 12-15 after the name.
        ticks += sum(int(v) for v in fields[11:15])
        found = True
    return ticks / os.sysconf("SC_CLK_TCK") if found else None
