"""Handing freed heap memory back to the system after a large job.

glibc keeps freed small blocks in its heap; after a document (parsed, chunked, indexed)
that memory is free but still resident until ``malloc_trim`` returns its whole free pages.
The worker's peak is what counts (bench.ingest: RSS ≤ 300 MB per all-stage worker), and a
job starting on a heap left fragmented by the one before peaks higher.
"""

from __future__ import annotations

import ctypes
import sys

__all__ = ["release_free_heap"]


def _glibc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:  # not glibc
        return None
    return libc if hasattr(libc, "malloc_trim") else None


_LIBC = _glibc()


def release_free_heap() -> bool:
    """``malloc_trim(0)``: whether memory was returned (False off glibc). A few ms."""
    return bool(_LIBC.malloc_trim(0)) if _LIBC is not None else False
