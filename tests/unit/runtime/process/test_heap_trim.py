"""runtime.process.heap: freed heap is handed back only past what the next document reuses."""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
from collections.abc import Iterator

import pytest

from runtime.process.heap import free_heap_bytes, release_free_heap

pytestmark = pytest.mark.skipif(free_heap_bytes() is None, reason="glibc 2.33+ (mallinfo2) only")

_libc = ctypes.CDLL("libc.so.6") if sys.platform.startswith("linux") else None
MB = 1024 * 1024
BLOCK = 64 * 1024


def _rss() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@contextlib.contextmanager
def holes(megabytes: int) -> Iterator[tuple[int, int]]:
    """About ``megabytes`` of resident free heap that free()'s own top-of-heap trim cannot
    return (every other block of a run stays allocated, pinning it); yields the free heap
    and the resident size."""
    assert _libc is not None
    _libc.malloc.restype = ctypes.c_void_p
    _libc.free.argtypes = [ctypes.c_void_p]
    blocks = [_libc.malloc(BLOCK) for _ in range(2 * megabytes * MB // BLOCK)]
    for address in blocks:
        ctypes.memset(address, 1, BLOCK)  # resident
    for address in blocks[::2]:
        _libc.free(address)
    try:
        free = free_heap_bytes()
        assert free is not None and free >= megabytes * MB
        yield free, _rss()
    finally:
        for address in blocks[1::2]:
            _libc.free(address)


def test_a_little_free_heap_is_kept() -> None:
    with holes(2) as (free, resident):
        assert release_free_heap(keep=free + 1) is False
        assert _rss() >= resident - MB


def test_past_the_threshold_the_free_heap_is_returned() -> None:
    with holes(8) as (_, resident):
        # malloc_trim returns the holes' whole pages (madvise) and says so.
        assert release_free_heap(keep=MB) is True
        assert _rss() <= resident - 4 * MB
