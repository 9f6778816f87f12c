"""Peak resident memory of a process tree, sampled from ``/proc`` (Linux).

``wait4``'s ``ru_maxrss`` (bench.harness.rusage) is the largest single process's peak;
``ingest`` runs a parser process beside itself, so what the user's machine holds at once
is their sum. :class:`TreeRss` samples it in a thread: the sum of ``VmRSS`` over every
descendant of a process (pages shared between them, such as a forked child's, count once
per process, as ``top`` shows them), its maximum kept, with when it was sampled and each
process's share of it (what was running then). A sample can miss a short spike.
"""

from __future__ import annotations

import threading
import time
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
    return sum(tree_parts_kb(root).values())


def tree_parts_kb(root: int) -> dict[str, int]:
    """Each descendant of ``root``'s ``VmRSS`` (KiB) now, by :func:`process_name`."""
    parts: dict[str, int] = {}
    for pid in descendants(_parents(), root):
        try:
            kb = int(_status(pid).get("VmRSS", "0 kB").split()[0])
            name = process_name(pid)
        except (OSError, ValueError):
            continue
        parts[name] = parts.get(name, 0) + kb
    return parts


def process_name(pid: int) -> str:
    """What a process runs: a Python module (``runtime``, ``stages.parsing.child``), a
    Python script's name, or the command's."""
    args = (_PROC / str(pid) / "cmdline").read_bytes().split(b"\0")
    words = [a.decode(errors="replace") for a in args if a]
    if not words:
        return "?"
    if "-m" in words[:-1]:
        return words[words.index("-m") + 1]
    if "python" in Path(words[0]).name and len(words) > 1 and not words[1].startswith("-"):
        return Path(words[1]).name
    return Path(words[0]).name


class TreeRss:
    """``with TreeRss(pid) as peak: ...``; then ``peak.max_mb``."""

    def __init__(self, root: int, every_s: float = SAMPLE_EVERY_S) -> None:
        self.root = root
        self.every_s = every_s
        self.max_kb = 0
        #: When the maximum was sampled (``time.time()``) and each process's share of it.
        self.max_at = 0.0
        self.max_parts: dict[str, int] = {}
        self.started = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @property
    def max_mb(self) -> float:
        return self.max_kb / 1024

    def _run(self) -> None:
        while not self._stop.is_set():
            parts = tree_parts_kb(self.root)
            if sum(parts.values()) > self.max_kb:
                self.max_kb, self.max_at, self.max_parts = sum(parts.values()), time.time(), parts
            self._stop.wait(self.every_s)

    def __enter__(self) -> TreeRss:
        self.started = time.time()
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
