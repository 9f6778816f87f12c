"""The pipeline's checkpoint tables: one typed method per named query.

Writers take the connection of the engine's completion transaction (or of a fenced
``ctx.checkpoint``); readers use a pool. asyncpg records stay in this module.
"""

from __future__ import annotations

import array
import sys
import uuid
from collections.abc import Sequence
from typing import Any, TypeAlias, cast

import asyncpg
import msgspec
import numpy as np

import schema
from runtime.api import DbConn, to_struct
from stages.parsing.formats.unit import Layout

Q = schema.load("pipeline")
#: How embeddings.vector stores a vector: float32, big-endian (float4send's byte order).
VECTOR_DTYPE = np.dtype(">f4")
#: A vector read back from the cache: float32 in this machine's byte order.
Vector: TypeAlias = "array.array[float]"
Conn: TypeAlias = DbConn
Reader: TypeAlias = "asyncpg.Pool[Any] | DbConn"


class Page(msgspec.Struct, frozen=True):
    page: int
    text: str
    #: Where a format has no pages: the section's heading path or line range (search shows
    #: it); for reflowable books the chapter. None for PDFs.
    section: str | None = None
    #: A PDF page's blocks, boxes, outline headings and table rows.
    layout: Layout | None = None


class Asset(msgspec.Struct, frozen=True, kw_only=True):
    sha256: str
    object_key: str
    media_type: str
    byte_size: int
    page: int
    width: int
    height: int
    description: str | None = None


class ChunkText(msgspec.Struct, frozen=True, kw_only=True):
    """What every chunk struct holds: the text and the pages it spans."""

    text: str
    page_start: int
    page_end: int


class StoredChunk(ChunkText, frozen=True, kw_only=True):
    """A chunk as a document's chunks table holds it: its place and the generation that
    wrote it."""

    ordinal: int
    kind: str
    generation: int


class ChunkRow(StoredChunk, frozen=True, kw_only=True):
    sha256: str


class NewChunk(ChunkText, frozen=True, kw_only=True):
    sha256: str
    #: Exact length in the embedder's tokens (None: not counted).
    tokens: int | None = None
    #: Longer than the embedder's window: the model never reads its tail.
    over_window: bool = False
    #: The sections it spans (heading paths), if it has one.
    section: str | None = None
    #: PDFs: where its text sits, (page, x0, y0, x1, y1) a rectangle, flat.
    boxes: list[float] | None = None
    #: A piece of a table (its header row first).
    is_table: bool = False
    #: Its keyword vector (:func:`stages.text.keywords.stored_vector`; None: computed
    #: when indexed).
    keywords: bytes | None = None


class ChunkTokens(msgspec.Struct, frozen=True, kw_only=True):
    """A document's text chunks: count, largest and total tokens, how many over the window."""

    chunks: int
    max_tokens: int | None
    tokens: int | None
    over_window: int


class OverWindow(msgspec.Struct, frozen=True, kw_only=True):
    chunks: int
    documents: int


class ChunkVector(StoredChunk, frozen=True, kw_only=True):
    vector: Vector | None
    section: str | None = None
    is_table: bool = False
    #: Its stored keyword vector (None: none stored, or not read).
    keywords: bytes | None = None


#: The chunks' columns a write fills, in the order of its rows. Binary COPY rather than an
#: INSERT of arrays: asyncpg checks every element of an array parameter for nesting (an
#: ABC ``isinstance`` each: ten arrays of every chunk), and the server unpacks the arrays
#: again. On bench.ingest's 53,873 chunks: ~0.1 s less client CPU and up to ~0.1 s less
#: of PostgreSQL's in one process (a chunk-only worker, six alternating runs: 0.07 s less
#: for the two together, within the noise).
CHUNK_COLUMNS = (
    "document_id", "kind", "generation", "ordinal", "text", "page_start", "page_end", "sha256",
    "tokens", "over_window", "section", "boxes", "is_table", "keywords",
)  # fmt: skip


def _columns(rows: Sequence[msgspec.Struct], *fields: str) -> list[list[Any]]:
    """One list per field of ``rows``, in the order given: the arrays of an ``unnest(...)``
    insert."""
    return [[getattr(row, field) for row in rows] for field in fields]


_encode_layout = msgspec.msgpack.Encoder().encode
_decode_layout = msgspec.msgpack.Decoder(Layout).decode


