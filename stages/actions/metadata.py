"""What is said about a document besides its content: its metadata (the user's
key/values) and its readers (the principals who may read it; none: every caller). Both
are set at submit, upload and sync or changed here, and live in PostgreSQL only (search
filters and trims there), so a change writes nothing to the index and embeds nothing."""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from runtime.api import ConfigurationError, DbConn, MissingInput, Pool
from stages.db import search as search_db

__all__ = [
    "MAX_METADATA_BYTES",
    "Labels",
    "check_metadata",
    "check_principals",
    "label",
    "labels_of",
    "set_metadata",
    "set_readers",
]

#: A document's metadata, as JSON, at most (it is filtered on, not a document store).
MAX_METADATA_BYTES = 8192


def check_metadata(values: Mapping[str, Any]) -> dict[str, Any]:
    """Key/values as ragline keeps them: string keys of 1–128 characters; values strings,
    numbers, booleans or None (None removes the key); one line for anything else."""
    for key, value in values.items():
        if not isinstance(key, str) or not 0 < len(key) <= 128:
            raise ConfigurationError(f"metadata: a key must be 1 to 128 characters: {key!r:.80}")
        if value is not None and not isinstance(value, str | int | float | bool):
            raise ConfigurationError(
                f"metadata: {key}: a value must be a string, number or boolean"
            )
    if len(msgspec.json.encode(dict(values))) > MAX_METADATA_BYTES:
        raise ConfigurationError(f"metadata: more than {MAX_METADATA_BYTES} bytes as JSON")
    return dict(values)


async def set_metadata(
    pool: Pool,
    documents: Sequence[uuid.UUID],
    values: Mapping[str, Any],
    *,
    replace: bool = False,
    collection: str | None = None,
) -> dict[uuid.UUID, dict[str, Any]]:
    """Merge ``values`` into the documents' metadata (or replace it), in one transaction;
    every id must name a document (of ``collection`` when given)."""
    checked = check_metadata(values)
    async with pool.acquire() as conn, conn.transaction():
        found = await search_db.set_metadata(
            conn, documents, checked, replace=replace, collection=collection
        )
        missing = [str(d) for d in documents if d not in found]
        if missing:  # nothing changes: the transaction rolls back
            where = "" if collection is None else f" in collection {collection!r}"
            raise MissingInput(f"metadata: no such document{where}: {', '.join(missing)}")
    return found


#: A principal's name: what RAGLINE_API_TOKENS maps a token to, and --readers lists.
_PRINCIPAL = re.compile(r"[A-Za-z0-9_.@-]{1,128}")


def check_principals(names: Sequence[str]) -> tuple[str, ...]:
    """Principal names as ragline keeps them (letters, digits, ``_.@-``; 1–128 each), in
    order, once each; one line for a bad one."""
    for name in names:
        if not _PRINCIPAL.fullmatch(name):
            raise ConfigurationError(
                f"readers: not a principal name (letters, digits, _.@-): {name!r:.80}"
            )
    return tuple(dict.fromkeys(names))


async def set_readers(
    pool: Pool,
    documents: Sequence[uuid.UUID],
    principals: Sequence[str] | None,
    *,
    collection: str | None = None,
) -> dict[uuid.UUID, list[str] | None]:
    """Who may read the documents: callers with one of ``principals`` (None: every
    caller), in one transaction; every id must name a document (of ``collection``)."""
    names = None if principals is None else list(check_principals(principals))
    async with pool.acquire() as conn, conn.transaction():
        found = await search_db.set_readers(conn, documents, names, collection)
        missing = [str(d) for d in documents if d not in found]
        if missing:
            where = "" if collection is None else f" in collection {collection!r}"
            raise MissingInput(f"readers: no such document{where}: {', '.join(missing)}")
    return found


class Labels(msgspec.Struct, frozen=True, kw_only=True):
    """What a new document is given as it comes in (submit, ingest, sync)."""

    metadata: Mapping[str, Any] | None = None
    #: None: every caller may read it.
    readers: tuple[str, ...] | None = None

    @property
    def empty(self) -> bool:
        return not self.metadata and self.readers is None


def labels_of(metadata: Mapping[str, Any] | None, readers: Sequence[str] | None) -> Labels:
    """Checked labels (one line for a bad key, value or principal)."""
    return Labels(
        metadata=check_metadata(metadata) if metadata else None,
        readers=None if readers is None else check_principals(readers),
    )


async def label(conn: DbConn, document_id: uuid.UUID, labels: Labels) -> None:
    """Give a new document its labels, in the caller's transaction."""
    if labels.metadata:
        await search_db.set_metadata(conn, [document_id], labels.metadata, replace=True)
    if labels.readers is not None:
        await search_db.set_readers(conn, [document_id], list(labels.readers))
