"""Uploads: the body streams to a spool file while it is hashed, then into the asset store,
and only then do the document row and its first job commit, in one transaction.

Memory stays flat whatever the size (the body is never held whole: at most one 1 MiB
buffer). A client that disconnects, an oversized body (413) or a refused one (415, 400)
leaves nothing behind: the spool file is deleted and nothing reached the asset store or
the database. The same bytes return the existing document, and so does a repeated
``Idempotency-Key`` with the same bytes and collection (the key is stored with the
document, its content hash and collection, in the same transaction); a key reused for
another request is a 422.

What is said about the document comes with it: ``readers`` (who may read it) and ``meta``
(key/values), as query parameters or form fields (:class:`About`), stored in the
transaction that creates the row. A caller with principals uploads for its principals
unless it names readers, and never learns of a document it may not read: the same bytes
held only by such a document become a copy of its own (:func:`store`).
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
import unicodedata
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import IO, Any, Literal

import anyio
import anyio.to_thread
import asyncpg
import msgspec
import multipart
from litestar.exceptions import InternalServerException

from runtime.api import (
    ConfigurationError,
    DbConn,
    DocumentRepository,
    InvalidDocument,
    NewDocument,
    Submitted,
)
from stages.actions.metadata import check_metadata, check_principals
from stages.actions.search import filters_of
from stages.actions.submit import FIRST_STAGE, PDF, commit_outcome_unknown, new_document
from stages.db import search as search_db
from stages.db import serve as serve_db
from stages.parsing.formats.detect import by_media_type, detect
from stages.ports.assets import AssetStore, Stored, original_key
from stages.serve import access
from stages.serve.auth import EVERYONE, Caller
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
    #: A multipart upload's ``readers`` field, if it had one.
    readers: str | None = None
    #: A multipart upload's ``meta`` fields (``KEY=VALUE``), in order.
    meta: tuple[str, ...] = ()


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
    return msgspec.structs.replace(
        spooled,
        collection=state.text("collection"),
        readers=state.text("readers"),
        meta=tuple(v.decode(errors="replace") for v in state.fields.get("meta", [])),
    )


#: The form fields kept besides ``file`` (others are skipped), and whether one may repeat.
KEPT_FIELDS = {"collection": False, "readers": False, "meta": True}


class _Parts:
    """Which segment the multipart parser is in; only ``file`` goes to the spool, the
    fields of :data:`KEPT_FIELDS` are kept, others skipped."""

    def __init__(self) -> None:
        self.filename: str | None = None
        self.in_file = False
        self.other = 0
        #: The kept fields' values, in order.
        self.fields: dict[str, list[bytes]] = {}
        self.kept: str | None = None

    def text(self, name: str) -> str | None:
        values = self.fields.get(name)
        return values[0].decode(errors="replace") if values else None

    async def feed(self, event: Any, spool: Spool) -> None:
        if isinstance(event, multipart.MultipartSegment):
            self.in_file = event.name == "file"
            if self.in_file and self.filename is not None:
                raise problem(400, "multipart body has more than one 'file' field: one per upload")
            if self.in_file:
                self.filename = event.filename or DEFAULT_NAME
            self._start_field(event.name)
            self.other = 0
        elif event is None:
            self.in_file, self.kept = False, None
        elif self.in_file:
            await spool.write(bytes(event))
        else:
            if self.kept is not None:
                self.fields[self.kept][-1] += bytes(event)
            self.other += len(event)
            if self.other > _MAX_OTHER_FIELD:
                raise problem(400, "form fields other than 'file' must be small")

    def _start_field(self, name: str) -> None:
        self.kept = name if name in KEPT_FIELDS else None
        if self.kept is None:
            return
        values = self.fields.setdefault(name, [])
        if values and not KEPT_FIELDS[name]:
            raise problem(400, f"multipart body has more than one '{name}' field")
        values.append(b"")


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


class _Hidden(Exception):
    """A concurrent upload of the same bytes committed first, and the caller may not read
    its document."""


class About(msgspec.Struct, frozen=True, kw_only=True):
    """What an upload says about its document: who may read it (None: every caller) and
    its metadata."""

    readers: tuple[str, ...] | None = None
    metadata: dict[str, str] = msgspec.field(default_factory=dict)


class Upload(msgspec.Struct, frozen=True, kw_only=True):
    """One upload request: its spooled bytes, Idempotency-Key, collection, what it says
    about the document, and who sent it."""

    spooled: Spooled
    key: str | None = None
    collection: str = "default"
    about: About = msgspec.field(default_factory=About)
    caller: Caller = EVERYONE


def readers_of(raw: str | None, where: str) -> tuple[str, ...] | Literal[False] | None:
    """``readers`` as given: comma-separated principals, ``*`` for every caller; False
    when not given (absent or blank); a 400 naming ``where`` for a bad name."""
    if raw is None or not raw.strip():
        return False
    if raw.strip() == "*":
        return None
    try:
        return check_principals([r.strip() for r in raw.split(",") if r.strip()])
    except ConfigurationError as exc:
        raise problem(400, f"{where}: {exc.message}") from None


def metadata_of(pairs: Sequence[str], where: str) -> dict[str, str]:
    """``meta`` fields (``KEY=VALUE`` each) as metadata, or a 400 naming ``where``."""
    try:
        found = dict(filters_of(metadata=[p for p in pairs if p.strip()]).metadata or {})
        check_metadata(found)
    except ConfigurationError as exc:
        raise problem(400, f"{where}: {exc.message}") from None
    if any("\x00" in k or "\x00" in v for k, v in found.items()):
        raise problem(400, f"{where}: metadata must not contain NUL characters")
    return found


def about_upload(
    caller: Caller,
    query_readers: tuple[str, ...] | Literal[False] | None,
    query_meta: dict[str, str],
    spooled: Spooled,
) -> About:
    """The readers and metadata of an upload, from its query and its form (both given
    must agree); readers not given: the caller's principals (None for a caller who may
    read everything, so every caller)."""
    form_readers = readers_of(spooled.readers, "the multipart field readers")
    both = query_readers is not False and form_readers is not False
    if both and query_readers != form_readers:
        raise problem(400, "?readers= and the multipart field readers disagree")
    given = query_readers if query_readers is not False else form_readers
    metadata = dict(query_meta)
    for key, value in metadata_of(spooled.meta, "the multipart field meta").items():
        if metadata.setdefault(key, value) != value:
            raise problem(400, f"?meta= and the multipart field meta disagree on {key!r}")
    readers = caller.principals if given is False else given
    return About(readers=readers, metadata=metadata)


async def _replayed(
    pool: asyncpg.Pool[Any], known: serve_db.UploadKey, upload: Upload
) -> Submitted:
    """The answer to a repeated Idempotency-Key: the same request gets its document again;
    another one (other bytes, another collection) is a 422, as the IETF idempotency-key
    draft says, and its bytes are not stored. A document the caller may not read was
    another's request, to it (422 too)."""
    if known.sha256 != upload.spooled.sha256:
        raise problem(422, "this Idempotency-Key was used for an upload of other bytes")
    if known.collection != upload.collection:
        raise problem(
            422, f"this Idempotency-Key was used for an upload into collection {known.collection}"
        )
    if await access.hidden(pool, upload.caller, [known.document_id]):
        raise problem(422, "this Idempotency-Key was used for another upload")
    return Submitted(document_id=known.document_id, created=False)


