"""Search's queries (``queries/search.sql``): the hits as PostgreSQL has them now, the
documents a filter allows, and the user's metadata."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import msgspec

import schema
from runtime.api import DbConn, Pool, to_struct

__all__ = [
    "About",
    "AnswerRow",
    "DocumentFilter",
    "HitRef",
    "about_documents",
    "answer_rows",
    "candidate_documents",
    "set_metadata",
    "set_readers",
]

Q = schema.load("search")

_json = msgspec.json.Encoder()
_metadata = msgspec.json.Decoder(dict[str, Any])


class HitRef(msgspec.Struct, frozen=True):
    """A search hit as the index has it: the point's document, chunk and generation."""

    document_id: uuid.UUID
    ordinal: int
    generation: int


class AnswerRow(msgspec.Struct, frozen=True, kw_only=True):
    """A hit that still counts, as PostgreSQL has it now (``kind`` None: the chunk has
    been cut again since; the point's own copy of it stands)."""

    rank: int
    document_id: uuid.UUID
    ordinal: int
    generation: int
    filename: str
    source_uri: str | None
    collection: str
    media_type: str
    metadata: str
    kind: str | None
    page_start: int | None
    page_end: int | None
    section: str | None
    text: str | None
    #: PDFs: (page, x0, y0, x1, y1) a rectangle, flat (NULL: none kept).
    boxes: list[float] | None = None
    is_table: bool | None = None

    @property
    def user_metadata(self) -> dict[str, Any]:
        return _metadata.decode(self.metadata)


class DocumentFilter(msgspec.Struct, frozen=True, kw_only=True):
    """The document-level filters of a search (None or empty: no filter)."""

    collection: str | None = None
    documents: tuple[uuid.UUID, ...] = ()
    source: str | None = None
    path_prefix: str | None = None
    media_types: tuple[str, ...] = ()
    since: datetime | None = None
    until: datetime | None = None
    metadata: Mapping[str, Any] | None = None
    #: The caller's principals (None: a caller who may read everything).
    principals: tuple[str, ...] | None = None


async def candidate_documents(db: Pool | DbConn, where: DocumentFilter) -> list[uuid.UUID]:
    """The searchable documents every filter of ``where`` allows."""
    rows = await db.fetch(
        Q["candidate_documents"],
        where.collection,
        list(where.documents) or None,
        where.source,
        where.path_prefix,
        list(where.media_types) or None,
        where.since,
        where.until,
        _json.encode(dict(where.metadata)).decode() if where.metadata else None,
        None if where.principals is None else list(where.principals),
    )
    return [r["id"] for r in rows]


async def answer_rows(
    db: Pool | DbConn,
    hits: Sequence[HitRef],
    pages: tuple[int | None, int | None] = (None, None),
    section: str | None = None,
    principals: Sequence[str] | None = None,
) -> list[AnswerRow]:
    """The hits that count, in the order given (1-based ``rank`` in it), in one query;
    with ``pages`` (first, last: 1-based, inclusive) or ``section`` (a label prefix),
    only chunks there; with ``principals``, only documents a caller with them may read."""
    rows = await db.fetch(
        Q["answer_rows"],
        [h.document_id for h in hits],
        [h.ordinal for h in hits],
        [h.generation for h in hits],
        *pages,
        section,
        None if principals is None else list(principals),
    )
    return [to_struct(AnswerRow, r) for r in rows]


async def set_metadata(
    conn: DbConn,
    documents: Sequence[uuid.UUID],
    values: Mapping[str, Any],
    *,
    replace: bool,
    collection: str | None = None,
) -> dict[uuid.UUID, dict[str, Any]]:
    """Merge ``values`` into each document's metadata (None removes a key), or replace
    it; the documents found (of ``collection`` when given), with their metadata now."""
    values_json = _json.encode(dict(values)).decode()
    rows = await conn.fetch(Q["set_metadata"], list(documents), values_json, replace, collection)
    return {r["id"]: _metadata.decode(r["metadata"]) for r in rows}


async def set_readers(
    conn: DbConn,
    documents: Sequence[uuid.UUID],
    principals: Sequence[str] | None,
    collection: str | None = None,
) -> dict[uuid.UUID, list[str] | None]:
    """Who may read ``documents`` (None: every caller); the documents found."""
    readers = None if principals is None else list(principals)
    rows = await conn.fetch(Q["set_readers"], list(documents), readers, collection)
    return {r["id"]: r["readers"] for r in rows}


class About(msgspec.Struct, frozen=True):
    """What is said about a document: its metadata and readers (None: every caller)."""

    metadata: dict[str, Any]
    readers: list[str] | None


async def about_documents(
    db: Pool | DbConn, documents: Sequence[uuid.UUID], collection: str | None = None
) -> dict[uuid.UUID, About]:
    rows = await db.fetch(Q["about_documents"], list(documents), collection)
    return {r["id"]: About(_metadata.decode(r["metadata"]), r["readers"]) for r in rows}
