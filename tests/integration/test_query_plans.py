"""The interactive reads plan without a sequential scan of the big tables (issue 37).

A throwaway database gets 100,000 documents in mixed states, their jobs (finished, failed,
queued, running) and chunks, made by SQL; after ANALYZE, each named query that a person
waits on (``status`` and ``status DOC``, ``failures``, ``collections``, the HTTP and web
documents pages and a document page, ``/v1/stages``, ``retry --error-kind``, sync's
planning, ``delete``) is planned with realistic parameters, and a ``Seq Scan`` on
``documents``, ``stage_jobs`` or ``chunks`` fails the test: at a million documents such a
scan is hundreds of milliseconds (the documents list took 280 ms before
``documents_newest``, migration 0020; ``status`` 1.2 s before ``document_counts``, 0022).
verify's pages are planned too: a scan there would make its walk quadratic.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import Any

import asyncpg
import pytest

import schema

pytestmark = pytest.mark.anyio

DOCUMENTS = 100_000

FILL = f"""
INSERT INTO documents (id, filename, media_type, byte_size, sha256, status, stage,
                       generation, created_at, updated_at, collection, error)
SELECT md5('d' || n)::uuid, 'doc-' || n || '.pdf', 'application/pdf', n, md5('s' || n),
       (CASE WHEN n % 100 = 0 THEN 'failed' WHEN n % 50 = 1 THEN 'processing'
             WHEN n % 97 = 2 THEN 'pending' ELSE 'ready' END)::ragline_document_status,
       CASE WHEN n % 100 = 0 THEN 'embed' WHEN n % 50 = 1 THEN 'chunk' END,
       1, now() - n * interval '1 second', now() - n * interval '1 second',
       CASE WHEN n % 10 = 0 THEN 'team' ELSE 'default' END,
       CASE WHEN n % 100 = 0 THEN 'embed: bad' END
FROM generate_series(1, {DOCUMENTS}) AS n;
INSERT INTO stage_jobs (document_id, stage, generation, state, attempts, started_at,
                        finished_at, error_kind, last_error, lease_owner, lease_token,
                        lease_expires_at)
SELECT md5('d' || n)::uuid, s.stage, 1,
       (CASE WHEN n % 100 = 0 AND s.stage = 'embed' THEN 'failed'
             WHEN n % 50 = 1 AND s.stage = 'chunk' THEN 'running'
             WHEN n % 97 = 2 THEN 'queued' ELSE 'succeeded' END)::ragline_job_state,
       1, now(), now(),
       CASE WHEN n % 100 = 0 AND s.stage = 'embed' THEN 'permanent' END,
       CASE WHEN n % 100 = 0 AND s.stage = 'embed' THEN 'bad' END,
       CASE WHEN n % 50 = 1 AND s.stage = 'chunk' THEN 'h:1' END,
       CASE WHEN n % 50 = 1 AND s.stage = 'chunk' THEN gen_random_uuid() END,
       CASE WHEN n % 50 = 1 AND s.stage = 'chunk' THEN now() + interval '1 minute' END
