"""The embedded asset store: each object a file under a root directory.

Writes go to a temporary file in the target directory and are renamed into place, so a
reader never sees half an object and a crash leaves at most an orphaned temporary file
that :meth:`DirStore.list` skips and :meth:`DirStore.leftovers` reports. See
:mod:`stages.ports.assets` for the contract.
"""

from __future__ import annotations

import errno
import os
import shutil
import time
import uuid
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager, suppress
from pathlib import Path
from typing import Protocol

import anyio
import anyio.to_thread

from stages.ports.assets import (
    TMP_PREFIX,
    Leftover,
    Stored,
    missing_asset,
    require_prefix,
    spool,
    validate_key,
)

__all__ = ["DirStore"]

_Keys = list[str]  # DirStore defines a method named list


class DirStore:
    """Asset store on a local directory; the embedded default."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    async def put(self, key: str, data: bytes, media_type: str) -> None:
        target = self._path(key)
        await anyio.to_thread.run_sync(_atomic_write, target, lambda f: f.write(data))

    async def put_file(self, key: str, path: Path, media_type: str) -> None:
        target = self._path(key)

        def copy(dst: _Writable) -> None:
            with open(path, "rb") as src:
                shutil.copyfileobj(src, dst, 1 << 20)

        await anyio.to_thread.run_sync(_atomic_write, target, copy)

    async def put_stream(
        self, chunks: AsyncIterable[bytes], media_type: str, key_for: Callable[[str], str]
    ) -> Stored:
        incoming = self.root / _INCOMING
        await anyio.to_thread.run_sync(lambda: incoming.mkdir(parents=True, exist_ok=True))
        tmp = incoming / f"{TMP_PREFIX}{uuid.uuid4().hex}"
        try:
            digest, size = await spool(chunks, tmp)
            key = validate_key(key_for(digest))
            await anyio.to_thread.run_sync(_move_into_place, tmp, self._path(key))
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(lambda: tmp.unlink(missing_ok=True))
        return Stored(key=key, sha256=digest, size=size)

    async def get(self, key: str) -> bytes:
        return await anyio.to_thread.run_sync(self._read, key)

    async def age_s(self, key: str) -> float:
        def age() -> float:
            with _missing_as_input(key):
                return time.time() - self._path(key).stat().st_mtime

        return await anyio.to_thread.run_sync(age)

    async def leftovers(self) -> list[Leftover]:
        return await anyio.to_thread.run_sync(_leftovers, self.root)

    async def remove_leftovers(self, older_than_s: float) -> int:
        def remove() -> int:
            removed = 0
            # Deepest first, so a directory holding only empty ones goes after them.
            for left in sorted(_leftovers(self.root), key=lambda x: -x.path.count("/")):
                if left.age_s < older_than_s:
                    continue
                path = self.root / left.path
                with suppress(OSError):
                    path.rmdir() if left.kind == _EMPTY_DIR else path.unlink()
                    removed += 1
            return removed

        return await anyio.to_thread.run_sync(remove)

    # -- serve (issue 12): a finished, fsynced upload is renamed into place, not copied --

    async def move_file_in(self, key: str, path: Path) -> bool:
        """Rename the file at ``path`` to ``key``; False (nothing moved) when it lives on
        another file system, where the caller copies it with :meth:`put_file` instead."""
        return await anyio.to_thread.run_sync(self._move_in, self._path(key), path)

    @staticmethod
    def _move_in(target: Path, path: Path) -> bool:
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.replace(path, target)
        except OSError as exc:
            if exc.errno == errno.EXDEV:
                return False
            raise
        return True

    @asynccontextmanager
    async def local_file(self, key: str) -> AsyncIterator[Path]:
        # The stored file itself, no copy: objects are only ever replaced by a rename, so
        # a file opened here keeps its bytes even if the key is overwritten or deleted.
        path = self._path(key)
        if not await anyio.to_thread.run_sync(path.is_file):
            raise missing_asset(key)
        yield path

    async def exists(self, key: str) -> bool:
        return await anyio.to_thread.run_sync(self._path(key).is_file)

    async def delete(self, key: str) -> None:
        await anyio.to_thread.run_sync(self._path(key).unlink, True)

    async def delete_prefix(self, prefix: str) -> int:
        require_prefix(prefix)
        return await anyio.to_thread.run_sync(self._delete_prefix, prefix)

    async def list(self, prefix: str) -> list[str]:
        validate_key(prefix, prefix=True)
        return await anyio.to_thread.run_sync(self._list, prefix)

    async def aclose(self) -> None:
        return None

    def _path(self, key: str) -> Path:
        return self.root / validate_key(key)

    def _read(self, key: str) -> bytes:
        with _missing_as_input(key):
            return self._path(key).read_bytes()

    def _list(self, prefix: str) -> _Keys:
        # Walk only the deepest directory the prefix names; keys are then filtered by
        # plain string prefix, as S3 does ("documents/ab" matches "documents/abc/x").
        start = self.root / prefix.rpartition("/")[0]
        keys = (key for key in _walk_keys(self.root, start) if key.startswith(prefix))
        return sorted(keys)

    def _delete_prefix(self, prefix: str) -> int:
        keys = self._list(prefix)
        for key in keys:
            (self.root / key).unlink(missing_ok=True)
        _prune_empty_dirs(self.root, self.root / prefix.rpartition("/")[0])
        return len(keys)


class _Writable(Protocol):
    def write(self, data: bytes, /) -> int: ...


@contextmanager
def _missing_as_input(key: str) -> Iterator[None]:
    try:
        yield
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError) as exc:
        raise missing_asset(key) from exc


_INCOMING = ".incoming"
_EMPTY_DIR = "empty directory"


def _move_into_place(tmp: Path, target: Path) -> None:
    for attempt in range(3):
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(tmp, target)
            return
        except FileNotFoundError:
            # A concurrent delete_prefix pruned the directory between mkdir and rename.
            if attempt == 2 or not tmp.exists():
                raise


def _leftovers(root: Path) -> list[Leftover]:
    """Temporary files, and directories with no file anywhere below them, under ``root``
    (not ``root`` itself nor the incoming directory, which are empty when idle)."""
    found: list[Leftover] = []
    if not root.is_dir():
        return found
    now = time.time()
    keep = {root, root / _INCOMING, root / "documents"}
    filled: set[Path] = set()
    for dirpath, dirnames, filenames in os.walk(root, topdown=False):
        here = Path(dirpath)
        for name in filenames:
            if name.startswith(TMP_PREFIX):
                found.append(_leftover(root, here / name, "temporary file", now))
        if filenames or any(here / d in filled for d in dirnames):
            filled.add(here)
        elif here not in keep:
            found.append(_leftover(root, here, _EMPTY_DIR, now))
    return sorted(found, key=lambda left: left.path)


def _leftover(root: Path, path: Path, kind: str, now: float) -> Leftover:
    try:
        age = now - path.stat().st_mtime
    except OSError:
        age = 0.0
    return Leftover(path=path.relative_to(root).as_posix(), kind=kind, age_s=age)


def _atomic_write(target: Path, fill: Callable[[_Writable], object]) -> None:
    """Write ``target`` through a temporary sibling and ``os.replace``."""
    tmp = target.with_name(f"{TMP_PREFIX}{uuid.uuid4().hex}")
    for attempt in range(3):
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            _write_tmp(tmp, fill)
            break
        except FileNotFoundError:
            # A concurrent delete_prefix pruned the directory between mkdir and open.
            if attempt == 2:
                raise
    try:
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _write_tmp(tmp: Path, fill: Callable[[_Writable], object]) -> None:
    try:
        with open(tmp, "wb") as f:
            fill(f)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _walk_keys(root: Path, start: Path) -> Iterator[str]:
    if not start.is_dir():
        return
    for dirpath, dirnames, filenames in os.walk(start):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        rel = Path(dirpath).relative_to(root).as_posix()
        for name in filenames:
            if not name.startswith("."):
                yield name if rel == "." else f"{rel}/{name}"


def _prune_empty_dirs(root: Path, start: Path) -> None:
    if not start.is_dir():
        return
    for dirpath, _dirs, _files in os.walk(start, topdown=False):
        path = Path(dirpath)
        if path != root:
            # Not empty, or someone is writing into it right now: leave it.
            with suppress(OSError):
                path.rmdir()
