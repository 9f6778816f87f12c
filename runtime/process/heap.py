"""glibc's malloc heap: the arena cap and thresholds set when ``python -m runtime`` starts,
and handing freed heap back to the system after a large job (:func:`release_free_heap`).

Why each setting holds, with the figures that chose it: docs/benchmark-history.md.
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys

#: glibc's mallopt parameter numbers (malloc.h).
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8
#: Arenas a worker process keeps; ``MALLOC_ARENA_MAX`` in the environment wins.
WORKER_ARENAS = 2
#: Allocations from this size up get their own mapping, returned to the system when freed
#: (glibc's default, 128 KiB, but fixed: see :func:`limit_malloc_arenas`).
MMAP_THRESHOLD_BYTES = 128 * 1024
#: Free memory at the top of the heap beyond this is returned to the system.
TRIM_THRESHOLD_BYTES = 1024 * 1024


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:  # not glibc (musl has no arenas to cap)
        return None
    return libc if hasattr(libc, "mallopt") else None


def limit_malloc_arenas(arenas: int = WORKER_ARENAS) -> bool:
    """Cap glibc's malloc arenas and fix its mmap and trim thresholds; returns whether the
    arena cap was set.

    glibc gives a thread that contends for the allocator its own arena (up to 8 per core)
    and rarely returns what is freed in one to the system. A worker's threads (PyMuPDF
    parsing, tokenizing, the vector index, asyncpg's event loop) each grew one: on
    bench.ingest's corpus the two all-stage workers peaked at 421 and 478 MB, and at 378
    and 352 MB with two arenas, for no measurable CPU.

    glibc also raises its mmap threshold each time a large block is freed (up to 32 MB),
    after which a document's large buffers (page texts, MuPDF's pixmaps, the chunker's
    arrays) come from the heap, and the heap stays as large as the largest document made
    it. Fixed thresholds keep large blocks in their own mappings (bench.ingest's two
    workers: 405 / 515 MB → 390 / 382 MB, the same CPU). ``MALLOC_MMAP_THRESHOLD_`` or
    ``MALLOC_TRIM_THRESHOLD_`` in the environment leave that to the environment.
    """
    libc = _glibc()
    if libc is None:
        return False
    if not (os.environ.get("MALLOC_MMAP_THRESHOLD_") or os.environ.get("MALLOC_TRIM_THRESHOLD_")):
        libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
        libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)
    if os.environ.get("MALLOC_ARENA_MAX"):
        return False
    return bool(libc.mallopt(M_ARENA_MAX, arenas))


#: Free heap left in place after a job: trimmed only past this.
KEEP_FREE_BYTES = 64 * 1024 * 1024


class _Mallinfo2(ctypes.Structure):
    """glibc's ``struct mallinfo2`` (2.33 and later); ``fordblks`` is the free heap."""

    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
            "uordblks", "fordblks", "keepcost",
        )
    ]  # fmt: skip


def _trimming_glibc() -> ctypes.CDLL | None:
    libc = _glibc()
    if libc is None or not hasattr(libc, "malloc_trim"):
        return None
    if hasattr(libc, "mallinfo2"):
        libc.mallinfo2.restype = _Mallinfo2
    return libc


_LIBC = _trimming_glibc()


def free_heap_bytes() -> int | None:
    """Bytes free in the malloc heap of every arena (None: not known, off glibc 2.33+)."""
    if _LIBC is None or not hasattr(_LIBC, "mallinfo2"):
        return None
    return int(_LIBC.mallinfo2().fordblks)


def release_free_heap(keep: int = KEEP_FREE_BYTES) -> bool:
    """``malloc_trim(0)`` once more than ``keep`` bytes of the heap are free: whether
    memory was returned (False off glibc, or with less free). A few ms when it trims."""
    if _LIBC is None:
        return False
    free = free_heap_bytes()
    if free is not None and free <= keep:
        return False
    return bool(_LIBC.malloc_trim(0))