FROM generate_series(1, {DOCUMENTS}) AS n, (VALUES ('parse'), ('chunk'), ('embed')) AS s(stage)
WHERE NOT (n % 97 = 2 AND s.stage <> 'parse');
INSERT INTO chunks (document_id, ordinal, kind, text, page_start, page_end, sha256, generation)
SELECT md5('d' || n)::uuid, 0, 'text', 'chunk ' || n, 1, 1, md5('c' || n), 1
FROM generate_series(1, {DOCUMENTS}) AS n;
ANALYZE;
"""

BIG = {"documents", "stage_jobs", "chunks"}
ANY_DOC = "any document"
ANY_DOCS = "a page of documents"
ANY_JOB = "a queued job"
CURSOR_AT = datetime(2026, 1, 1, tzinfo=UTC)
CURSOR_ID = uuid.UUID(int=0)

#: (group, query, parameters): what the doors ask with.
INTERACTIVE: list[tuple[str, str, list[Any]]] = [
    # The HTTP documents list and the web view's, first page and later pages (keyset).
    ("serve", "documents_page", [None, None, None, None, 50, None]),
    ("serve", "documents_page", ["failed", None, None, None, 50, None]),
    ("serve", "documents_page", ["ready", None, CURSOR_AT, CURSOR_ID, 50, None]),
    ("serve", "documents_page", [None, "embed", CURSOR_AT, CURSOR_ID, 50, ["alice"]]),
    ("serve", "documents_page", [None, None, CURSOR_AT, CURSOR_ID, 50, None]),
    ("documents", "list_documents", [None, 50]),
    ("documents", "list_documents", ["processing", 50]),
    # A document page (HTTP, web view) and `status DOC`.
    ("documents", "get_document", [ANY_DOC]),
    ("documents", "get_documents", [ANY_DOCS]),
    ("stage_jobs", "document_jobs", [ANY_DOC]),
    ("stage_jobs", "get_job", [1]),
    ("status", "queue_position", [ANY_JOB]),
    ("serve", "document_counts", [ANY_DOC, 1]),
    ("serve", "chunk_window", [ANY_DOC, 0, 2]),
    ("serve", "chunk_boxes", [ANY_DOC, 0]),
    ("pipeline", "chunks_over_window", [ANY_DOC]),
    ("pipeline", "document_chunk_tokens", [ANY_DOC]),
    ("sources", "document_source", [ANY_DOC]),
    # `status`, `/v1/stages`, the web view's stage table, `collections`.
    ("status", "stage_overview", []),
    ("status", "failed_by_stage", []),
    ("documents", "count_documents_by_status", []),
    ("model_switch", "collection_counts", []),
    ("pipeline", "chunks_over_window", [None]),
    ("sources", "source_summaries", []),
    ("documents", "count_finished", [ANY_DOCS]),
    ("status", "documents_progress", [ANY_DOCS]),
    # `failures`, first page, any or one stage and kind.
    ("status", "failures", [None, None, 50]),
    ("status", "failures", ["embed", None, 50]),
    ("status", "failures", ["embed", "permanent", 50]),
    # `retry --error-kind`, `delete`, sync's planning of a source.
    ("stage_jobs", "retry_failed", [None, "permanent", None]),
    ("stage_jobs", "retry_failed", ["embed", None, None]),
    ("documents", "delete_documents", [ANY_DOCS]),
    ("stage_jobs", "lock_document_jobs", [ANY_DOC]),
    ("stage_jobs", "cancel_document_jobs", [ANY_DOC, 2]),
    ("sources", "source_documents", [1]),
    ("sources", "same_size_documents", ["default", [1000, 2000]]),
    ("sources", "source_unfinished", [1]),
    # verify's walk: a page of documents after a cursor, their chunks and images (a scan
    # here would make the walk quadratic).
    ("documents", "documents_after", [None, CURSOR_AT, CURSOR_ID, 1000]),
    ("documents", "documents_after", ["team", None, None, 1000]),
    ("pipeline", "chunk_ordinals_of", [ANY_DOCS]),
    ("pipeline", "asset_keys_of", [ANY_DOCS]),
    ("documents", "existing_documents", [ANY_DOCS]),
    # A file name where the CLI takes an id, in any or one collection.
    ("documents", "documents_named", ["doc-777.pdf", None, 10]),
    ("documents", "documents_named", ["doc-777.pdf", "default", 10]),
]


@pytest.fixture
async def big(dsn: str) -> Any:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(FILL)
        yield conn
    finally:
        await conn.close()


def _seq_scans(node: dict[str, Any]) -> list[str]:
    found = [node["Relation Name"]] if node["Node Type"] == "Seq Scan" else []
    for child in node.get("Plans", []):
        found += _seq_scans(child)
    return found


async def test_interactive_reads_do_not_scan_the_big_tables(big: asyncpg.Connection) -> None:
    doc = await big.fetchval("SELECT id FROM documents ORDER BY id LIMIT 1")
    page = [r["id"] for r in await big.fetch("SELECT id FROM documents ORDER BY id LIMIT 50")]
    job = await big.fetchval("SELECT id FROM stage_jobs WHERE state = 'queued' LIMIT 1")
    given = {ANY_DOC: doc, ANY_DOCS: page, ANY_JOB: job}
    scanned = {}
    for group, name, params in INTERACTIVE:
        args = [given.get(p, p) if isinstance(p, str) else p for p in params]
        statement = await big.prepare(f"EXPLAIN (FORMAT JSON) {schema.load(group)[name]}")
        plan = json.loads(await statement.fetchval(*args))[0]["Plan"]
        if bad := BIG & set(_seq_scans(plan)):
            scanned[f"{name}{args}"] = sorted(bad)
    assert not scanned, f"sequential scans on an interactive path: {scanned}"
