"""The process's cores for model inference: one slot per usable core, shared by every
model that runs here (the local OCR, the local embedder).

A model call holds a slot while it computes, on one thread (its session's intra-op
threads are 1 by default). Concurrent stages then never run more inference threads than
there are cores, and a stage with work to spare (a document's images, an embed job's
batches) fills the cores the others leave idle. ``RAGLINE_INFERENCE_SLOTS`` overrides the
count. Why slots and not threads per model: docs/performance.md.
"""

from __future__ import annotations

import asyncio
import math
import os
import weakref
from pathlib import Path

import anyio

from runtime.settings import ENGINE_SETTINGS, EnvReader

#: cgroup v2's CPU quota of this process's group: ``max 100000`` or ``<quota> <period>``.
CGROUP_CPU_MAX = Path("/sys/fs/cgroup/cpu.max")

_limiters: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, anyio.CapacityLimiter] = (
    weakref.WeakKeyDictionary()
)


def usable_cores(cpu_max: Path = CGROUP_CPU_MAX) -> int:
    """Cores this process may use: those it is pinned to, capped by a cgroup CPU quota
    (a container given 1.5 CPUs on a 16-core host has 2, not 16)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    quota = _cgroup_quota(cpu_max)
    return max(1, min(cores, quota) if quota else cores)


def _cgroup_quota(cpu_max: Path) -> int | None:
    try:
        limit, period = cpu_max.read_text().split()[:2]
    except (OSError, ValueError):
        return None
    if limit == "max":
        return None
    try:
        return math.ceil(int(limit) / int(period))
    except (ValueError, ZeroDivisionError):
        return None


def inference_slots() -> int:
    """How many model calls may compute at once in this process (``RAGLINE_INFERENCE_SLOTS``,
    else :func:`usable_cores`)."""
    given = EnvReader(os.environ, ENGINE_SETTINGS).number("RAGLINE_INFERENCE_SLOTS", 0)
    return int(given) or usable_cores()


def inference_limiter() -> anyio.CapacityLimiter:
    """The running event loop's limiter of :func:`inference_slots` slots: pass it as
    ``limiter=`` to ``anyio.to_thread.run_sync`` for each model call."""
    loop = asyncio.get_running_loop()
    limiter = _limiters.get(loop)
    if limiter is None:
        limiter = _limiters[loop] = anyio.CapacityLimiter(inference_slots())
    return limiter
