"""Uploads: the body streams to a spool file while it is hashed, then into the asset store,
and only then do the document row and its first job commit, in one transaction.

Memory stays flat whatever the size (the body is never held whole: at most one 1 MiB
buffer). A client that disconnects, an oversized body (413) or a refused one (415, 400)
leaves nothing behind: the spool file is deleted and nothing reached the asset store or
the database. The same bytes return the existing document, and so does a repeated
``Idempotency-Key`` (its key is stored with the document in the same transaction).
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
import unicodedata
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import IO, Any

import anyio
import anyio.to_thread
import asyncpg
import msgspec
import multipart
from litestar.exceptions import InternalServerException

from runtime.api import DocumentRepository, InvalidDocument, NewDocument, Submitted
from stages.actions.submit import FIRST_STAGE, PDF, new_document
from stages.db import serve as serve_db
from stages.parsing.formats.detect import by_media_type, detect
from stages.ports.assets import AssetStore, Stored, original_key
from stages.serve.problems import problem

_FLUSH = 1 << 20
MAX_FILENAME = 255
MAX_IDEMPOTENCY_KEY = 200
_KEY_OK = re.compile(r"[\x21-\x7e]{1,200}")
#: Form fields other than ``file`` are skipped, up to this size each.
_MAX_OTHER_FIELD = 64 * 1024


class Spooled(msgspec.Struct, frozen=True, kw_only=True):
    path: Path
    filename: str
    sha256: str
    byte_size: int
    media_type: str = PDF
    #: A multipart upload's ``collection`` field, if it had one.
    collection: str | None = None


class Spool:
    """A temporary file the body goes into, hashed and counted on the way."""

    def __init__(self, directory: Path, limit_bytes: int) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix="upload-", dir=directory)
        os.fchmod(fd, 0o644)  # as the asset store's own files: it may adopt this one
        self.path = Path(name)
        self.file: IO[bytes] = os.fdopen(fd, "wb")
        self.limit_bytes = limit_bytes
        self.digest = hashlib.sha256()
        self.size = 0
        self._buf = bytearray()

    async def write(self, data: bytes) -> None:
        self.size += len(data)
        if self.size > self.limit_bytes:
            raise problem(413, f"upload larger than {self.limit_bytes // (1 << 20)} MB")
        self._buf += data
        if len(self._buf) >= _FLUSH:
            await self._flush()

    async def _flush(self) -> None:
        data, self._buf = bytes(self._buf), bytearray()
        # hashlib releases the GIL on large buffers: hash and write off the event loop.
        await anyio.to_thread.run_sync(self._hash_and_write, data)

    def _hash_and_write(self, data: bytes) -> None:
        self.digest.update(data)
        self.file.write(data)

    def _close(self) -> None:
        # Durable before anything refers to it: the asset store may adopt this very file.
        self.file.flush()
        os.fsync(self.file.fileno())
        self.file.close()

    async def finish(self, filename: str) -> Spooled:
        await self._flush()
        await anyio.to_thread.run_sync(self._close)
        if filename == DEFAULT_NAME:  # no name given: the content names the type
            media_type = await anyio.to_thread.run_sync(check_type, "upload", self.size, self.path)
            filename = default_name(media_type)
        else:
            media_type = await anyio.to_thread.run_sync(check_type, filename, self.size, self.path)
        return Spooled(
            path=self.path,
            filename=filename,
            sha256=self.digest.hexdigest(),
            byte_size=self.size,
            media_type=media_type,
        )

    def discard(self) -> None:
        self.file.close()
        self.path.unlink(missing_ok=True)


def check_type(filename: str, size: int, path: Path) -> str:
    """The checks ``submit`` makes: not empty, a type ragline reads (detected from the
    content, stages/parsing/formats/detect.py); its media type."""
    if size == 0:
        raise problem(400, f"{filename}: empty body (0 bytes)")
    try:
        return detect(path, filename).media_type
    except InvalidDocument as exc:
        raise problem(415, exc.message) from None


DEFAULT_NAME = "upload.pdf"


def default_name(media_type: str) -> str:
    """``upload`` with the usual suffix of the detected type (``upload.pdf`` for a PDF)."""
    fmt = by_media_type(media_type)
    return "upload" + fmt.suffixes[0] if fmt is not None else DEFAULT_NAME


def clean_filename(raw: str | None) -> str:
    """A display name only (never a path): the last path segment, no control characters."""
    name = (raw or "").replace("\\", "/").rsplit("/", 1)[-1]
    name = "".join(c for c in name if unicodedata.category(c)[0] != "C").strip()
    if name in ("", ".", ".."):
        name = DEFAULT_NAME
    return name[:MAX_FILENAME]


def check_idempotency_key(raw: str | None) -> str | None:
    if raw is None:
        return None
    if not _KEY_OK.fullmatch(raw):
        raise problem(400, "Idempotency-Key must be 1-200 printable ASCII characters")
    return raw


def check_length(content_length: str | None, limit_bytes: int) -> None:
    if content_length is None:
        return
    try:
        length = int(content_length)
    except ValueError:
        raise problem(400, "Content-Length is not a number") from None
    if length > limit_bytes:
        raise problem(413, f"upload larger than {limit_bytes // (1 << 20)} MB")


async def spool_raw(body: AsyncIterator[bytes], disposition: str | None, spool: Spool) -> Spooled:
    filename = None
    if disposition:
        _, options = multipart.parse_options_header(disposition)
        filename = options.get("filename")
    async for chunk in body:
        if chunk:
            await spool.write(chunk)
    return await spool.finish(clean_filename(filename))


async def spool_multipart(body: AsyncIterator[bytes], content_type: str, spool: Spool) -> Spooled:
    _, options = multipart.parse_options_header(content_type)
    boundary = options.get("boundary")
    if not boundary:
        raise problem(400, "multipart body without a boundary")
    parser = multipart.PushMultipartParser(boundary, max_segment_count=16)
    state = _Parts()
    try:
        async for chunk in body:
            for event in parser.parse(chunk):
                await state.feed(event, spool)
        for event in parser.parse(b""):
            await state.feed(event, spool)
    except multipart.MultipartError as exc:
        raise problem(400, f"malformed multipart body: {exc}") from None
    if state.filename is None:
        raise problem(400, "multipart body has no 'file' field")
    spooled = await spool.finish(clean_filename(state.filename))
    if state.collection is None:
        return spooled
    return msgspec.structs.replace(spooled, collection=state.collection.decode(errors="replace"))


class _Parts:
    """Which segment the multipart parser is in; only ``file`` goes to the spool."""

    def __init__(self) -> None:
        self.filename: str | None = None
        self.in_file = False
        self.other = 0
        #: The ``collection`` field's bytes, if the form has one.
        self.collection: bytes | None = None
        self.in_collection = False

    async def feed(self, event: Any, spool: Spool) -> None:
        if isinstance(event, multipart.MultipartSegment):
            self.in_file = event.name == "file" and self.filename is None
            if self.in_file:
                self.filename = event.filename or DEFAULT_NAME
            self.in_collection = event.name == "collection"
            self.other = 0
        elif event is None:
            self.in_file = self.in_collection = False
        elif self.in_file:
            await spool.write(bytes(event))
        else:
            if self.in_collection:
                self.collection = (self.collection or b"") + bytes(event)
            self.other += len(event)
            if self.other > _MAX_OTHER_FIELD:
                raise problem(400, "form fields other than 'file' must be small")


async def receive(
    body: AsyncIterator[bytes],
    headers: dict[str, str],
    upload_dir: Path,
    limit_bytes: int,
) -> Spooled:
    """Stream the request body to a spool file; the caller deletes it when done."""
    check_length(headers.get("content-length"), limit_bytes)
    spool = Spool(upload_dir, limit_bytes)
    content_type = headers.get("content-type", "")
    try:
        if content_type.lower().startswith("multipart/"):
            return await spool_multipart(body, content_type, spool)
        return await spool_raw(body, headers.get("content-disposition"), spool)
    except InternalServerException:  # litestar: the client disconnected mid-body
        spool.discard()
        raise problem(400, "client disconnected before the upload finished") from None
    except BaseException:
        spool.discard()
        raise


async def put_spooled(assets: AssetStore, key: str, spooled: Spooled) -> Stored:
    """Into the asset store: renamed into place when the store is a directory on the same
    file system (one write of the bytes in all), else copied or uploaded. Returns what is
    stored, as :meth:`AssetStore.put_stream` does (the spool hashed and counted it)."""
    if not await assets.move_file_in(key, spooled.path):
        await assets.put_file(key, spooled.path, spooled.media_type)
    return Stored(key=key, sha256=spooled.sha256, size=spooled.byte_size)


class _KeyTaken(Exception):
    """A concurrent upload with the same Idempotency-Key committed first."""


async def store(
    pool: asyncpg.Pool[Any],
    assets: AssetStore,
    spooled: Spooled,
    idempotency_key: str | None,
    collection: str = "default",
) -> Submitted:
    """Bytes into the asset store (durable), then the document row + first job, atomically."""
    if idempotency_key is not None:
        known = await serve_db.upload_key_document(pool, idempotency_key)
        if known is not None:
            return Submitted(document_id=known, created=False)
    docs = DocumentRepository(pool)
    existing = await docs.find_by_sha256(spooled.sha256, collection)
    if existing is not None:
        return Submitted(document_id=existing.id, created=False)
    doc_id = uuid.uuid4()
    stored = await put_spooled(assets, original_key(doc_id, spooled.sha256), spooled)
    new = new_document(doc_id, spooled.filename, spooled.media_type, stored, collection)
    try:
        result = await _commit(pool, new, idempotency_key)
    except _KeyTaken:
        await assets.delete(stored.key)
        known = await serve_db.upload_key_document(pool, idempotency_key or "")
        if known is None:  # the winner's document was deleted since it committed
            raise problem(
                409, "the upload with this Idempotency-Key was deleted meanwhile"
            ) from None
        return Submitted(document_id=known, created=False)
    except BaseException:
        with anyio.CancelScope(shield=True):
            await assets.delete(stored.key)
        raise
    if not result.created:  # lost a race with a concurrent upload of the same bytes
        await assets.delete(stored.key)
    return result


async def _commit(pool: asyncpg.Pool[Any], new: NewDocument, idem: str | None) -> Submitted:
    async with pool.acquire() as conn, conn.transaction():
        result = await DocumentRepository(pool).submit(new, FIRST_STAGE, conn=conn)
        if (
            idem is not None
            and result.created
            and not await serve_db.remember_upload_key(conn, idem, result.document_id)
        ):
            raise _KeyTaken
        return result
