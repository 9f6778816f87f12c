"""Fill a database by COPY with documents in mixed states, their jobs and chunks, without
running the pipeline (``bench.scale``'s tables at 1k, 100k and 1M documents).

Document ``n`` (from 1) is the same in every fill, so a database grows from one size to
the next by adding the numbers it lacks. Of every 100 documents: 87 ready, 10 failed
(half ``permanent`` at embed, half ``transient`` at parse), 2 processing (a running chunk
job) and 1 pending (a queued parse job); a tenth are in collection ``team``; the others belong
to one folder source. A ready document has its five succeeded jobs and ``CHUNKS`` short
chunks; a failed one the jobs up to its failure (and chunks if it got past chunk). Rows go
in by ``copy_records_to_table`` (binary COPY) in batches of ``BATCH`` documents, generated
as they are sent, so memory stays flat whatever the size.

Triggers and foreign keys are off for the fill (``session_replication_role = replica``:
the rows are consistent by construction, and a foreign-key check per chunk would triple
the time); the document counts of 0022 are recounted at the end, as that migration does.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

STAGES = ("parse", "chunk", "vision", "embed", "index")
#: 22 a document: 1M documents make 20.7M chunk rows (ready, failed at embed, processing).
CHUNKS = 22
BATCH = 5_000
#: Document n was created n seconds before this instant (newest: the largest n).
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
SOURCE_URI = "/scale"
SOURCE_ID = 1
#: Ids in order of n (not random): each table's primary key grows at its right edge, as a
#: fill by COPY wants; lookups by id cost the same either way.
ID_BASE = 0x5CA1E << 96

DOCUMENT_COLUMNS = (
    "id", "filename", "media_type", "byte_size", "sha256", "asset_key", "status", "stage",
    "error", "generation", "created_at", "updated_at", "collection", "source_id",
    "source_uri", "source_mtime_ns", "indexed_generation",
)  # fmt: skip
JOB_COLUMNS = (
    "document_id", "stage", "generation", "state", "attempts", "run_after", "lease_owner",
    "lease_token", "lease_expires_at", "last_error", "error_kind", "created_at",
    "started_at", "finished_at",
)  # fmt: skip
CHUNK_COLUMNS = (
    "document_id", "ordinal", "kind", "text", "page_start", "page_end", "sha256",
    "generation", "tokens",
)  # fmt: skip

RECOUNT_SQL = """
DELETE FROM document_counts;
INSERT INTO document_counts (collection, status, stage, source_id, n)
SELECT collection, status, CASE WHEN status = 'failed' THEN coalesce(stage, '') ELSE '' END,
       coalesce(source_id, 0), count(*)
FROM documents GROUP BY 1, 2, 3, 4;
"""
SOURCE_SQL = """
INSERT INTO sources (id, uri) OVERRIDING SYSTEM VALUE VALUES ($1, $2) ON CONFLICT DO NOTHING
"""


def document_id(n: int) -> uuid.UUID:
    return uuid.UUID(int=ID_BASE | n)


def state_of(n: int) -> tuple[str, str | None]:
    """(status, stage) of document ``n``: the mix described above."""
    r = n % 100
    if r < 5:
        return "failed", "embed"
    if r < 10:
        return "failed", "parse"
    if r < 12:
        return "processing", "chunk"
    if r == 12:
        return "pending", "parse"
    return "ready", "index"


def error_kind(stage: str | None) -> str:
    return "permanent" if stage == "embed" else "transient"


def _document(n: int) -> tuple[Any, ...]:
    status, stage = state_of(n)
    doc = document_id(n)
    at = EPOCH + timedelta(seconds=n)
    error = f"{stage}: synthetic failure {n % 7}" if status == "failed" else None
    team = n % 10 == 3
    return (
        doc, f"doc-{n}.pdf", "application/pdf", 1000 + n % 5000,
        hashlib.md5(b"%d" % n).hexdigest(), f"documents/{doc}/original-{n}.pdf", status,
        stage, error, 1, at, at, "team" if team else "default", None if team else SOURCE_ID,
        None if team else f"doc-{n}.pdf", n * 1_000_000, 1 if status == "ready" else None,
    )  # fmt: skip


def _jobs(n: int) -> Iterator[tuple[Any, ...]]:
    status, stage = state_of(n)
    doc, at = document_id(n), EPOCH + timedelta(seconds=n)
    last = STAGES.index(stage or "index")
    for i, name in enumerate(STAGES[: last + 1]):
        state = "succeeded" if i < last or status == "ready" else _live[status]
        failed, running = state == "failed", state == "running"
        yield (
            doc, name, 1, state, 0 if state == "queued" else 1, at,
            "scale:1" if running else None, uuid.UUID(int=n) if running else None,
            at + timedelta(days=3650) if running else None,
            f"synthetic failure {n % 7}" if failed else None,
            error_kind(stage) if failed else None, at,
            None if state == "queued" else at, at if state in ("succeeded", "failed") else None,
        )  # fmt: skip


#: The state of the last job of a document that is not ready.
_live = {"failed": "failed", "processing": "running", "pending": "queued"}


def _chunks(n: int) -> Iterator[tuple[Any, ...]]:
    status, stage = state_of(n)
    if status == "pending" or stage == "parse":
        return
    doc = document_id(n)
    for ordinal in range(CHUNKS):
        text = f"document {n} chunk {ordinal}: a short synthetic passage of text"
        sha = hashlib.md5(text.encode()).hexdigest()
        yield doc, ordinal, "text", text, 1 + ordinal // 4, 1 + ordinal // 4, sha, 1, 12


async def fill(conn: asyncpg.Connection, start: int, stop: int) -> None:
    """Add documents ``start`` to ``stop - 1`` (with their jobs and chunks); then recount
    and VACUUM ANALYZE, as a running system's autovacuum would have."""
    await conn.execute("SET session_replication_role = replica")
    await conn.execute(SOURCE_SQL, SOURCE_ID, SOURCE_URI)
    for first in range(start, stop, BATCH):
        numbers = range(first, min(first + BATCH, stop))
        await _copy(conn, "documents", DOCUMENT_COLUMNS, [_document(n) for n in numbers])
        await _copy(conn, "stage_jobs", JOB_COLUMNS, [j for n in numbers for j in _jobs(n)])
        await _copy(conn, "chunks", CHUNK_COLUMNS, [c for n in numbers for c in _chunks(n)])
    await conn.execute("SET session_replication_role = origin")
    await conn.execute(RECOUNT_SQL)
    await conn.execute("VACUUM (ANALYZE) documents, stage_jobs, chunks, document_counts")


async def _copy(
    conn: asyncpg.Connection, table: str, columns: tuple[str, ...], rows: list[tuple[Any, ...]]
) -> None:
    await conn.copy_records_to_table(table, records=rows, columns=columns)
