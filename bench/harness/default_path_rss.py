"""Peak resident memory of a process tree, sampled from ``/proc`` (Linux).

``wait4``'s ``ru_maxrss`` (bench.harness.rusage) is the largest single process's peak;
``ingest`` runs a parser process beside itself, so what the user's machine holds at once
is their sum. :class:`TreeRss` samples it in a thread: the sum of ``VmRSS`` over every
descendant of a process (pages shared between them, such as a forked child's, count once
per process, as ``top`` shows them), its maximum kept. A sample can miss a short spike.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

_PROC = Path("/proc")
SAMPLE_EVERY_S = 0.2


def descendants(parents: Mapping[int, int], root: int) -> set[int]:
    """Every process below ``root`` (not ``root`` itself), given each process's parent."""
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    found: set[int] = set()
    todo = list(children.get(root, ()))
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo.extend(children.get(pid, ()))
    return found


def _status(pid: int) -> dict[str, str]:
    lines = (_PROC / str(pid) / "status").read_text().splitlines()
    return dict(line.split(":", 1) for line in lines if ":" in line)


def _parents() -> dict[int, int]:
    parents: dict[int, int] = {}
    for entry in _PROC.iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int(_status(int(entry.name))["PPid"])
            except (OSError, KeyError, ValueError):  # exited meanwhile
                continue
    return parents


def tree_rss_kb(root: int) -> int:
    """The summed ``VmRSS`` (KiB) of ``root``'s descendants now."""
    total = 0
    for pid in descendants(_parents(), root):
        try:
            total += int(_status(pid).get("VmRSS", "0 kB").split()[0])
        except (OSError, ValueError):
            continue
    return total


class TreeRss:
    """``with TreeRss(pid) as peak: ...``; then ``peak.max_mb``."""

    def __init__(self, root: int, every_s: float = SAMPLE_EVERY_S) -> None:
        self.root = root
        self.every_s = every_s
        self.max_kb = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @property
    def max_mb(self) -> float:
        return self.max_kb / 1024

    def _run(self) -> None:
        while not self._stop.is_set():
            self.max_kb = max(self.max_kb, tree_rss_kb(self.root))
            self._stop.wait(self.every_s)

    def __enter__(self) -> TreeRss:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join()
