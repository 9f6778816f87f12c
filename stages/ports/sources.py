"""A source's port: what a sync reads from a folder or a bucket.

A source lists its files with size and mtime (a stat each, no read) and gives their bytes
on demand. URIs inside a source are paths relative to the folder (``a/b.pdf``) or the
object key relative to the prefix; a source's own URI is canonical (an absolute, resolved
folder path or ``s3://bucket/prefix``) so the same folder given two ways is one source.
"""

from __future__ import annotations

import stat
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Protocol

import msgspec

from runtime.api import RaglineError

#: Bytes read at a time from a source's file.
BLOCK_BYTES = 1 << 20


class SourceUnreachable(RaglineError, ConnectionError):
    """The source cannot be reached (an S3 endpoint down): nothing was changed.

    A ``ConnectionError``, so the CLI exits 3 (unavailable) as for the database: a service
    that may come back, unlike refused keys or a missing bucket (a ConfigurationError, 2).
    """


_KINDS = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISDIR, "a folder"),
)


def not_a_file(mode: int) -> str | None:
    """What a path of this ``st_mode`` is when it is no regular file ("a FIFO (named
    pipe)"); None for a file. A FIFO is never opened: that waits for a writer."""
    if stat.S_ISREG(mode):
        return None
    return next((what for test, what in _KINDS if test(mode)), "not a regular file")


class Entry(msgspec.Struct, frozen=True):
    """A file of a source as a listing sees it."""

    uri: str
    size: int
    mtime_ns: int
    #: Objects: the ETag (Last-Modified has whole seconds); files: None.
    etag: str | None = None


class Listing(msgspec.Struct, frozen=True):
    entries: dict[str, Entry]
    #: Files skipped, with one line each (a name that is not UTF-8, a dangling link, a
    #: FIFO, socket or device, a folder that cannot be read).
    skipped: list[str]
    #: Folders that could not be read (``a/b``): the documents of files under them stay
    #: as they are, neither changed nor deleted.
    unread: list[str] = msgspec.field(default_factory=list)
    #: Nothing at all under the root (no file of any name, no folder, no object): what an
    #: unmounted disk's mount point or an emptied bucket looks like.
    empty: bool = False
    #: The device (st_dev) of a folder; None for a bucket.
    device: int | None = None


class Scanner(Protocol):
    #: Canonical URI of the source.
    uri: str

    async def list(self) -> Listing:
        """Every file of the source with its size and mtime."""
        ...

    def chunks(self, uri: str) -> AsyncGenerator[bytes, None]:
        """The file's bytes in blocks (close the generator to stop early)."""
        ...

    async def sha256(self, uri: str) -> str:
        """The file's SHA-256, hex."""
        ...

    def path_of(self, uri: str) -> Path | None:
        """The local file of ``uri`` when the source is a folder (an upload can then be
        moved in whole); None for a source without local files."""
        ...