async def replace_pages(conn: Conn, document_id: uuid.UUID, pages: Sequence[Page]) -> None:
    await conn.execute(Q["delete_pages"], document_id)
    await conn.execute(
        Q["insert_pages"],
        document_id,
        *_columns(pages, "page", "text", "section"),
        [None if p.layout is None else _encode_layout(p.layout) for p in pages],
    )


async def pages(db: Reader, document_id: uuid.UUID) -> list[Page]:
    rows = await db.fetch(Q["document_pages"], document_id)
    return [Page(r["page"], r["text"], r["section"], _layout(r["layout"])) for r in rows]


def _layout(data: bytes | None) -> Layout | None:
    """A stored layout; one this version cannot read (written by a newer one) counts as
    none: the page is chunked as text."""
    if data is None:
        return None
    try:
        return _decode_layout(data)
    except msgspec.DecodeError:
        return None


async def replace_assets(conn: Conn, document_id: uuid.UUID, assets: Sequence[Asset]) -> None:
    await conn.execute(Q["delete_assets_except"], document_id, [a.sha256 for a in assets])
    if not assets:
        return
    await conn.execute(
        Q["upsert_assets"],
        document_id,
        *_columns(
            assets, "sha256", "object_key", "media_type", "byte_size", "page", "width", "height"
        ),
    )


async def chunk_ordinals_of(
    db: Reader, document_ids: Sequence[uuid.UUID]
) -> dict[uuid.UUID, list[int]]:
    """``{document: its chunk ordinals}`` for a page of documents (none: absent)."""
    return await _by_document(db, "chunk_ordinals_of", document_ids, "ordinal")


async def asset_keys_of(
    db: Reader, document_ids: Sequence[uuid.UUID]
) -> dict[uuid.UUID, list[str]]:
    """``{document: its stored images' keys}`` for a page of documents."""
    return await _by_document(db, "asset_keys_of", document_ids, "object_key")


async def _by_document(
    db: Reader, query: str, document_ids: Sequence[uuid.UUID], column: str
) -> dict[uuid.UUID, list[Any]]:
    """``{document: its rows' column}`` of a named query over a page of documents."""
    found: dict[uuid.UUID, list[Any]] = {}
    for r in await db.fetch(Q[query], list(document_ids)):
        found.setdefault(r["document_id"], []).append(r[column])
    return found


async def assets(db: Reader, document_id: uuid.UUID) -> list[Asset]:
    rows = await db.fetch(Q["document_assets"], document_id)
    return [to_struct(Asset, r) for r in rows]


async def describe_asset(
    conn: Conn, document_id: uuid.UUID, sha256: str, text: str, model: str
) -> None:
    await conn.execute(Q["describe_asset"], document_id, sha256, text, model)


async def reuse_descriptions(conn: Conn, document_id: uuid.UUID, model: str) -> set[str]:
    """Copy ``model``'s descriptions of the same bytes, made for any document, onto this
    document's undescribed images; the sha256s copied."""
    return {r["sha256"] for r in await conn.fetch(Q["reuse_descriptions"], document_id, model)}


async def replace_text_chunks(
    conn: Conn, document_id: uuid.UUID, generation: int, chunks: Sequence[NewChunk]
) -> None:
    await conn.execute(Q["delete_chunks"], document_id)
    await _insert_chunks(conn, document_id, "text", generation, 0, chunks)


async def replace_image_chunks(
    conn: Conn, document_id: uuid.UUID, generation: int, chunks: Sequence[NewChunk]
) -> None:
    await conn.execute(Q["delete_image_chunks"], document_id)
    if chunks:  # most documents have no image to describe
        first = await conn.fetchval(Q["next_chunk_ordinal"], document_id)
        await _insert_chunks(conn, document_id, "image", generation, int(first), chunks)


async def _insert_chunks(
    conn: Conn,
    document_id: uuid.UUID,
    kind: str,
    generation: int,
    first: int,
    chunks: Sequence[NewChunk],
) -> None:
    if not chunks:
        return
    rows = [
        (document_id, kind, generation, first + i, c.text, c.page_start, c.page_end, c.sha256,
         c.tokens, c.over_window, c.section, c.boxes, c.is_table, c.keywords)
        for i, c in enumerate(chunks)
    ]  # fmt: skip
    await conn.copy_records_to_table("chunks", records=rows, columns=CHUNK_COLUMNS)


async def chunks(db: Reader, document_id: uuid.UUID) -> list[ChunkRow]:
    rows = await db.fetch(Q["document_chunks"], document_id)
    return [to_struct(ChunkRow, r) for r in rows]


