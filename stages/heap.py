"""Handing freed heap memory back to the system after a large job.

glibc keeps freed small blocks in its heap; after a document (parsed, chunked, indexed)
that memory is free but still resident until ``malloc_trim`` returns its whole free pages.
The worker's peak is what counts (bench.ingest: RSS ≤ 300 MB per all-stage worker), and a
job starting on a heap left fragmented by the one before peaks higher.

Returning it costs too: every page handed back is faulted in again (and zeroed by the
kernel) when the next document allocates, and most documents are short: what one frees,
the next reuses. So the heap is trimmed only once more than :data:`KEEP_FREE_BYTES` of it
is free (``mallinfo2``). On bench.ingest's corpus (two all-stage workers and their parser
processes, four alternating pairs of runs) that took the page faults from 442-468k a run
to 250-265k, with the workers' peak RSS 259-266 MB either way; their CPU was within the
machine's noise (medians 26.4 s both; 32 MB kept, in three other pairs, 1.2-1.8 s less
in each pair).
"""

from __future__ import annotations

import ctypes
import sys

__all__ = ["KEEP_FREE_BYTES", "free_heap_bytes", "release_free_heap"]

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


def _glibc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:  # not glibc
        return None
    if not hasattr(libc, "malloc_trim"):
        return None
    if hasattr(libc, "mallinfo2"):
        libc.mallinfo2.restype = _Mallinfo2
    return libc


_LIBC = _glibc()


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
