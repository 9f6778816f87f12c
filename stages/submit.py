"""Submitting documents: bytes into the asset store, then the document row and its first
job, atomically (inside the caller's transaction when one is given).

>>> await submit(pool, services.assets, Path("report.pdf"))          # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import uuid
from pathlib import Path
from typing import Any

import asyncpg
import msgspec

from runtime.documents import DocumentRepository, Submitted
from runtime.errors import InvalidDocument, one_line
from runtime.models import NewDocument
from stages.assets import AssetStore, original_key

FIRST_STAGE = "parse"
PDF = "application/pdf"
_MAGIC = b"%PDF-"
_CHUNK = 1 << 20


class Inspected(msgspec.Struct, frozen=True):
    sha256: str
    byte_size: int


def inspect_file(path: Path) -> Inspected:
    """Hash a file and check it looks like a PDF; raises InvalidDocument (one line)."""
    digest = hashlib.sha256()
    size = 0
    try:
        with path.open("rb") as f:
            head = f.read(1024)
            if not head:
                raise InvalidDocument(f"{path.name}: empty file (0 bytes)")
            if _MAGIC not in head:
                raise InvalidDocument(f"{path.name}: not a PDF (no %PDF- header)")
            digest.update(head)
            size = len(head)
            while block := f.read(_CHUNK):
                digest.update(block)
                size += len(block)
    except OSError as exc:
        raise InvalidDocument(one_line(f"{path.name}: cannot read: {exc.strerror or exc}")) from exc
    return Inspected(sha256=digest.hexdigest(), byte_size=size)


async def submit(
    pool: asyncpg.Pool[Any],
    assets: AssetStore,
    path: Path,
    *,
    conn: asyncpg.Connection[Any] | None = None,
    force: bool = False,
    max_attempts: int = 3,
) -> Submitted:
    """Store ``path`` and enqueue its parse; same bytes again → the same document."""
    info = inspect_file(path)
    docs = DocumentRepository(pool)
    if not force:
        existing = await docs.find_by_sha256(info.sha256)
        if existing is not None:
            return Submitted(document_id=existing.id, created=False)
    doc_id = uuid.uuid4()
    key = original_key(doc_id, info.sha256)
    await assets.put_file(key, path, PDF)
    new = NewDocument(
        id=doc_id,
        filename=path.name,
        media_type=PDF,
        byte_size=info.byte_size,
        sha256=info.sha256,
        asset_key=key,
        forced=force,
    )
    result = await docs.submit(new, FIRST_STAGE, conn=conn, max_attempts=max_attempts)
    if not result.created:  # lost a race with a concurrent submit of the same bytes
        await assets.delete(key)
    return result