async def chunks_over_window(db: Reader, document_id: uuid.UUID | None = None) -> OverWindow:
    row = await db.fetchrow(Q["chunks_over_window"], document_id)
    assert row is not None  # an aggregate always returns a row
    return OverWindow(chunks=row["chunks"], documents=row["documents"])


async def chunk_tokens(db: Reader, document_id: uuid.UUID) -> ChunkTokens:
    row = await db.fetchrow(Q["document_chunk_tokens"], document_id)
    assert row is not None  # an aggregate always returns a row
    return to_struct(ChunkTokens, row)


class TextsToEmbed(msgspec.Struct, frozen=True, kw_only=True):
    """A document's distinct chunk texts as one model's cache sees them."""

    #: Distinct texts (0: the document has no chunks).
    texts: int
    #: ``{sha256: text}`` of those without a vector of the model yet, in reading order.
    misses: dict[str, str]


async def texts_to_embed(db: Reader, document_id: uuid.UUID, model: str) -> TextsToEmbed:
    """One query: the texts of a document's chunks that ``model`` has no vector for (the
    cached ones are never shipped)."""
    rows = await db.fetch(Q["document_texts_to_embed"], document_id, model)
    misses: dict[str, str] = {}
    for sha, text in rows:
        if text is not None:
            misses.setdefault(sha, text)  # the same text twice is embedded once
    return TextsToEmbed(texts=len({r[0] for r in rows}), misses=misses)


async def insert_embeddings(
    conn: Conn, model: str, items: Sequence[tuple[str, Sequence[float]]]
) -> None:
    if not items:
        return
    # Raises ValueError when the vectors of the batch differ in size.
    matrix = np.asarray([vec for _, vec in items], dtype=VECTOR_DTYPE)
    await conn.execute(
        Q["insert_embeddings"],
        model,
        [sha for sha, _ in items],
        matrix.shape[1],
        [row.tobytes() for row in matrix],
    )


def vector_of(data: bytes | None) -> Vector | None:
    """A stored vector (see :data:`VECTOR_DTYPE`) as an ``array('f')``."""
    if data is None:
        return None
    return _native(data)


def _native(data: bytes) -> Vector:
    """Big-endian float32 bytes as an ``array('f')`` (this machine's byte order)."""
    out = array.array("f", data)
    if sys.byteorder == "little":
        out.byteswap()
    return out


async def chunk_vectors(
    db: Reader,
    document_id: uuid.UUID,
    model: str,
    *,
    after: int = -1,
    limit: int | None = None,
    keywords: bool = True,
) -> list[ChunkVector]:
    """The document's chunks with ``model``'s vectors, in ordinal order: those with an
    ordinal above ``after``, at most ``limit`` of them (None: all); with their stored
    keyword vectors unless not ``keywords``."""
    rows = await db.fetch(Q["chunk_vectors"], document_id, model, after, limit, keywords)
    return [
        ChunkVector(
            ordinal=r["ordinal"],
            kind=r["kind"],
            text=r["text"],
            page_start=r["page_start"],
            page_end=r["page_end"],
            generation=r["generation"],
            vector=vector,
            section=r["section"],
            is_table=r["is_table"],
            keywords=r["keywords"],
        )
        for r, vector in zip(rows, vectors_of([r["vector"] for r in rows]), strict=True)
    ]


def vectors_of(data: Sequence[bytes | None]) -> list[Vector | None]:
    """:func:`vector_of` of many, decoded together when they are all there and of one size
    (one conversion, then a slice each).

    Arrays, not lists of floats: qdrant-edge reads either as a sequence, and a list costs
    a Python float per dimension (in one process, 384 dimensions: ``tolist`` plus the
    qdrant-edge point's construction ~25 µs a point, with the arrays ~10 µs)."""
    sizes = {len(d) for d in data if d is not None}
    if len(sizes) != 1 or None in data:
        return [vector_of(d) for d in data]
    flat = _native(b"".join(cast("list[bytes]", data)))
    width = sizes.pop() // VECTOR_DTYPE.itemsize
    return [flat[at : at + width] for at in range(0, len(flat), width)]


async def documents_missing_model(db: Reader, model: str) -> list[uuid.UUID]:
    return [r["id"] for r in await db.fetch(Q["documents_missing_model"], model)]


# -- search: which generation answers ---------------------------------------------------


async def mark_indexed(conn: DbConn, document_id: uuid.UUID, generation: int) -> None:
    """In the index job's commit: this generation's points now answer search."""
    await conn.execute(Q["mark_indexed"], document_id, generation)
