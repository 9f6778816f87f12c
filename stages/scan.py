"""What a source holds: its files with size and mtime (a stat each, no read), and their
bytes on demand. A folder (recursively) or an S3/MinIO bucket and prefix.

URIs inside a source are paths relative to the folder (``a/b.pdf``) or the object key
relative to the prefix; a source's own URI is canonical (an absolute, resolved folder path
or ``s3://bucket/prefix``) so the same folder given two ways is one source.
"""

from __future__ import annotations

import builtins
import hashlib
import os
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any, Protocol

import anyio
import anyio.to_thread
import msgspec

from runtime.api import ConfigurationError, InvalidDocument, escape_name, one_line
from stages.formats.detect import named_as_document

_BLOCK = 1 << 20


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

    def chunks(self, uri: str) -> AsyncIterator[bytes]:
        """The file's bytes in blocks."""
        ...


async def sha256_of(scanner: Scanner, uri: str) -> str:
    if isinstance(scanner, FolderScanner):  # one thread hop, not one per block
        return await anyio.to_thread.run_sync(scanner.sha256, uri)
    digest = hashlib.sha256()
    async for block in scanner.chunks(uri):
        digest.update(block)
    return digest.hexdigest()


def scanner_for(source: str, env: Mapping[str, str]) -> Scanner:
    """A folder path, or ``s3://bucket/prefix`` (read with the ``MINIO_*`` settings)."""
    if source.startswith("s3://"):
        return BucketScanner.from_uri(source, env)
    path = Path(source)
    if not path.is_dir():
        raise ConfigurationError(
            f"sync: {escape_name(source)} is not a folder nor s3://bucket/prefix"
        )
    return FolderScanner(path)


class FolderScanner:
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

    def sha256(self, uri: str) -> str:
        try:
            with open(self.path_of(uri), "rb") as f:
                return hashlib.file_digest(f, "sha256").hexdigest()
        except OSError as exc:
            raise InvalidDocument(
                one_line(f"{escape_name(uri)}: cannot read: {exc.strerror or exc}")
            ) from exc

    async def chunks(self, uri: str) -> AsyncIterator[bytes]:
        try:
            async with await anyio.open_file(self.path_of(uri), "rb") as f:
                while block := await f.read(_BLOCK):
                    yield block
        except OSError as exc:
            raise InvalidDocument(
                one_line(f"{escape_name(uri)}: cannot read: {exc.strerror or exc}")
            ) from exc


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

    async def chunks(self, uri: str) -> AsyncIterator[bytes]:
        from minio.error import S3Error

        key = self.prefix + uri
        try:
            response = await anyio.to_thread.run_sync(self.client.get_object, self.bucket, key)
        except S3Error as exc:
            raise InvalidDocument(one_line(f"{escape_name(uri)}: cannot read: {exc.code}")) from exc
        try:
            while block := await anyio.to_thread.run_sync(response.read, _BLOCK):
                yield block
        finally:
            response.close()
            response.release_conn()
