"""A folder as a sync source: its files, recursively, with size and mtime (a stat each),
and their bytes on demand.

Only regular files are read, and each is opened without blocking and checked again once
open: a FIFO waits for a writer when opened (sync hung forever on one), so FIFOs,
sockets and devices are skipped with one line each, as is a folder that cannot be read.
Work done in a thread (the listing, a hash) stops at the next folder or block once its
caller is cancelled (Ctrl-C), instead of running to the end of a file of any size.
"""

from __future__ import annotations

import builtins
import hashlib
import io
import os
import threading
from collections.abc import AsyncGenerator, Callable
from pathlib import Path
from typing import TypeVar

import anyio
import anyio.to_thread

from runtime.api import ConfigurationError, InvalidDocument, escape_name, one_line
from stages.parsing.formats.detect import named_as_document
from stages.ports.sources import BLOCK_BYTES, Entry, Listing, not_a_file

T = TypeVar("T")


class Stopped(Exception):
    """The caller of a thread's work is gone (cancelled): stop reading."""


async def in_thread(work: Callable[[threading.Event], T]) -> T:
    """``work(stop)`` in a worker thread; ``stop`` is set as soon as the caller is
    cancelled, and the caller does not wait for the thread (which stops at its next
    check). anyio's own cancellation check misses a Ctrl-C: asyncio delivers that as a
    native cancellation of the main task, which no cancel scope records."""
    stop = threading.Event()
    try:
        return await anyio.to_thread.run_sync(work, stop, abandon_on_cancel=True)
    finally:
        stop.set()


def open_file(path: Path, shown: str) -> io.FileIO:
    """``path`` opened for reading if it is a regular file (links followed).

    :raises InvalidDocument: not a regular file, or it cannot be read (one line).
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise InvalidDocument(one_line(f"{shown}: cannot read: {exc.strerror or exc}")) from exc
    what = not_a_file(os.fstat(fd).st_mode)
    if what is not None:
        os.close(fd)
        raise InvalidDocument(f"{shown}: {what}, not a file")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb", buffering=0)


class _Walk:
    """One listing of a folder, depth first; runs in a worker thread."""

    def __init__(self, root: str, stop: threading.Event) -> None:
        self.root = root
        self.stop = stop
        self.entries: dict[str, Entry] = {}
        self.skipped: builtins.list[str] = []
        self.unread: builtins.list[str] = []
        self.empty = True

    def run(self) -> Listing:
        try:
            device = os.stat(self.root).st_dev
        except OSError as exc:
            raise _unreadable_root(self.root, exc) from exc
        stack = [""]
        while stack:
            if self.stop.is_set():
                raise Stopped
            stack.extend(self._folder(stack.pop()))
        return Listing(
            entries=self.entries,
            skipped=self.skipped,
            unread=self.unread,
            empty=self.empty,
            device=device,
        )

    def _folder(self, rel: str) -> builtins.list[str]:
        """Add the files of one folder; return its subfolders."""
        try:
            with os.scandir(os.path.join(self.root, rel) if rel else self.root) as it:
                found = builtins.list(it)
        except OSError as exc:
            if not rel:
                raise _unreadable_root(self.root, exc) from exc
            shown = escape_name(rel)
            self.skipped.append(
                one_line(f"{shown}: cannot read the folder: {_why(exc)} (its documents stay)")
            )
            self.unread.append(rel)
            return []
        if not rel:
            self.empty = not found
        folders = []
        for e in found:
            uri = f"{rel}/{e.name}" if rel else e.name
            if e.is_dir(follow_symlinks=False):
                folders.append(uri)
            elif named_as_document(e.name):
                self._file(e, uri)
        return folders

    def _file(self, e: os.DirEntry[str], uri: str) -> None:
        try:
            uri.encode("utf-8")
        except UnicodeEncodeError:
            self.skipped.append(f"{escape_name(uri)}: the name is not UTF-8")
            return
        try:
            st = e.stat()  # follows a link to a file
        except OSError:
            self.skipped.append(f"{escape_name(uri)}: symbolic link to a file that does not exist")
            return
        what = not_a_file(st.st_mode)
        if what == "a folder":
            self.skipped.append(f"{escape_name(uri)}: a link to a folder (not followed)")
        elif what is not None:
            self.skipped.append(f"{escape_name(uri)}: {what}, not a file")
        else:
            self.entries[uri] = Entry(uri=uri, size=st.st_size, mtime_ns=st.st_mtime_ns)


def _why(exc: OSError) -> str:
    return exc.strerror or str(exc)


def _unreadable_root(root: str, exc: OSError) -> ConfigurationError:
    return ConfigurationError(
        one_line(f"sync: {escape_name(root)}: cannot read the folder: {_why(exc)}")
    )


class FolderScanner:
    """A folder's files, recursively (links to files followed, links to folders not)."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self.uri = str(self.root)

    async def list(self) -> Listing:
        return await in_thread(lambda stop: _Walk(self.uri, stop).run())

    def path_of(self, uri: str) -> Path:
        """The file of ``uri`` (a path relative to the folder)."""
        return self.root / uri

    async def sha256(self, uri: str) -> str:
        return await in_thread(lambda stop: self._sha256(uri, stop))  # one thread hop in all

    def _sha256(self, uri: str, stop: threading.Event) -> str:
        digest = hashlib.sha256()
        block = bytearray(BLOCK_BYTES)
        view = memoryview(block)
        with open_file(self.path_of(uri), escape_name(uri)) as f:
            try:
                while n := f.readinto(block):
                    if stop.is_set():
                        raise Stopped
                    digest.update(view[:n])
            except OSError as exc:
                raise InvalidDocument(
                    one_line(f"{escape_name(uri)}: cannot read: {_why(exc)}")
                ) from exc
        return digest.hexdigest()

    async def chunks(self, uri: str) -> AsyncGenerator[bytes, None]:
        shown = escape_name(uri)
        raw = await anyio.to_thread.run_sync(open_file, self.path_of(uri), shown)
        try:
            while block := await anyio.to_thread.run_sync(raw.read, BLOCK_BYTES):
                yield block
        except OSError as exc:
            raise InvalidDocument(one_line(f"{shown}: cannot read: {_why(exc)}")) from exc
        finally:
            # Closed here, without an await: closing the generator (Ctrl-C while the
            # bytes are stored) completes at once, whoever closes it.
            raw.close()
