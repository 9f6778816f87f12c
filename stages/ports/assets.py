"""The asset store's port: where originals and extracted images live, addressed by key.

The :class:`AssetStore` protocol, the key helpers and what both adapters share; it imports
no adapter. The composition root (:func:`stages.services.asset_store`) picks one: files
under ``data_dir / "assets"`` (:class:`stages.adapters.assets.directory.DirStore`, the
default) or MinIO / any S3 API (:class:`stages.adapters.assets.minio.MinioStore`,
``MINIO_ENDPOINT``). Keys come from the document id and the content hash
(:func:`original_key`, :func:`image_key`), never a file name, so a re-run writes the same
key (puts are idempotent overwrites) and two documents never collide.
"""

from __future__ import annotations

import hashlib
import os
import re
import uuid
from collections.abc import AsyncIterable, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Protocol

import anyio
import anyio.to_thread
import msgspec

from runtime.api import MissingInput, one_line

__all__ = [
    "AssetStore",
    "Leftover",
    "Stored",
    "document_prefix",
    "image_key",
    "original_key",
    "validate_key",
]

_Leftovers = list["Leftover"]

#: Longest key accepted; S3 allows 1024 bytes.
MAX_KEY_BYTES = 1024
_SHA256_HEX = re.compile(r"[0-9a-f]{16,64}")
_EXTENSION = re.compile(r"[a-z0-9]{1,10}")
#: File names of unfinished writes start with this (no key segment may start with ".").
TMP_PREFIX = ".tmp-"


class Stored(msgspec.Struct, frozen=True):
    """What :meth:`AssetStore.put_stream` stored: the key, and the hash and size of the
    bytes it wrote (the same bytes: hashed while written)."""

    key: str
    sha256: str
    size: int


class Leftover(msgspec.Struct, frozen=True):
    """Something in the store that no key names: an unfinished write, an empty directory."""

    path: str
    kind: str  # "temporary file" | "empty directory"
    age_s: float


class AssetStore(Protocol):
    """Where ragline keeps originals and extracted images, addressed by key."""

    async def put(self, key: str, data: bytes, media_type: str) -> None:
        """Store ``data`` under ``key``, replacing any object already there."""

    async def put_file(self, key: str, path: Path, media_type: str) -> None:
        """Store the file at ``path`` under ``key`` without reading it all into memory."""

    async def move_file_in(self, key: str, path: Path) -> bool:
        """Take the file at ``path`` as ``key``'s object by renaming it (no copy); False,
        with nothing moved, where this store cannot (another file system, a store that is
        not a directory): the caller then stores it with :meth:`put_file`."""
        ...

    async def put_stream(
        self, chunks: AsyncIterable[bytes], media_type: str, key_for: Callable[[str], str]
    ) -> Stored:
        """Store the bytes ``chunks`` yields, hashing them as they are written (one read of
        the source), under ``key_for(sha256 hex)``; return the key, hash and size.

        The bytes go to a temporary place first and are named by their hash only once
        complete, so the key always matches the content. If ``chunks`` raises, nothing is
        left under a key (the exception propagates); a crash may leave a temporary file,
        which ``verify`` reports. Any stream of bytes works: a file, an HTTP upload.
        """
        ...

    async def get(self, key: str) -> bytes:
        """Return the object's bytes; :class:`MissingInput` if there is none."""
        ...

    def local_file(self, key: str) -> AbstractAsyncContextManager[Path]:
        """``async with store.local_file(key) as path``: a local file holding the object, to
        read (never write) inside the block; :class:`MissingInput` if there is none. A
        store that keeps objects as files yields the object itself, others a download."""
        ...

    async def exists(self, key: str) -> bool:
        """Whether an object is stored under ``key``."""
        ...

    async def delete(self, key: str) -> None:
        """Remove the object; a missing object is not an error."""

    async def delete_prefix(self, prefix: str) -> int:
        """Remove every object whose key starts with ``prefix``; return how many."""
        ...

    async def list(self, prefix: str) -> list[str]:
        """Return the sorted keys that start with ``prefix``."""
        ...

    async def age_s(self, key: str) -> float:
        """Seconds since the object was last written; :class:`MissingInput` if none."""
        ...

    async def leftovers(self) -> _Leftovers:
        """Temporary files of writes that never finished, and empty directories."""
        ...

    async def remove_leftovers(self, older_than_s: float) -> int:
        """Remove the leftovers older than ``older_than_s``; return how many."""
        ...

    async def aclose(self) -> None:
        """Release connections; the store is not used afterwards."""


