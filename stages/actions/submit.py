"""Submitting documents (of any type stages/formats detects): bytes into the asset store,
then the document row and its first job, atomically (inside the caller's transaction when
one is given).

>>> await submit(pool, services.assets, Path("report.pdf"))          # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import hashlib
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import asyncpg
import msgspec

from runtime.api import (
    DocumentRepository,
    InvalidDocument,
    NewDocument,
    Submitted,
    annotate,
    document_span,
    escape_name,
    is_database_unreachable,
    one_line,
)
from stages.actions.metadata import Labels, label
from stages.parsing.formats import Format, detect
from stages.pipeline import STAGES
from stages.ports.assets import AssetStore, Stored, original_key
from stages.ports.collections import check_collection_name
from stages.ports.sources import not_a_file

#: Where a new document starts.
FIRST_STAGE = STAGES[0]
PDF = "application/pdf"
_CHUNK = 1 << 20


class Inspected(msgspec.Struct, frozen=True):
    sha256: str
    byte_size: int


def detect_format(path: Path) -> Format:
    """What the file is, from its content (stages/parsing/formats/detect.py); raises
    InvalidDocument (one line) when empty, unreadable, not a regular file (a FIFO is
    never opened: that waits for a writer) or of a type ragline does not read."""
    try:
        what = not_a_file(path.stat().st_mode)
        if what is not None:
            raise InvalidDocument(f"{display_name(path)}: {what}, not a file")
        return detect(path, display_name(path))
    except OSError as exc:
        raise InvalidDocument(
            one_line(f"{display_name(path)}: cannot read: {exc.strerror or exc}")
        ) from exc


def inspect_file(path: Path) -> Inspected:
    """Hash a file (its type is :func:`detect_format`'s); raises InvalidDocument."""
    digest = hashlib.sha256()
    size = 0
    try:
        with path.open("rb") as f:
            head = f.read(1024)
            if not head:
                raise InvalidDocument(f"{display_name(path)}: empty file (0 bytes)")
            digest.update(head)
            size = len(head)
            while block := f.read(_CHUNK):
                digest.update(block)
                size += len(block)
    except OSError as exc:
        raise InvalidDocument(
            one_line(f"{display_name(path)}: cannot read: {exc.strerror or exc}")
        ) from exc
    return Inspected(sha256=digest.hexdigest(), byte_size=size)


async def _file_chunks(path: Path) -> AsyncIterator[bytes]:
    """The file's bytes in blocks; the first must not be empty (InvalidDocument)."""
    name = display_name(path)
    try:
        async with await anyio.open_file(path, "rb") as f:
            head = await f.read(_CHUNK)
            if not head:
                raise InvalidDocument(f"{name}: empty file (0 bytes)")
            yield head
            while block := await f.read(_CHUNK):
                yield block
    except OSError as exc:
        raise InvalidDocument(one_line(f"{name}: cannot read: {exc.strerror or exc}")) from exc


def display_name(path: Path) -> str:
    """The file name as text: bytes that are not UTF-8 escaped as ``\\xNN``, control
    characters (a newline) as ``\\n``/``\\xNN``, so one name is one line everywhere."""
    return escape_name(path.name)


async def submit(
    pool: asyncpg.Pool[Any],
    assets: AssetStore,
    path: Path,
    *,
    conn: asyncpg.Connection[Any] | None = None,
    force: bool = False,
    max_attempts: int = 3,
    collection: str = "default",
    labels: Labels | None = None,
) -> Submitted:
    """Store ``path`` and enqueue its parse; same bytes again → the same document. A new
    document gets ``labels`` (metadata, readers) in the transaction that creates it; a
    document found by its bytes keeps its own.

    The recorded hash is the hash of the bytes stored, computed while they are copied
    (:meth:`AssetStore.put_stream`), whatever happens to the file meanwhile. A first,
    cheap hash only skips files already submitted. The document's trace starts here
    (docs/tracing.md).
    """
    shown: dict[str, str | bool] = {
        "filename": display_name(path),
        "collection": collection,
        "forced": force,
    }
    with document_span("submit", shown) as span:
        done = await _submit(pool, assets, path, conn, force, max_attempts, collection, labels)
        annotate(span, {"document.id": str(done.document_id), "created": done.created})
        return done


async def _submit(
    pool: asyncpg.Pool[Any],
    assets: AssetStore,
    path: Path,
    conn: asyncpg.Connection[Any] | None,
    force: bool,
    max_attempts: int,
    collection: str,
    labels: Labels | None,
) -> Submitted:
    docs = DocumentRepository(pool)
    fmt = detect_format(path)
    check_collection_name(collection)
    if not force:
        existing = await docs.find_by_sha256(inspect_file(path).sha256, collection)
        if existing is not None:
            return Submitted(document_id=existing.id, created=False)
    doc_id = uuid.uuid4()
    stored = await assets.put_stream(
        _file_chunks(path), fmt.media_type, lambda sha: original_key(doc_id, sha)
    )
    try:
        result = await _record(
            docs, stored, doc_id, path, fmt, conn, force, max_attempts, collection, labels
        )
    except BaseException as exc:
        if not commit_outcome_unknown(exc):  # no original without its own row
            with anyio.CancelScope(shield=True):
                await assets.delete(stored.key)
        raise
    if not result.created:  # the same bytes were there first
        with anyio.CancelScope(shield=True):
            await assets.delete(stored.key)
    return result


def commit_outcome_unknown(exc: BaseException) -> bool:
    """Whether the document's transaction may have committed although ``exc`` came out of
    it: the connection went (the COMMIT may have reached PostgreSQL, its answer not) or
    the task was stopped while it waited. Its stored original then stays: the document
    may name it (a submit or upload asked again finds the document), and if it does
    not, it is an orphan that ``verify --repair`` removes."""
    stopped = isinstance(exc, KeyboardInterrupt | anyio.get_cancelled_exc_class())
    return stopped or is_database_unreachable(exc)


async def _record(
    docs: DocumentRepository,
    stored: Stored,
    doc_id: uuid.UUID,
    path: Path,
    fmt: Format,
    conn: asyncpg.Connection[Any] | None,
    force: bool,
    max_attempts: int,
    collection: str,
    labels: Labels | None = None,
) -> Submitted:
    if not force:  # the file may have changed since the first hash
        existing = await docs.find_by_sha256(stored.sha256, collection)
        if existing is not None:
            return Submitted(document_id=existing.id, created=False)
    new = new_document(doc_id, display_name(path), fmt.media_type, stored, collection, force)
    if labels is None or labels.empty:
        # Not created: lost a race with a concurrent submit of the same bytes.
        return await docs.submit(new, FIRST_STAGE, conn=conn, max_attempts=max_attempts)
    async with contextlib.AsyncExitStack() as stack:
        db: Any = conn if conn is not None else await stack.enter_async_context(docs.pool.acquire())
        await stack.enter_async_context(db.transaction())
        done = await docs.submit(new, FIRST_STAGE, conn=db, max_attempts=max_attempts)
        if done.created:
            await label(db, done.document_id, labels)
        return done


def new_document(
    doc_id: uuid.UUID,
    filename: str,
    media_type: str,
    stored: Stored,
    collection: str,
    forced: bool = False,
) -> NewDocument:
    """The row for an original the asset store holds: its key, and the hash and size of
    the bytes stored (a submitted file's or an upload's)."""
    return NewDocument(
        id=doc_id,
        filename=filename,
        media_type=media_type,
        byte_size=stored.size,
        sha256=stored.sha256,
        asset_key=stored.key,
        forced=forced,
        collection=collection,
    )
