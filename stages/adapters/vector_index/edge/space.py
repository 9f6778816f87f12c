"""Room on disk for a qdrant-edge shard's next writes, checked before it writes.

qdrant-edge writes through memory mappings of files it creates at their full size but
sparse (its write-ahead log's segments, its vector chunks and payload pages: 32 MiB
each): a page is given disk blocks only when first written. On a full filesystem that
write is not an error to catch but SIGBUS, which kills the worker with the jobs it held.
So before a write, the free space must cover every block the shard's files can still
claim (their sparse part) and the files a write may add.
"""

from __future__ import annotations

import os
from pathlib import Path

from runtime.api import StorageFull

#: What one write may add beside the files that exist: a new write-ahead-log segment, a
#: vector chunk and a payload page (32 MiB each in qdrant-edge 0.9).
NEW_FILES_BYTES = 3 * 32 * 1024 * 1024
_MB = 1024 * 1024


def sparse_bytes(shard: Path) -> int:
    """Bytes the shard's files may still claim: their size less the blocks they hold."""
    total = 0
    for path in shard.rglob("*"):
        try:
            st = path.lstat()
        except FileNotFoundError:
            continue
        if path.is_file():
            total += max(0, st.st_size - st.st_blocks * 512)
    return total


def free_bytes(directory: Path) -> int:
    st = os.statvfs(directory)
    return st.f_bavail * st.f_frsize


def ensure_room(shard: Path) -> None:
    """:class:`StorageFull` (the job waits for space, no attempt counted) unless the
    filesystem of ``shard`` has room for everything its next write may touch."""
    where = shard if shard.exists() else shard.parent
    need = (sparse_bytes(shard) if shard.exists() else 0) + NEW_FILES_BYTES
    free = free_bytes(where)
    if free < need:
        raise StorageFull(
            f"the embedded vector index needs {need // _MB} MB free on the filesystem of "
            f"{where} to write (its files are sparse), {free // _MB} MB left"
        )
