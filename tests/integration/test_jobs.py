"""Every transition of a job's life, against a real PostgreSQL (docs/architecture.md)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from typing import Any

import anyio
import asyncpg
import pytest

from runtime.db.connect import prime_codecs
from runtime.jobs.documents import DocumentRepository
from runtime.jobs.postgres import TRANSACTION_ATTEMPTS, JobRepository, in_transaction
from runtime.jobs.store import Claim
from runtime.models import DocumentStatus, Failure, Job, JobState, NewDocument
from runtime.stage import DbConn
from tests.support.notify import Heard, listening
from tests.support.waits import wait_until

#: The engine runs on uvloop and on plain asyncio alike.
pytestmark = [pytest.mark.anyio, pytest.mark.both_backends]

LEASE_S = 30.0


@pytest.fixture
async def pool(dsn: str) -> AsyncIterator[asyncpg.Pool[Any]]:
    async with asyncpg.create_pool(dsn, min_size=1, max_size=8) as p:
        yield p


@pytest.fixture
def repo(pool: asyncpg.Pool[Any]) -> JobRepository:
    return JobRepository(pool)


@pytest.fixture
def docs(pool: asyncpg.Pool[Any]) -> DocumentRepository:
    return DocumentRepository(pool)


def new_doc(name: str = "a.pdf") -> NewDocument:
    return NewDocument(
        filename=name, media_type="application/pdf", byte_size=3, sha256=uuid.uuid4().hex
    )


async def submit(docs: DocumentRepository, stage: str = "parse") -> uuid.UUID:
    return (await docs.submit(new_doc(), stage)).document_id


async def claim_one(repo: JobRepository, stage: str = "parse", **kw: Any) -> Job:
    jobs = await repo.claim(stage, "test:1:w", 1, LEASE_S, **kw)
    assert len(jobs) == 1
    return jobs[0]


async def test_submit_is_atomic_and_dedupes(docs: DocumentRepository, repo: JobRepository) -> None:
    doc = new_doc()
    first = await docs.submit(doc, "parse")
    again = await docs.submit(NewDocument(**{**_fields(doc), "id": uuid.uuid4()}), "parse")
    forced = await docs.submit(
        NewDocument(**{**_fields(doc), "id": uuid.uuid4(), "forced": True}), "parse"
    )
    assert first.created and not again.created and forced.created
    assert again.document_id == first.document_id != forced.document_id
    jobs = await repo.document_jobs(first.document_id)
    assert [(j.stage, j.state, j.generation) for j in jobs] == [("parse", JobState.QUEUED, 1)]


def _fields(doc: NewDocument) -> dict[str, Any]:
    return {f: getattr(doc, f) for f in doc.__struct_fields__}


async def test_submit_inside_callers_transaction_rolls_back(
    pool: asyncpg.Pool[Any], docs: DocumentRepository, repo: JobRepository
) -> None:
    doc = new_doc()
    async with pool.acquire() as conn:
        tx = conn.transaction()
        await tx.start()
        await docs.submit(doc, "parse", conn=conn)
        await tx.rollback()
    assert await docs.get(doc.id) is None
    assert await repo.count_live(["parse"]) == 0


async def test_claim_sets_lease_and_counts_attempt(
    docs: DocumentRepository, repo: JobRepository
) -> None:
    doc_id = await submit(docs)
    job = await claim_one(repo)
    row = await repo.get_job(job.id)
    assert row is not None
    assert row.state == JobState.RUNNING and row.attempts == 1
    assert row.lease_owner == "test:1:w" and row.lease_token == job.lease_token
    assert job.document_id == doc_id and job.filename == "a.pdf"
    assert await repo.claim("parse", "test:2:w", 5, LEASE_S) == []  # nothing left


async def test_claim_takes_no_more_than_free_slots(
    docs: DocumentRepository, repo: JobRepository
) -> None:
    for _ in range(5):
        await submit(docs)
    assert len(await repo.claim("parse", "w", 3, LEASE_S)) == 3
    assert len(await repo.claim("parse", "w", 3, LEASE_S)) == 2


async def test_claim_respects_run_after_and_stage(
    docs: DocumentRepository, repo: JobRepository
) -> None:
    await submit(docs, stage="embed")
    assert await repo.claim("parse", "w", 5, LEASE_S) == []
    past = datetime.now().astimezone() - timedelta(hours=1)
    assert await repo.claim("embed", "w", 5, LEASE_S, now=past) == []  # not due yet
    assert len(await repo.claim("embed", "w", 5, LEASE_S)) == 1


async def test_concurrent_claimers_never_share_a_job(
    docs: DocumentRepository, pool: asyncpg.Pool[Any]
) -> None:
    for _ in range(60):
        await submit(docs)
    seen: list[int] = []

    async def claimer(n: int) -> None:
        repo = JobRepository(pool)
        while jobs := await repo.claim("parse", f"w{n}", 2, LEASE_S):
            seen.extend(j.id for j in jobs)

    async with anyio.create_task_group() as tg:
        for n in range(6):
            tg.start_soon(claimer, n)
    assert len(seen) == 60 and len(set(seen)) == 60


async def test_complete_advances_document_and_enqueues_next(
    docs: DocumentRepository, repo: JobRepository
) -> None:
    doc_id = await submit(docs)
    job = await claim_one(repo)
    assert await repo.complete(job, "chunk")
    doc = await docs.get(doc_id)
    assert doc is not None and doc.status == DocumentStatus.PROCESSING and doc.stage == "chunk"
    states = [(j.stage, j.state) for j in await repo.document_jobs(doc_id)]
    assert states == [("parse", JobState.SUCCEEDED), ("chunk", JobState.QUEUED)]
    last = await claim_one(repo, "chunk")
    assert await repo.complete(last, None)
    doc = await docs.get(doc_id)
    assert doc is not None and doc.status == DocumentStatus.READY


async def test_settle_completes_and_claims_in_one_commit(
    docs: DocumentRepository, repo: JobRepository
) -> None:
    first, second = await submit(docs), await submit(docs)
    job = await claim_one(repo)
    settled = await repo.settle([(job, "chunk")], Claim("test:1:w", LEASE_S, {"parse": 5}))
    assert settled.held == {job.id}
    [following] = settled.claimed  # only one other parse job exists
    assert {job.document_id, following.document_id} == {first, second}
    assert following.attempts == 1 and following.lease_token != job.lease_token
    row = await repo.get_job(following.id)
    assert row is not None and row.state == JobState.RUNNING
    assert row.lease_token == following.lease_token and row.lease_owner == "test:1:w"
    # It claims the chunk job the first call enqueued, not the one it enqueues itself:
    # that is not in its snapshot.
    chunk = await repo.settle([(following, "chunk")], Claim("test:1:w", LEASE_S, {"chunk": 5}))
    assert chunk.held == {following.id}
    assert [c.document_id for c in chunk.claimed] == [job.document_id]
    assert await repo.count_live(["chunk"]) == 2


@pytest.fixture
async def heard(dsn: str) -> AsyncIterator[Heard]:
    async with listening(dsn) as heard:
        yield heard


async def test_completion_notifies_only_for_jobs_beyond_the_callers_own_slots(
    docs: DocumentRepository, repo: JobRepository, heard: Heard
) -> None:
    for _ in range(4):
        await submit(docs)
    jobs = await repo.claim("parse", "test:1:w", 4, LEASE_S)
    a, b, c, d = jobs
    # No idle worker but the caller's one free chunk slot needs waking: silence.
    assert await heard.after(repo.settle([(a, "chunk")], own_free={"chunk": 1})) == []
    # The chunk queue is not empty now: whoever is busy will come back for it. Silence.
    assert await heard.after(repo.settle([(b, "chunk")], own_free={})) == []
    await repo.claim("chunk", "test:1:w", 5, LEASE_S)  # empty the chunk queue
    # Two new jobs, one free slot of the caller's: the other one wakes someone else.
    assert await heard.after(repo.settle([(c, "chunk"), (d, "chunk")], own_free={"chunk": 1})) == [
        "chunk"
    ]


async def test_register_worker_reports_the_stages_other_live_workers_serve(
    repo: JobRepository, heard: Heard
) -> None:
    assert await repo.register_worker("test:1:a", ["parse", "chunk"]) == set()
    assert await repo.register_worker("test:2:b", ["chunk", "embed"]) == {"parse", "chunk"}
    assert await repo.register_worker("test:1:a", ["parse"]) == {"chunk", "embed"}
    # Not heard from within the window: not counted.
    assert await repo.register_worker("test:2:b", ["embed"], peers_within_s=0.0) == set()
    assert await heard.after(repo.announce_worker("ragline_jobs", "+worker")) == ["+worker"]


async def test_settle_with_failing_writer_claims_nothing(
    docs: DocumentRepository, repo: JobRepository
) -> None:
    await submit(docs)
    await submit(docs)
    job = await claim_one(repo)

    async def write(conn: DbConn) -> None:
        raise RuntimeError("writer broke")

    with pytest.raises(RuntimeError):
        await repo.settle([(job, "chunk")], Claim("w", LEASE_S, {"parse": 1}), write)
    assert await repo.count_live(["chunk"]) == 0
    left = await repo.claim("parse", "w", 5, LEASE_S)
    assert len(left) == 1  # the claim was rolled back with the completion


async def test_settle_retried_after_lost_reply_still_holds(
    docs: DocumentRepository, repo: JobRepository
) -> None:
    await submit(docs)
    job = await claim_one(repo)
    assert (await repo.settle([(job, "chunk")])).held == {job.id}
    # The same call again (as after a reply lost with the connection): it held, nothing new.
    assert (await repo.settle([(job, "chunk")])).held == {job.id}
    assert await repo.count_live(["chunk"]) == 1


async def test_lost_lease_commits_nothing(
    docs: DocumentRepository, repo: JobRepository, pool: asyncpg.Pool[Any]
) -> None:
    doc_id = await submit(docs)
    stale = await claim_one(repo)
    # The lease expires and the sweep hands the job to another worker: new token.
    later = datetime.now().astimezone() + timedelta(seconds=LEASE_S + 1)
    await repo.rescue_expired(now=later)
    fresh = await claim_one(repo, now=later)
    assert fresh.lease_token != stale.lease_token
    wrote: list[bool] = []

    async def write(conn: DbConn) -> None:
        wrote.append(True)

    assert not await repo.complete(stale, "chunk", write)
    assert (
        await repo.retry_or_fail(stale, Failure(message="x", kind="e", permanent=True), 0) is None
    )
    assert not await repo.release(stale)
    assert wrote == []
    assert [j.stage for j in await repo.document_jobs(doc_id)] == ["parse"]
    assert await repo.complete(fresh, "chunk", write)
    assert wrote == [True]


async def test_writer_runs_in_the_completion_transaction(
    docs: DocumentRepository, repo: JobRepository, pool: asyncpg.Pool[Any]
) -> None:
    doc_id = await submit(docs)
    job = await claim_one(repo)

    async def write(conn: DbConn) -> None:
        await conn.execute(
            "INSERT INTO test_effects (document_id, stage, job_id, pid) VALUES ($1,'parse',$2,0)",
            doc_id,
            job.id,
        )
        raise RuntimeError("writer broke")

    with pytest.raises(RuntimeError):
        await repo.complete(job, "chunk", write)
    assert await pool.fetchval("SELECT count(*) FROM test_effects") == 0
    row = await repo.get_job(job.id)
    assert row is not None and row.state == JobState.RUNNING  # rolled back as a whole
    assert await repo.count_live(["chunk"]) == 0


async def test_transient_failure_requeues_with_delay(
    docs: DocumentRepository, repo: JobRepository
) -> None:
    await submit(docs)
    job = await claim_one(repo)
    failure = Failure(message="HTTP 503", kind="transient", permanent=False)
    assert await repo.retry_or_fail(job, failure, 120.0) is JobState.QUEUED
    row = await repo.get_job(job.id)
    assert row is not None and row.last_error == "HTTP 503" and row.lease_token is None
    assert await repo.claim("parse", "w", 1, LEASE_S) == []  # backing off
    later = datetime.now().astimezone() + timedelta(seconds=121)
    again = await repo.claim("parse", "w", 1, LEASE_S, now=later)
    assert len(again) == 1 and again[0].attempts == 2


async def test_permanent_failure_fails_document_at_once(
    docs: DocumentRepository, repo: JobRepository
) -> None:
    doc_id = await submit(docs)
    job = await claim_one(repo)
    failure = Failure(message="encrypted PDF", kind="invalid_document", permanent=True)
    assert await repo.retry_or_fail(job, failure, 0) is JobState.FAILED
    doc = await docs.get(doc_id)
    assert doc is not None and doc.status == DocumentStatus.FAILED
    assert doc.error == "parse: encrypted PDF"
    assert await repo.count_live(["parse"]) == 0


async def test_exhausted_attempts_fail_document_with_stage_and_reason(
    docs: DocumentRepository, repo: JobRepository
) -> None:
    doc_id = await submit(docs)
    failure = Failure(message="HTTP 500 from cohere", kind="transient", permanent=False)
    states = []
    for _ in range(3):
        job = await claim_one(repo)
        states.append(await repo.retry_or_fail(job, failure, 0))
    assert states == [JobState.QUEUED, JobState.QUEUED, JobState.FAILED]
    doc = await docs.get(doc_id)
    assert doc is not None and doc.error == "parse: HTTP 500 from cohere"


async def test_release_does_not_count_attempt(
    docs: DocumentRepository, repo: JobRepository
) -> None:
    await submit(docs)
    job = await claim_one(repo)
    assert await repo.release(job)
    again = await claim_one(repo)
    assert again.attempts == 1 and again.id == job.id


async def test_heartbeat_renews_only_held_leases(
    docs: DocumentRepository, repo: JobRepository
) -> None:
    await submit(docs)
    await submit(docs)
    a, b = await repo.claim("parse", "w", 2, LEASE_S)
    before = (await repo.get_job(a.id)).lease_expires_at  # type: ignore[union-attr]
    forged = (b.id, uuid.uuid4())
    held = await repo.heartbeat([(a.id, a.lease_token), forged], LEASE_S * 2)
    assert held == {a.id}
    after = (await repo.get_job(a.id)).lease_expires_at  # type: ignore[union-attr]
    assert before is not None and after is not None and after > before


async def test_sweep_requeues_expired_and_fails_exhausted(
    docs: DocumentRepository, repo: JobRepository
) -> None:
    doc_id = await submit(docs)
    future = datetime.now().astimezone()
    for _ in range(3):
        job = await claim_one(repo, now=future)
        future += timedelta(seconds=LEASE_S + 1)
        # Nothing expired yet at the claim time itself: the sweep is a no-op.
        assert await repo.rescue_expired(now=future - timedelta(seconds=LEASE_S)) == []
        rescued = await repo.rescue_expired(now=future)
        assert [r.id for r in rescued] == [job.id]
    assert rescued[0].state is JobState.FAILED
    doc = await docs.get(doc_id)
    assert doc is not None and doc.status == DocumentStatus.FAILED
    assert doc.error is not None and doc.error.startswith("parse: worker lost 3 times")


async def test_reprocess_cancels_old_generation(
    docs: DocumentRepository, repo: JobRepository
) -> None:
    doc_id = await submit(docs)
    old = await claim_one(repo)
    assert await docs.reprocess(doc_id, "chunk") == 2
    assert not await repo.complete(old, "chunk")  # cancelled under it
    jobs = await repo.document_jobs(doc_id)
    assert [(j.stage, j.state, j.generation) for j in jobs] == [
        ("parse", JobState.CANCELLED, 1),
        ("chunk", JobState.QUEUED, 2),
    ]
    doc = await docs.get(doc_id)
    assert doc is not None and doc.generation == 2 and doc.stage == "chunk"


LOCK_WAITERS_SQL = """
SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND wait_event_type = 'Lock'
"""


@pytest.mark.parametrize("change", ["reprocess", "retire"])
async def test_a_new_generation_locks_the_jobs_before_the_document(
    docs: DocumentRepository, pool: asyncpg.Pool[Any], change: str
) -> None:
    """Completing or failing a job locks the job, then its document (one statement). A
    reprocess or a delete, run while that statement holds the job, must wait for the job
    before it locks the document: locking the document first and then cancelling the job
    is the other order, and PostgreSQL aborts one of the two as a deadlock."""
    doc_id = await submit(docs)
    [job] = await docs.jobs.document_jobs(doc_id)
    done: list[object] = []

    async def run_change() -> None:
        if change == "reprocess":
            done.append(await docs.reprocess(doc_id, "chunk"))
        else:
            done.append(await docs.retire(doc_id))

    async def blocked() -> bool:
        return bool(await pool.fetchval(LOCK_WAITERS_SQL))

    async with anyio.create_task_group() as tg, pool.acquire() as conn:
        completion = conn.transaction()
        await completion.start()
        # The completion's order: the job's row, then the document's.
        await conn.execute("SELECT id FROM stage_jobs WHERE id = $1 FOR UPDATE", job.id)
        tg.start_soon(run_change)
        await wait_until(blocked, what=f"{change} to wait for the held job")
        # The change holds no lock on the document while it waits (NOWAIT: else this
        # fails at once rather than deadlocking).
        await conn.execute(
            "SELECT id FROM documents WHERE id = $1 FOR NO KEY UPDATE NOWAIT", doc_id
        )
        await conn.execute("UPDATE documents SET updated_at = now() WHERE id = $1", doc_id)
        await completion.commit()
    assert done == [2 if change == "reprocess" else True]
    states = {(j.stage, j.generation): j.state for j in await docs.jobs.document_jobs(doc_id)}
    assert states[("parse", 1)] == JobState.CANCELLED


async def test_a_short_transaction_aborted_as_a_deadlock_victim_runs_again(
    pool: asyncpg.Pool[Any],
) -> None:
    """What PostgreSQL aborts as a deadlock's victim is rolled back and run again, at most
    TRANSACTION_ATTEMPTS times; what each attempt wrote before the abort is gone."""
    name = f"t_{uuid.uuid4().hex}"
    await pool.execute(f"CREATE TABLE {name} (n int)")
    attempts: list[int] = []

    async def body(conn: DbConn) -> int:
        attempts.append(len(attempts) + 1)
        await conn.execute(f"INSERT INTO {name} VALUES ($1)", attempts[-1])
        if len(attempts) < TRANSACTION_ATTEMPTS:
            raise asyncpg.exceptions.DeadlockDetectedError("deadlock detected")
        return attempts[-1]

    try:
        assert await in_transaction(pool, body) == TRANSACTION_ATTEMPTS
        rows = [r["n"] for r in await pool.fetch(f"SELECT n FROM {name}")]
        assert rows == [TRANSACTION_ATTEMPTS]
        attempts.clear()

        async def always(conn: DbConn) -> int:
            attempts.append(1)
            raise asyncpg.exceptions.DeadlockDetectedError("deadlock detected")

        with pytest.raises(asyncpg.exceptions.DeadlockDetectedError):
            await in_transaction(pool, always)
        assert len(attempts) == TRANSACTION_ATTEMPTS
    finally:
        await pool.execute(f"DROP TABLE {name}")


async def test_enqueue_is_idempotent_per_live_stage(
    docs: DocumentRepository, repo: JobRepository
) -> None:
    from runtime.models import NewJob

    doc_id = await submit(docs)
    assert await repo.enqueue([NewJob(document_id=doc_id, stage="parse")]) == 0
    assert await repo.enqueue([NewJob(document_id=doc_id, stage="chunk")]) == 1


async def test_a_new_connection_looks_its_types_up_in_one_catalog_query(dsn: str) -> None:
    """prime_codecs (every pool's ``init``): the arrays and enums the queries use are
    looked up at once, so the hot path's first statements on a connection cost no
    catalog query of their own; without it each statement bringing a new type does."""
    lookups: list[str] = []

    def logged(record: Any) -> None:
        if "typeinfo" in record.query:
            lookups.append(record.query)

    async def primed(conn: asyncpg.Connection[Any]) -> None:
        conn.add_query_logger(logged)
        await prime_codecs(conn)

    async def unprimed(conn: asyncpg.Connection[Any]) -> None:
        conn.add_query_logger(logged)

    # One statement per type, as the queries bring them.
    statements = [
        ("SELECT $1::int4[]", [1]),
        ("SELECT $1::int8[]", [2]),
        ("SELECT $1::uuid[]", [uuid.uuid4()]),
        ("SELECT $1::bool[]", [True]),
        ("SELECT $1::bytea[]", [b"x"]),
        ("SELECT $1::ragline_job_state", "queued"),
        ("SELECT $1::ragline_chunk_kind", "text"),
    ]
    for init, expected in ((primed, 1), (unprimed, len(statements))):
        lookups.clear()
        async with (
            asyncpg.create_pool(dsn, min_size=1, max_size=1, init=init) as pool,
            pool.acquire() as conn,
        ):
            for query, arg in statements:
                assert await conn.fetchval(query, arg) == arg
        assert len(lookups) == expected, (init.__name__, lookups)
