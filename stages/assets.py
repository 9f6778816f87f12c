"""The asset store: where originals and extracted images live.

Two implementations of one :class:`AssetStore` protocol:

* :class:`DirStore`, the embedded default, keeps each object as a file under a root
  directory (``data_dir / "assets"``). Writes go to a temporary file in the target
  directory and are renamed into place, so a reader never sees half an object and a
  crash leaves at most an orphaned temporary file that :meth:`DirStore.list` skips.
* :class:`MinioStore` talks to MinIO or any S3 API with the ``minio`` client. The client
  is synchronous, so every call runs in a worker thread.

Keys are built by :func:`original_key` and :func:`image_key` from the document id and the
content hash, never from a user's file name, so a re-run writes the same key (puts are
idempotent overwrites) and two documents never collide.
"""

from __future__ import annotations

import errno
import hashlib
import io
import os
import re
import shutil
import tempfile
import time
import uuid
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager, suppress
from pathlib import Path
from typing import Protocol, TypeVar

import anyio
import anyio.to_thread
import msgspec
import urllib3
from minio import Minio
from minio.deleteobjects import DeleteObject
from minio.error import InvalidResponseError, MinioException, S3Error, ServerError

from runtime.api import (
    ConfigurationError,
    MissingInput,
    PermanentError,
    RateLimited,
    StorageFull,
    TransientError,
    one_line,
)

__all__ = [
    "AssetStore",
    "DirStore",
    "MinioConfig",
    "MinioStore",
    "Stored",
    "asset_store_from_env",
    "document_prefix",
    "image_key",
    "original_key",
    "validate_key",
]

T = TypeVar("T")
_Keys = list[str]  # the classes below define a method named list
_Leftovers = list["Leftover"]

#: Longest key accepted; S3 allows 1024 bytes.
MAX_KEY_BYTES = 1024
_SHA256_HEX = re.compile(r"[0-9a-f]{16,64}")
_EXTENSION = re.compile(r"[a-z0-9]{1,10}")
_TMP_PREFIX = ".tmp-"


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


def _missing(key: str) -> MissingInput:
    return MissingInput(one_line(f"asset {key!r} is not in the asset store"))


# -- DirStore ------------------------------------------------------------------------------


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
        tmp = incoming / f"{_TMP_PREFIX}{uuid.uuid4().hex}"
        try:
            digest, size = await _spool(chunks, tmp)
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
            raise _missing(key)
        yield path

    async def exists(self, key: str) -> bool:
        return await anyio.to_thread.run_sync(self._path(key).is_file)

    async def delete(self, key: str) -> None:
        await anyio.to_thread.run_sync(self._path(key).unlink, True)

    async def delete_prefix(self, prefix: str) -> int:
        _require_prefix(prefix)
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
        raise _missing(key) from exc


_INCOMING = ".incoming"
_EMPTY_DIR = "empty directory"


async def _spool(chunks: AsyncIterable[bytes], tmp: Path) -> tuple[str, int]:
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
            if name.startswith(_TMP_PREFIX):
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
    tmp = target.with_name(f"{_TMP_PREFIX}{uuid.uuid4().hex}")
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


def _require_prefix(prefix: str) -> None:
    # An empty prefix would wipe the whole store; nobody calls that by accident on purpose.
    if not prefix:
        raise ValueError("delete_prefix needs a non-empty prefix")
    validate_key(prefix, prefix=True)


# -- MinioStore ----------------------------------------------------------------------------


class MinioConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Connection settings for :class:`MinioStore`."""

    endpoint: str
    access_key: str | None = None
    secret_key: str | None = None
    bucket: str = "ragline"
    secure: bool = False
    region: str | None = None
    connect_timeout_s: float = 5.0
    read_timeout_s: float = 60.0
    #: Retries of connection errors and 5xx inside urllib3, before ragline's own retry.
    http_retries: int = 2

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> MinioConfig:
        """Read ``MINIO_ENDPOINT``, ``MINIO_ACCESS_KEY``, ``MINIO_SECRET_KEY``,
        ``MINIO_BUCKET`` (default ``ragline``) and ``MINIO_SECURE`` (default false)."""
        endpoint = env.get("MINIO_ENDPOINT", "").strip()
        if not endpoint:
            raise ConfigurationError("MINIO_ENDPOINT is not set")
        return cls(
            endpoint=endpoint,
            access_key=env.get("MINIO_ACCESS_KEY") or None,
            secret_key=env.get("MINIO_SECRET_KEY") or None,
            bucket=env.get("MINIO_BUCKET") or "ragline",
            secure=_parse_bool("MINIO_SECURE", env.get("MINIO_SECURE", "false")),
        )


def _parse_bool(name: str, value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"", "0", "false", "no", "off"}:
        return False
    raise ConfigurationError(f"{name} must be true or false, not {value!r}")


_TRANSIENT_S3_CODES = frozenset(
    {"InternalError", "ServiceUnavailable", "RequestTimeout", "RequestTimeTooSkewed"}
)


def _translate(exc: Exception, key: str) -> Exception:
    """Map a minio/urllib3 exception to a ragline error (the caller chains the cause)."""
    what = one_line(f"asset store {key!r}: {exc}")
    if isinstance(exc, S3Error):
        return _translate_s3(exc, key, what)
    if isinstance(exc, ServerError):
        return TransientError(what) if exc.status_code >= 500 else PermanentError(what)
    if isinstance(exc, InvalidResponseError):
        return TransientError(what)  # a proxy or load balancer answered instead of S3
    if isinstance(exc, urllib3.exceptions.HTTPError | OSError):
        return TransientError(what)
    return PermanentError(what)


def _translate_s3(exc: S3Error, key: str, what: str) -> Exception:
    status = exc.response.status if exc.response is not None else 0
    if exc.code in {"NoSuchKey", "NoSuchObject"}:
        return _missing(key)
    if exc.code == "SlowDown" or status == 429:
        return RateLimited(what)
    if exc.code == "XMinioStorageFull" or status == 507:  # 507 Insufficient Storage
        return StorageFull(what)
    if exc.code in _TRANSIENT_S3_CODES or status >= 500 or status == 408:
        return TransientError(what)
    return PermanentError(what)


class MinioStore:
    """Asset store on MinIO or any S3-compatible server."""

    def __init__(self, config: MinioConfig) -> None:
        self.config = config
        self._http = urllib3.PoolManager(
            timeout=urllib3.Timeout(connect=config.connect_timeout_s, read=config.read_timeout_s),
            retries=urllib3.Retry(
                total=config.http_retries,
                backoff_factor=0.2,
                status_forcelist=(500, 502, 503, 504),
                raise_on_status=False,
            ),
        )
        self._client = Minio(
            config.endpoint,
            access_key=config.access_key,
            secret_key=config.secret_key,
            secure=config.secure,
            region=config.region,
            http_client=self._http,
        )
        self._bucket_ready = False
        self._bucket_lock = anyio.Lock()

    async def put(self, key: str, data: bytes, media_type: str) -> None:
        validate_key(key)
        await self._call(key, self._put_bytes, key, data, media_type)

    async def put_file(self, key: str, path: Path, media_type: str) -> None:
        validate_key(key)
        bucket = self.config.bucket
        await self._call(key, self._client.fput_object, bucket, key, str(path), media_type)

    async def put_stream(
        self, chunks: AsyncIterable[bytes], media_type: str, key_for: Callable[[str], str]
    ) -> Stored:
        # Spooled to a local temporary file while hashed (S3 needs the key, which is the
        # hash, before the upload starts), then uploaded from there: the source is read
        # once and the uploaded bytes are the hashed ones. S3 has no partial objects.
        with tempfile.TemporaryDirectory(prefix="ragline-upload-") as tmp:
            path = Path(tmp) / "object"
            digest, size = await _spool(chunks, path)
            key = validate_key(key_for(digest))
            await self.put_file(key, path, media_type)
        return Stored(key=key, sha256=digest, size=size)

    async def get(self, key: str) -> bytes:
        validate_key(key)
        return await self._call(key, self._get_bytes, key)

    async def age_s(self, key: str) -> float:
        validate_key(key)
        info = await self._call(key, self._client.stat_object, self.config.bucket, key)
        modified = info.last_modified
        return time.time() - modified.timestamp() if modified is not None else 0.0

    async def leftovers(self) -> list[Leftover]:
        return []  # no directories, and an unfinished upload is no object

    async def remove_leftovers(self, older_than_s: float) -> int:
        return 0

    @asynccontextmanager
    async def local_file(self, key: str) -> AsyncIterator[Path]:
        validate_key(key)
        with tempfile.TemporaryDirectory(prefix="ragline-asset-") as tmp:
            path = Path(tmp) / "object"
            bucket = self.config.bucket
            await self._call(key, self._client.fget_object, bucket, key, str(path))
            yield path

    async def exists(self, key: str) -> bool:
        validate_key(key)
        return await self._call(key, self._exists, key)

    async def delete(self, key: str) -> None:
        validate_key(key)
        await self._call(key, self._client.remove_object, self.config.bucket, key)

    async def delete_prefix(self, prefix: str) -> int:
        _require_prefix(prefix)
        return await self._call(prefix, self._delete_prefix, prefix)

    async def list(self, prefix: str) -> list[str]:
        validate_key(prefix, prefix=True)
        return await self._call(prefix, self._list, prefix)

    async def aclose(self) -> None:
        self._http.clear()

    async def _call(self, key: str, fn: Callable[..., T], *args: object) -> T:
        await self._ensure_bucket()
        try:
            return await anyio.to_thread.run_sync(lambda: fn(*args))
        except (MinioException, urllib3.exceptions.HTTPError, OSError) as exc:
            raise _translate(exc, key) from exc

    async def _ensure_bucket(self) -> None:
        # Lazily, once per store: the factory is synchronous and must not do network IO.
        if self._bucket_ready:
            return
        async with self._bucket_lock:
            if self._bucket_ready:
                return
            bucket = self.config.bucket
            try:
                await anyio.to_thread.run_sync(self._make_bucket)
            except (MinioException, urllib3.exceptions.HTTPError, OSError) as exc:
                raise _translate(exc, f"bucket {bucket}") from exc
            self._bucket_ready = True

    def _make_bucket(self) -> None:
        if self._client.bucket_exists(self.config.bucket):
            return
        try:
            self._client.make_bucket(self.config.bucket)
        except S3Error as exc:
            # Another worker created it between our check and our create.
            if exc.code not in {"BucketAlreadyOwnedByYou", "BucketAlreadyExists"}:
                raise

    def _put_bytes(self, key: str, data: bytes, media_type: str) -> None:
        self._client.put_object(
            self.config.bucket, key, io.BytesIO(data), len(data), content_type=media_type
        )

    def _get_bytes(self, key: str) -> bytes:
        response = self._client.get_object(self.config.bucket, key)
        try:
            return response.read()
        finally:
            response.close()
            response.release_conn()

    def _exists(self, key: str) -> bool:
        try:
            self._client.stat_object(self.config.bucket, key)
        except S3Error as exc:
            if exc.code in {"NoSuchKey", "NoSuchObject"}:
                return False
            raise
        return True

    def _list(self, prefix: str) -> _Keys:
        objects = self._client.list_objects(self.config.bucket, prefix=prefix, recursive=True)
        return sorted(obj.object_name for obj in objects if obj.object_name)

    def _delete_prefix(self, prefix: str) -> int:
        keys = self._list(prefix)
        errors = list(
            self._client.remove_objects(self.config.bucket, (DeleteObject(k) for k in keys))
        )
        if errors:
            first = errors[0]
            raise PermanentError(
                one_line(f"asset store: could not delete {first.name!r}: {first.message}")
            )
        return len(keys)


def asset_store_from_env(env: Mapping[str, str], data_dir: Path) -> AssetStore:
    """MinIO/S3 when ``MINIO_ENDPOINT`` is set, else a :class:`DirStore` under the data dir."""
    if env.get("MINIO_ENDPOINT", "").strip():
        return MinioStore(MinioConfig.from_env(env))
    return DirStore(Path(data_dir) / "assets")