async def _winner(pool: asyncpg.Pool[Any], upload: Upload) -> Submitted:
    """After losing the race for the upload's key: what the winner's request answered."""
    known = await serve_db.upload_key(pool, upload.key or "")
    if known is None:  # the winner's document was deleted since it committed
        raise problem(409, "the upload with this Idempotency-Key was deleted meanwhile")
    return await _replayed(pool, known, upload)


async def _existing(pool: asyncpg.Pool[Any], upload: Upload) -> tuple[uuid.UUID | None, bool]:
    """A document of the same bytes in the collection that the caller may read, if any;
    and whether a new one must be a copy (forced: the one there is not the caller's)."""
    spooled, caller = upload.spooled, upload.caller
    if caller.principals is not None:
        own = await serve_db.readable_copy(
            pool, spooled.sha256, upload.collection, caller.principals
        )
        if own is not None:
            return own, False
    found = await DocumentRepository(pool).find_by_sha256(spooled.sha256, upload.collection)
    if found is None:
        return None, False
    if caller.restricted:  # there, but not the caller's to read
        return None, True
    return found.id, False


async def store(pool: asyncpg.Pool[Any], assets: AssetStore, upload: Upload) -> Submitted:
    """Bytes into the asset store (durable), then the document row, what the upload says
    about it and its first job, atomically. The same bytes return the document already
    there, unchanged (its readers and metadata stay); for a caller with principals only
    one it may read, else the upload becomes a document of its own (a forced copy)."""
    spooled = upload.spooled
    if upload.key is not None:
        known = await serve_db.upload_key(pool, upload.key)
        if known is not None:
            return await _replayed(pool, known, upload)
    there, copy = await _existing(pool, upload)
    if there is not None:
        return await _keep_key(pool, Submitted(document_id=there, created=False), upload)
    doc_id = uuid.uuid4()
    stored = await put_spooled(assets, original_key(doc_id, spooled.sha256), spooled)
    new = new_document(
        doc_id, spooled.filename, spooled.media_type, stored, upload.collection, forced=copy
    )
    try:
        result = await _commit_or_copy(pool, new, upload)
    except _KeyTaken:
        await assets.delete(stored.key)
        return await _winner(pool, upload)
    except BaseException as exc:
        if not commit_outcome_unknown(exc):
            with anyio.CancelScope(shield=True):
                await assets.delete(stored.key)
        raise
    if not result.created:  # lost a race with a concurrent upload of the same bytes
        await assets.delete(stored.key)
    return result


