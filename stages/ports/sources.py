"""A source's port: what a sync reads from a folder or a bucket.

A source lists its files with size and mtime (a stat each, no read) and gives their bytes
on demand. URIs inside a source are paths relative to the folder (``a/b.pdf``) or the
object key relative to the prefix; a source's own URI is canonical (an absolute, resolved
folder path or ``s3://bucket/prefix``) so the same folder given two ways is one source.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Protocol

import msgspec

#: Bytes read at a time from a source's file.
BLOCK_BYTES = 1 << 20


class Entry(msgspec.Struct, frozen=True):
    """A file of a source as a listing sees it."""

    uri: str
    size: int
    mtime_ns: int
    #: Objects: the ETag (Last-Modified has whole seconds); files: None.
    etag: str | None = None


class Listing(msgspec.Struct, frozen=True):
    entries: dict[str, Entry]
    #: Files skipped, with one line each (a name that is not UTF-8, a dangling link).
    skipped: list[str]


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
