"""What is left after a chaos run, read from PostgreSQL, the vector index and the fake server;
and the after-run probes (writes of a worker that lost its lease, verify, an index worker)."""

from __future__ import annotations

import math
import uuid
from typing import Any

import asyncpg
import msgspec

from bench.harness.chaos.config import EMBED_BATCH, CountingCohere
from bench.harness.chaos.driver import Chaos
from bench.harness.procs import WorkerProcess
from runtime.errors import MissingInput
from stages.actions import verify as verify_mod
from stages.ports.vector_index import new_point, point_id
from stages.services import Services


class DocFinding(msgspec.Struct, kw_only=True):
    id: uuid.UUID
    filename: str
    status: str
    error: str | None
    generation: int
    chunks: int
    unique_texts: int
    points: int
    point_ids: int
    expected_found: int
    wrong_generation: int


class JobFinding(msgspec.Struct, kw_only=True):
    document_id: uuid.UUID
    stage: str
    state: str
    attempts: int
    max_attempts: int
    lost: int
    error_kind: str | None
    last_error: str | None


class Findings(msgspec.Struct, kw_only=True):
    docs: dict[uuid.UUID, DocFinding]
    jobs: list[JobFinding]
    orphan_points: int
    total_points: int
    verify: verify_mod.Report
    embed_ok: int
    embed_needed: int
    texts_embedded: int
    distinct_texts: int
    shared_text_slack: int
    faults: dict[str, int]

    def duplicates(self) -> int:
        return sum(d.points - d.point_ids for d in self.docs.values())

    def missing(self) -> int:
        return sum(d.chunks - d.expected_found for d in self.docs.values() if d.status == "ready")

    def extra(self) -> int:
        return sum(d.point_ids - d.expected_found for d in self.docs.values())


async def _doc_finding(pool: Any, services: Services, row: asyncpg.Record) -> DocFinding:
    doc_id: uuid.UUID = row["id"]
    chunks = await pool.fetch("SELECT ordinal, sha256 FROM chunks WHERE document_id = $1", doc_id)
    try:
        count = await services.index.count(services.vector_collection, doc_id)
        refs = await services.index.scan(services.vector_collection, doc_id)
    except MissingInput:  # nothing indexed at all
        count, refs = 0, []
    expected = {point_id(doc_id, r["ordinal"]) for r in chunks}
    ids = {r.id for r in refs}
    return DocFinding(
        id=doc_id,
        filename=row["filename"],
        status=row["status"],
        error=row["error"],
        generation=row["generation"],
        chunks=len(chunks),
        unique_texts=len({r["sha256"] for r in chunks}),
        points=count,
        point_ids=len(ids),
        expected_found=len(ids & expected),
        wrong_generation=sum(1 for r in refs if r.generation != row["generation"]),
    )


JOBS = """
SELECT document_id, stage, state::text AS state, attempts, max_attempts, lost, error_kind,
       last_error
FROM stage_jobs ORDER BY id
"""


async def inspect(chaos: Chaos) -> Findings:
    """Everything the checks need, read after the workers stopped."""
    return await inspect_at(chaos.dsn, chaos.services(), chaos.server)


async def inspect_at(dsn: str, services: Services, server: CountingCohere) -> Findings:
    """:func:`inspect` of any run: its database, its services (closed here), its server."""
    try:
        async with asyncpg.create_pool(dsn, min_size=1, max_size=2) as pool:
            return await _inspect(pool, services, server)
    finally:
        await services.aclose()


async def _inspect(pool: Any, services: Services, server: CountingCohere) -> Findings:
    rows = await pool.fetch(
        "SELECT id, filename, status::text AS status, error, generation FROM documents"
    )
    docs = {r["id"]: await _doc_finding(pool, services, r) for r in rows}
    jobs = [JobFinding(**dict(r.items())) for r in await pool.fetch(JOBS)]
    report = await verify_mod.verify(pool, services)
    by_doc = await verify_mod.scan_index(services)
    orphans = sum(len(refs) for d, refs in by_doc.items() if uuid.UUID(d) not in docs)
    share = await pool.fetch("SELECT count(DISTINCT document_id) AS n FROM chunks GROUP BY sha256")
    stats = server.snapshot()
    model = services.embedder.model
    distinct = await pool.fetchval("SELECT count(*) FROM embeddings WHERE model = $1", model)
    return Findings(
        docs=docs,
        jobs=jobs,
        orphan_points=orphans,
        total_points=sum(len(r) for r in by_doc.values()),
        verify=report,
        embed_ok=server.ok["embed"],
        embed_needed=sum(math.ceil(d.unique_texts / EMBED_BATCH) for d in docs.values()),
        texts_embedded=stats.texts_embedded,
        distinct_texts=int(distinct),
        shared_text_slack=sum(int(r["n"]) - 1 for r in share),
        faults=dict(server.faults),
    )


async def zombie_writes(chaos: Chaos, doc_id: uuid.UUID) -> uuid.UUID:
    """Write what index workers that lost their leases would: for ``doc_id``, its chunk 0
    and one chunk past its last, both with an older generation; and points of a document
    that was deleted meanwhile. Returns that deleted document's id."""
    services = chaos.services()
    try:
        async with asyncpg.create_pool(chaos.dsn, min_size=1, max_size=1) as pool:
            row = await pool.fetchrow(
                "SELECT generation, (SELECT count(*) FROM chunks WHERE document_id = $1) AS n "
                "FROM documents WHERE id = $1",
                doc_id,
            )
        assert row is not None, f"no document {doc_id}"
        old = int(row["generation"]) - 1
        vector = [1.0] + [0.0] * (chaos.config.dims - 1)
        gone = uuid.uuid4()
        points = [
            new_point(doc_id, 0, old, vector, payload={"zombie": True}),
            new_point(doc_id, int(row["n"]) + 3, old, vector, payload={"zombie": True}),
            new_point(gone, 0, 1, vector, payload={"zombie": True}),
        ]
        await services.index.upsert(services.vector_collection, points)
        return gone
    finally:
        await services.aclose()


async def verify_now(chaos: Chaos, *, repair: bool = False) -> verify_mod.Report:
    services = chaos.services()
    try:
        async with asyncpg.create_pool(chaos.dsn, min_size=1, max_size=2) as pool:
            report = await verify_mod.verify(pool, services)
            if repair:
                await verify_mod.repair(pool, services, report)
            return report
    finally:
        await services.aclose()


def run_index_worker(chaos: Chaos, timeout_s: float = 60.0) -> WorkerProcess:
    """One ``--stages index --exit-when-idle`` worker, run to its end."""
    args = [*chaos.fleet.args("index"), "--exit-when-idle"]
    proc = WorkerProcess(args, dict(chaos.env), chaos.fleet.logs / "repair-index.log")
    try:
        proc.wait(timeout_s)
    finally:
        proc.stop()
    return proc
