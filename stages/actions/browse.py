"""Reading what is in, written once for every door that shows it (the HTTP API, the web
view, the MCP server): pages of documents, one document's detail (status, timeline, why it
waits, counts), the stages' table, and a document's text (a chunk with its neighbours, a
page).

None of these checks who asks: the door trims by readers first
(:mod:`stages.serve.access`), or passes the caller's principals where a query takes them.
"""

from __future__ import annotations

import base64
import binascii
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime

import msgspec

from runtime.api import (
    MissingInput,
    Pool,
    stage_table,
    timeline,
)
from stages.actions.documents import InvalidRequest
from stages.db import model_switch
from stages.db import serve as serve_db
from stages.ports.http import Counts as Counts
from stages.ports.http import DocumentDetail as DocumentDetail
from stages.ports.http import DocumentOut as DocumentOut
from stages.ports.http import DocumentPage as DocumentPage
from stages.ports.http import StageOut as StageOut
from stages.ports.services import Services

STATUSES = ("pending", "processing", "ready", "failed")
#: Chunks shown on each side of the one asked for, at most.
MAX_AROUND = 5
#: The largest page or ordinal PostgreSQL's integer holds.
MAX_INT = (1 << 31) - 1 - MAX_AROUND


def encode_cursor(d: DocumentOut) -> str:
    raw = f"{d.created_at.isoformat()}|{d.id}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, uuid.UUID]:
    """The (created_at, id) a cursor names; InvalidRequest for anything
    :func:`encode_cursor` would not have written, including a time without a zone or one
    that leaves the range of dates once in UTC (PostgreSQL would refuse it)."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        at, _, doc = raw.partition("|")
        when = datetime.fromisoformat(at)
        if when.tzinfo is None:
            raise ValueError("no time zone")
        return when.astimezone(UTC), uuid.UUID(doc)
    except (ValueError, OverflowError, binascii.Error, UnicodeDecodeError):
        raise InvalidRequest("cursor is not one this API returned") from None


async def documents_page(
    pool: Pool,
    stage_names: Sequence[str],
    *,
    status: str | None = None,
    stage: str | None = None,
    limit: int = 50,
    cursor: str | None = None,
    principals: Sequence[str] | None = None,
) -> DocumentPage:
    """Documents newest first (with ``principals``, those such a caller may read),
    filtered by status and stage, ``limit`` after ``cursor``; InvalidRequest for a bad
    status, stage or cursor."""
    if status is not None and status not in STATUSES:
        raise InvalidRequest(f"status must be one of {', '.join(STATUSES)}")
    if stage is not None and stage not in stage_names:
        raise InvalidRequest(f"stage must be one of {', '.join(stage_names)}")
    after = decode_cursor(cursor) if cursor else None
    found = await serve_db.documents_page(
        pool, status=status, stage=stage, after=after, limit=limit + 1, principals=principals
    )
    docs = [DocumentOut.of(d) for d in found[:limit]]
    more = len(found) > limit
    return DocumentPage(documents=docs, next_cursor=encode_cursor(docs[-1]) if more else None)


async def document_detail(
    pool: Pool, services: Services, doc_id: uuid.UUID
) -> DocumentDetail | None:
    """A document: status, stage timeline with attempts and errors, counts, why it waits;
    None when there is none."""
    t = await timeline(pool, doc_id)
    if t is None:
        return None
    found = await serve_db.document_counts(pool, doc_id, t.document.generation)
    counts = Counts(points=await _points(pool, services, doc_id), **msgspec.structs.asdict(found))
    base = msgspec.structs.asdict(DocumentOut.of(t.document))
    return DocumentDetail(**base, jobs=t.jobs, waiting=t.waiting, counts=counts)


async def _points(pool: Pool, services: Services, doc_id: uuid.UUID) -> int | None:
    try:
        live = await model_switch.live(pool, services)
        return await services.index.count(live.vector_collection, doc_id)
    except MissingInput:  # nothing indexed with this model yet
        return 0
    except Exception:  # the index is another service: its outage must not hide the rest
        return None


async def stages_overview(pool: Pool, stage_names: tuple[str, ...]) -> list[StageOut]:
    """Per stage: queue depth, backing off, running, failed, oldest ages, live workers."""
    rows = await stage_table(pool, stage_names)
    return [StageOut(**msgspec.structs.asdict(r)) for r in rows]


async def passage(
    pool: Pool, doc_id: uuid.UUID, ordinal: int, around: int = 1
) -> list[serve_db.ChunkText]:
    """The chunk ``ordinal`` of a document with up to ``around`` chunks on each side, in
    order; InvalidRequest when the document has no such chunk."""
    if not 0 <= ordinal <= MAX_INT:
        raise InvalidRequest(f"ordinal must be from 0 to {MAX_INT}, not {ordinal}")
    if not 0 <= around <= MAX_AROUND:
        raise InvalidRequest(f"around must be from 0 to {MAX_AROUND}, not {around}")
    found = await serve_db.chunk_window(pool, doc_id, ordinal - around, ordinal + around)
    if not any(c.ordinal == ordinal for c in found):
        raise InvalidRequest(f"document {doc_id} has no chunk {ordinal} (not chunked yet?)")
    return found


async def page_text(pool: Pool, doc_id: uuid.UUID, page: int) -> serve_db.PageText:
    """A document's text on one page (a section, for formats without pages);
    InvalidRequest when it has no such page."""
    if not 1 <= page <= MAX_INT:
        raise InvalidRequest(f"page must be from 1 to {MAX_INT}, not {page}")
    found = await serve_db.page_text(pool, doc_id, page)
    if found is None:
        pages = await serve_db.page_count(pool, doc_id)
        raise InvalidRequest(
            f"document {doc_id} has no page {page}"
            + (f" (pages 1-{pages})" if pages else " (not parsed yet?)")
        )
    return found