# -- keys ----------------------------------------------------------------------------------


def validate_key(key: str, *, prefix: bool = False) -> str:
    """Return ``key`` if it is a safe object key, else raise :class:`ValueError`.

    A key is relative (no leading ``/``), at most 1024 bytes, and made of non-empty
    ``/``-separated segments none of which starts with ``.`` (which rules out ``.`` and
    ``..`` and keeps DirStore's temporary files out of the key space). A prefix may be
    empty and may end with ``/``.
    """
    if prefix and key == "":
        return key
    body = key[:-1] if prefix and key.endswith("/") else key
    problem = _key_problem(body)
    if problem:
        raise ValueError(f"invalid asset key {key!r}: {problem}")
    return key


def _key_problem(key: str) -> str | None:
    if not key:
        return "empty"
    if len(key.encode()) > MAX_KEY_BYTES:
        return f"longer than {MAX_KEY_BYTES} bytes"
    if key.startswith("/"):
        return "absolute"
    if "\\" in key or "\x00" in key:
        return "contains a backslash or NUL"
    if any(not part or part.startswith(".") for part in key.split("/")):
        return "has an empty segment or one starting with '.'"
    return None


def document_prefix(document_id: uuid.UUID) -> str:
    """Prefix under which every object of one document lives (ends with ``/``)."""
    return f"documents/{document_id}/"


def original_key(document_id: uuid.UUID, sha256: str) -> str:
    """Key of a document's original bytes."""
    return f"{document_prefix(document_id)}original-{_hash_part(sha256)}"


def image_key(document_id: uuid.UUID, sha256: str, ext: str) -> str:
    """Key of an image extracted from a document, by its content hash and extension."""
    clean_ext = ext.lower().lstrip(".")
    if not _EXTENSION.fullmatch(clean_ext):
        raise ValueError(f"invalid image extension {ext!r}")
    return f"{document_prefix(document_id)}images/{_hash_part(sha256)}.{clean_ext}"


def _hash_part(sha256: str) -> str:
    digest = sha256.lower()
    if not _SHA256_HEX.fullmatch(digest):
        raise ValueError(f"not a hex sha256 digest: {sha256!r}")
    return digest[:16]


def missing_asset(key: str) -> MissingInput:
    return MissingInput(one_line(f"asset {key!r} is not in the asset store"))


# -- shared by the adapters ----------------------------------------------------------------


async def spool(chunks: AsyncIterable[bytes], tmp: Path) -> tuple[str, int]:
    """Write ``chunks`` to ``tmp`` (fsynced), hashing the bytes written."""
    digest = hashlib.sha256()
    size = 0
    f = await anyio.open_file(tmp, "wb")
    try:
        async for chunk in chunks:
            digest.update(chunk)
            size += len(chunk)
            await f.write(chunk)
        await f.flush()
        await anyio.to_thread.run_sync(os.fsync, f.wrapped.fileno())
    finally:
        with anyio.CancelScope(shield=True):
            await f.aclose()
    return digest.hexdigest(), size


def require_prefix(prefix: str) -> None:
    # An empty prefix would wipe the whole store; nobody calls that by accident on purpose.
    if not prefix:
        raise ValueError("delete_prefix needs a non-empty prefix")
    validate_key(prefix, prefix=True)
