"""The asset store on MinIO or any S3-compatible server, through the ``minio`` client.

The client is synchronous, so every call runs in a worker thread. Imported only by the
composition root (:func:`stages.services.asset_store`) when ``MINIO_ENDPOINT`` is set, so
no other process loads minio. See :mod:`stages.ports.assets` for the contract.
"""

from __future__ import annotations

import io
import tempfile
import time
from collections.abc import AsyncIterable, AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TypeVar

import anyio
import anyio.to_thread
import urllib3
from minio import Minio
from minio.deleteobjects import DeleteObject
from minio.error import InvalidResponseError, MinioException, S3Error, ServerError

from runtime.api import (
    PermanentError,
    RateLimited,
    StorageFull,
    TransientError,
    one_line,
)
from stages.ports.assets import Leftover, Stored, missing_asset, require_prefix, spool, validate_key
from stages.settings import MinioConfig

__all__ = ["MinioConfig", "MinioStore"]

T = TypeVar("T")
_Keys = list[str]  # MinioStore defines a method named list


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
        return missing_asset(key)
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
            digest, size = await spool(chunks, path)
            key = validate_key(key_for(digest))
            await self.put_file(key, path, media_type)
        return Stored(key=key, sha256=digest, size=size)

    async def move_file_in(self, key: str, path: Path) -> bool:
        return False  # an object store takes bytes, not a file renamed into it

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
        require_prefix(prefix)
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
