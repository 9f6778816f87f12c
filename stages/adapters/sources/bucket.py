"""An S3/MinIO bucket and prefix as a sync source, through the MinIO client (in threads).

Failures are one line: an endpoint that cannot be reached is :class:`SourceUnreachable`
(exit 3, as for the database: it may come back); keys the server refuses, a missing
bucket or a malformed name are a :class:`ConfigurationError` (exit 2: the settings or
the URI are wrong). An object that cannot be read is that file's refusal, as for a folder.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncGenerator, Mapping
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

from runtime.api import ConfigurationError, InvalidDocument, RaglineError, escape_name, one_line
from stages.parsing.formats.detect import named_as_document
from stages.ports.sources import BLOCK_BYTES, Entry, Listing, SourceUnreachable

#: S3 error codes that mean the keys are wrong (or may not do this).
_KEYS_REFUSED = frozenset(
    {"InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "InvalidToken"}
)


class BucketScanner:
    """Objects under ``s3://bucket/prefix``, through the MinIO client (in threads)."""

    def __init__(self, client: Any, bucket: str, prefix: str, endpoint: str = "") -> None:
        self.client = client
        self.bucket = bucket
        self.prefix = prefix
        self.endpoint = endpoint
        self.uri = f"s3://{bucket}/{prefix}"

    @classmethod
    def from_uri(cls, source: str, env: Mapping[str, str]) -> BucketScanner:
        from stages.settings import PipelineSettings

        bucket, _, prefix = source.removeprefix("s3://").partition("/")
        if not bucket:
            raise ConfigurationError(f"sync: {source!r} names no bucket (s3://bucket/prefix)")
        c = PipelineSettings.from_env(env).minio
        if c is None:
            raise ConfigurationError("sync: an s3:// source needs MINIO_ENDPOINT (and its keys)")
        try:
            client = _client(c)
        except ValueError as exc:  # the client checks the endpoint's form
            raise ConfigurationError(
                one_line(f"sync: MINIO_ENDPOINT {c.endpoint!r}: {exc}")
            ) from exc
        return cls(client, bucket, prefix, c.endpoint)

    async def list(self) -> Listing:
        from minio.error import MinioException
        from urllib3.exceptions import HTTPError

        try:
            return await anyio.to_thread.run_sync(self._list, abandon_on_cancel=True)
        except (MinioException, HTTPError, OSError, ValueError) as exc:
            raise self._failure(exc) from exc

    def _list(self) -> Listing:
        entries: dict[str, Entry] = {}
        empty = True
        for obj in self.client.list_objects(self.bucket, prefix=self.prefix, recursive=True):
            empty = False
            name = obj.object_name or ""
            if obj.is_dir or not named_as_document(name):
                continue
            uri = name[len(self.prefix) :]
            modified = obj.last_modified
            mtime_ns = int(modified.timestamp() * 1e9) if modified else 0
            entries[uri] = Entry(uri=uri, size=int(obj.size or 0), mtime_ns=mtime_ns, etag=obj.etag)
        return Listing(entries=entries, skipped=[], empty=empty)

    def _failure(self, exc: Exception) -> RaglineError:
        """The one-line error for a failure to list the bucket."""
        from minio.error import InvalidResponseError, S3Error

        where = f"sync: {self.uri} at {self.endpoint}"
        if isinstance(exc, S3Error):
            if exc.code in _KEYS_REFUSED:
                return ConfigurationError(
                    f"{where}: the server refused MINIO_ACCESS_KEY/MINIO_SECRET_KEY ({exc.code})"
                )
            if exc.code == "NoSuchBucket":
                return ConfigurationError(f"{where}: no bucket {self.bucket!r} there")
            return RaglineError(one_line(f"{where}: {exc.code}: {exc.message}"))
        if isinstance(exc, ValueError):  # the client checks bucket names
            return ConfigurationError(one_line(f"{where}: {exc}"))
        if isinstance(exc, InvalidResponseError):
            return RaglineError(one_line(f"{where}: not an S3 answer: {exc}"))
        return SourceUnreachable(one_line(f"{where}: cannot reach the server: {_reason(exc)}"))

    async def chunks(self, uri: str) -> AsyncGenerator[bytes, None]:
        from minio.error import MinioException, S3Error
        from urllib3.exceptions import HTTPError

        key = self.prefix + uri
        try:
            response = await anyio.to_thread.run_sync(self.client.get_object, self.bucket, key)
        except S3Error as exc:
            raise InvalidDocument(one_line(f"{escape_name(uri)}: cannot read: {exc.code}")) from exc
        except (MinioException, HTTPError, OSError) as exc:
            raise self._failure(exc) from exc
        try:
            while block := await anyio.to_thread.run_sync(response.read, BLOCK_BYTES):
                yield block
        except (OSError, HTTPError) as exc:  # the connection broke mid-object
            raise self._failure(exc) from exc
        finally:
            response.close()
            response.release_conn()

    async def sha256(self, uri: str) -> str:
        digest = hashlib.sha256()
        async for block in self.chunks(uri):
            digest.update(block)
        return digest.hexdigest()

    def path_of(self, uri: str) -> Path | None:
        return None


def _client(c: Any) -> Any:
    """A MinIO client with the asset store's timeouts and retries, but none of a failed
    connection: a source that is down is one line at once, not urllib3's backoff and a
    logged warning per retry."""
    import urllib3
    from minio import Minio

    http = urllib3.PoolManager(
        timeout=urllib3.Timeout(connect=c.connect_timeout_s, read=c.read_timeout_s),
        retries=urllib3.Retry(
            total=c.http_retries,
            connect=0,
            backoff_factor=0.2,
            status_forcelist=(500, 502, 503, 504),
            raise_on_status=False,
        ),
    )
    return Minio(
        c.endpoint,
        access_key=c.access_key,
        secret_key=c.secret_key,
        secure=c.secure,
        region=c.region,
        http_client=http,
    )


def _reason(exc: BaseException) -> str:
    """urllib3's cause in its own words ("Failed to establish a new connection: [Errno
    111] Connection refused"), without the pool and URL around it."""
    reason = getattr(exc, "reason", None) or exc
    return str(reason).rsplit("): ", 1)[-1]
