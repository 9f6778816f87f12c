"""A folder as a sync source: its files, recursively, with size and mtime (a stat each),
and their bytes on demand."""

from __future__ import annotations

import builtins
import hashlib
import os
from collections.abc import AsyncGenerator
from pathlib import Path

import anyio
import anyio.to_thread

from runtime.api import InvalidDocument, escape_name, one_line
from stages.parsing.formats.detect import named_as_document
from stages.ports.sources import BLOCK_BYTES, Entry, Listing


class FolderScanner:
    """A folder's files, recursively (links to files followed, links to folders not)."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self.uri = str(self.root)

    async def list(self) -> Listing:
        return await anyio.to_thread.run_sync(self._list)

    def _list(self) -> Listing:
        entries: dict[str, Entry] = {}
        skipped: list[str] = []
        stack = [""]
        while stack:
            rel = stack.pop()
            with os.scandir(os.path.join(self.uri, rel) if rel else self.uri) as it:
                for e in it:
                    uri = f"{rel}/{e.name}" if rel else e.name
                    if e.is_dir(follow_symlinks=False):
                        stack.append(uri)
                    elif named_as_document(e.name):
                        self._add(e, uri, entries, skipped)
        return Listing(entries=entries, skipped=skipped)

    @staticmethod
    def _add(
        e: os.DirEntry[str], uri: str, entries: dict[str, Entry], skipped: builtins.list[str]
    ) -> None:
        try:
            uri.encode("utf-8")
        except UnicodeEncodeError:
            skipped.append(f"{escape_name(uri)}: the name is not UTF-8")
            return
        try:
            st = e.stat()  # follows a link to a file
        except OSError:
            skipped.append(f"{escape_name(uri)}: symbolic link to a file that does not exist")
            return
        entries[uri] = Entry(uri=uri, size=st.st_size, mtime_ns=st.st_mtime_ns)

    def path_of(self, uri: str) -> Path:
        """The file of ``uri`` (a path relative to the folder)."""
        return self.root / uri

    async def sha256(self, uri: str) -> str:
        return await anyio.to_thread.run_sync(self._sha256, uri)  # one thread hop in all

    def _sha256(self, uri: str) -> str:
        try:
            with open(self.path_of(uri), "rb") as f:
                return hashlib.file_digest(f, "sha256").hexdigest()
        except OSError as exc:
            raise InvalidDocument(
                one_line(f"{escape_name(uri)}: cannot read: {exc.strerror or exc}")
            ) from exc

    async def chunks(self, uri: str) -> AsyncGenerator[bytes, None]:
        try:
            async with await anyio.open_file(self.path_of(uri), "rb") as f:
                while block := await f.read(BLOCK_BYTES):
                    yield block
        except OSError as exc:
            raise InvalidDocument(
                one_line(f"{escape_name(uri)}: cannot read: {exc.strerror or exc}")
            ) from exc