async def _keep_key(pool: asyncpg.Pool[Any], found: Submitted, upload: Upload) -> Submitted:
    """Same bytes already there: the key (if any) now answers with that document."""
    if upload.key is None:
        return found
    answered = serve_db.UploadKey(
        document_id=found.document_id, sha256=upload.spooled.sha256, collection=upload.collection
    )
    async with pool.acquire() as conn:
        if await serve_db.remember_upload_key(conn, upload.key, answered):
            return found
    return await _winner(pool, upload)


async def _commit_or_copy(pool: asyncpg.Pool[Any], new: NewDocument, upload: Upload) -> Submitted:
    """:func:`_commit`; when a concurrent upload of the same bytes won with a document the
    caller may not read, again as a copy of its own."""
    try:
        return await _commit(pool, new, upload)
    except _Hidden:
        return await _commit(pool, msgspec.structs.replace(new, forced=True), upload)


async def _commit(pool: asyncpg.Pool[Any], new: NewDocument, upload: Upload) -> Submitted:
    async with pool.acquire() as conn, conn.transaction():
        result = await DocumentRepository(pool).submit(new, FIRST_STAGE, conn=conn)
        if result.created:
            await _write_about(conn, result.document_id, upload.about)
        elif upload.caller.restricted:
            about = await search_db.about_documents(conn, [result.document_id])
            there = about.get(result.document_id)
            if there is not None and not upload.caller.may_read(there.readers):
                raise _Hidden
        if upload.key is None:
            return result
        answered = serve_db.UploadKey(
            document_id=result.document_id, sha256=new.sha256, collection=new.collection
        )
        if not await serve_db.remember_upload_key(conn, upload.key, answered):
            raise _KeyTaken
        return result


async def _write_about(conn: DbConn, doc_id: uuid.UUID, about: About) -> None:
    """The new document's metadata and readers, in the transaction that creates it."""
    if about.metadata:
        await search_db.set_metadata(conn, [doc_id], about.metadata, replace=True)
    if about.readers is not None:
        await search_db.set_readers(conn, [doc_id], list(about.readers))
