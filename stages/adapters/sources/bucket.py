"""An S3/MinIO bucket and prefix as a sync source, through the MinIO client (in threads)."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncGenerator, Mapping
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

from runtime.api import ConfigurationError, InvalidDocument, escape_name, one_line
from stages.parsing.formats.detect import named_as_document
from stages.ports.sources import BLOCK_BYTES, Entry, Listing


class BucketScanner:
    """Objects under ``s3://bucket/prefix``, through the MinIO client (in threads)."""

    def __init__(self, client: Any, bucket: str, prefix: str) -> None:
        self.client = client
        self.bucket = bucket
        self.prefix = prefix
        self.uri = f"s3://{bucket}/{prefix}"

    @classmethod
    def from_uri(cls, source: str, env: Mapping[str, str]) -> BucketScanner:
        from minio import Minio

        from stages.settings import PipelineSettings

        bucket, _, prefix = source.removeprefix("s3://").partition("/")
        if not bucket:
            raise ConfigurationError(f"sync: {source!r} names no bucket (s3://bucket/prefix)")
        c = PipelineSettings.from_env(env).minio
        if c is None:
            raise ConfigurationError("sync: an s3:// source needs MINIO_ENDPOINT (and its keys)")
        client = Minio(
            c.endpoint, access_key=c.access_key, secret_key=c.secret_key, secure=c.secure
        )
        return cls(client, bucket, prefix)

    async def list(self) -> Listing:
        return await anyio.to_thread.run_sync(self._list)

    def _list(self) -> Listing:
        entries: dict[str, Entry] = {}
        for obj in self.client.list_objects(self.bucket, prefix=self.prefix, recursive=True):
            name = obj.object_name or ""
            if obj.is_dir or not named_as_document(name):
                continue
            uri = name[len(self.prefix) :]
            modified = obj.last_modified
            mtime_ns = int(modified.timestamp() * 1e9) if modified else 0
            entries[uri] = Entry(uri=uri, size=int(obj.size or 0), mtime_ns=mtime_ns, etag=obj.etag)
        return Listing(entries=entries, skipped=[])

    async def chunks(self, uri: str) -> AsyncGenerator[bytes, None]:
        from minio.error import S3Error

        key = self.prefix + uri
        try:
            response = await anyio.to_thread.run_sync(self.client.get_object, self.bucket, key)
        except S3Error as exc:
            raise InvalidDocument(one_line(f"{escape_name(uri)}: cannot read: {exc.code}")) from exc
        try:
            while block := await anyio.to_thread.run_sync(response.read, BLOCK_BYTES):
                yield block
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
