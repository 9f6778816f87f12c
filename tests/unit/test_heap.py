"""stages.heap: freed heap is handed back only past what the next document reuses."""

from __future__ import annotations

import ctypes
import os
import sys

import pytest

from stages.heap import free_heap_bytes, release_free_heap

pytestmark = pytest.mark.skipif(free_heap_bytes() is None, reason="glibc 2.33+ (mallinfo2) only")

_libc = ctypes.CDLL("libc.so.6") if sys.platform.startswith("linux") else None


def _holes(blocks: int, size: int) -> list[int]:
    """Free every other one of ``blocks`` malloc'd blocks: free heap that the top-of-heap
    trim in free() cannot return (the blocks left in place pin it). Returns the kept."""
    assert _libc is not None
    _libc.malloc.restype = ctypes.c_void_p
    _libc.free.argtypes = [ctypes.c_void_p]
    held = [_libc.malloc(size) for _ in range(blocks)]
    for address in held:
        ctypes.memset(address, 1, size)  # resident
    for address in held[::2]:
        _libc.free(address)
    return held[1::2]


def _rss() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _free(held: list[int]) -> None:
    assert _libc is not None
    for address in held:
        _libc.free(address)


def test_a_little_free_heap_is_kept() -> None:
    held = _holes(64, 64 * 1024)  # ~2 MB of holes
    try:
        before = free_heap_bytes()
        assert before is not None and before >= 2 * 1024 * 1024
        resident = _rss()
        assert release_free_heap(keep=before + 1) is False
        assert _rss() >= resident - 1024 * 1024
    finally:
        _free(held)


def test_past_the_threshold_the_free_heap_is_returned() -> None:
    held = _holes(256, 64 * 1024)  # ~8 MB of holes
    try:
        before = free_heap_bytes()
        assert before is not None and before >= 8 * 1024 * 1024
        resident = _rss()
        # malloc_trim returns the holes' whole pages (madvise) and says so.
        assert release_free_heap(keep=1024 * 1024) is True
        assert _rss() <= resident - 4 * 1024 * 1024
    finally:
        _free(held)
