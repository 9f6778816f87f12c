"""Engine benchmark: ragline's job queue next to a minimal asyncpg loop, in one run.

``python -m bench.queue [--docs N] [--slots 1,4,16] [--quick]`` creates a throwaway
database (``ragline_bench_<random>``) on ``DATABASE_URL`` (default: the local server),
prints three sections (four with ``--parts ...,trace``) and drops the database:

1. throughput of a no-op five-stage pipeline, ragline's :class:`runtime.worker.worker.Worker`
   against the plainest ``FOR UPDATE SKIP LOCKED`` loop at the same slots per stage;
2. enqueue→claim latency of an idle worker, with LISTEN/NOTIFY and with polling only;
3. claim latency with 1,000 vs 1,000,000 finished rows in ``stage_jobs``, and the plan;
4. (``trace``, not in the default parts) throughput of section 1's pipeline with every
   document traced (docs/tracing.md): tracing off, on with no SDK (the API's no-op: what
   a plain install does), and on with the SDK exporting over OTLP/HTTP to a receiver
   process (``bench.harness.otlp``), side by side.

Figures are printed, never asserted: the machine is shared and noisy, so only the ratios
of runs made side by side mean much. Each contender runs once unmeasured first (a run's
first pass warms PostgreSQL's caches and the process's), then ``--repeat`` times in
rounds whose order turns (each contender goes first in turn), and the median is
reported. The
process is set up as a worker process is (:func:`runtime.process.interpreter.
tune_worker_interpreter`: the start-up heap frozen, young collections every 10,000
allocations), so the collector costs what it costs in ``python -m runtime``.
"""

from __future__ import annotations

import contextlib
import math
import random
import statistics
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any, TypeAlias

import anyio
import asyncpg
import msgspec
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from opentelemetry.trace import Tracer

from bench.args import Scale, bench_parser, parse_scaled
from bench.database import Conn
from bench.database import bench_database as bench_database
from bench.database import connection as connection
from bench.database import pool_of as pool_of
from bench.database import server_dsn as server_dsn
from bench.harness.pipelines import STAGES, ScriptedStage
from bench.report import banner as banner
from bench.report import heading as heading
from bench.report import percentile
from bench.report import row as row
from bench.report import verdict as verdict
from runtime.jobs.postgres import JobRepository
from runtime.jobs.postgres import Q as JOB_QUERIES
from runtime.models import NewJob
from runtime.process.interpreter import tune_worker_interpreter
from runtime.process.tracing import TRACER
from runtime.stage import Pipeline
from runtime.worker.config import WorkerConfig
from runtime.worker.worker import Worker

# The ``x as x`` imports re-export what bench.ingest still imports from here (it moved to
# bench.database and bench.report); they go when its import names those modules.

#: (dsn, documents, slots per stage) -> runs the pipeline until every document is ready.
Runner: TypeAlias = Callable[[str, int, int], Awaitable[None]]

PARTS = ("throughput", "wake", "claim")
#: Every part there is; ``trace`` runs only when asked for (``--parts trace``).
ALL_PARTS = (*PARTS, "trace")
LAST = STAGES[-1]
HOPS_FLOOR = 0.80
WAKE_P50_FLOOR_MS = 3.0
WAKE_P99_FLOOR_MS = 15.0
CLAIM_RATIO_FLOOR = 1.5
#: hops/s with tracing on over off: without an exporter (the API's no-op), and with one.
TRACE_NOOP_FLOOR = 0.97
TRACE_EXPORT_FLOOR = 0.90
#: The share of documents sampled in the last tracing column.
TRACE_SAMPLED = 0.1
#: Rounds of the tracing section unless ``--repeat`` says otherwise: its four contenders'
#: differences are a few percent, the spread of single runs on a shared host more.
TRACE_REPEAT = 5
#: Poll interval of the throughput workers; with LISTEN on it is only the fallback.
THROUGHPUT_POLL_S = 1.0
#: Poll interval of the wake-latency worker (its fallback when NOTIFY is off).
WAKE_POLL_S = 1.0
WAKE_SLOTS = 4
#: Time for an idle worker to connect and LISTEN before jobs trickle in.
WORKER_SETTLE_S = 1.0
#: A baseline slot with nothing to claim waits this long for an upstream hand-off.
BASELINE_IDLE_S = 0.05
CLAIM_WARMUP = 20
RUN_TIMEOUT_S = 600.0


class Options(Scale, frozen=True, kw_only=True):
    server_dsn: str
    wake_jobs: int = 200
    claims: int = 1000
    small_rows: int = 1000
    big_rows: int = 1_000_000
    parts: tuple[str, ...] = PARTS
    #: Rounds of the tracing section (``--repeat`` sets both).
    trace_repeat: int = TRACE_REPEAT


# -- SQL of the benchmark itself (the engine's own queries stay in schema/queries) --------

RESET_SQL = "TRUNCATE stage_jobs, documents, workers RESTART IDENTITY CASCADE"

# Bulk seeding: documents with distinct hashes, then one job per document.
SEED_DOCS_SQL = """
INSERT INTO documents (id, filename, media_type, byte_size, sha256, stage, status)
SELECT gen_random_uuid(), 'doc-' || i || '.pdf', 'application/pdf', 1000, md5(i::text),
       $2, 'pending'
FROM generate_series(1, $1) AS i
"""
SEED_JOBS_SQL = (
    "INSERT INTO stage_jobs (document_id, stage, generation) SELECT id, $1, 1 FROM documents"
)
# The same, each document in a trace of its own (a traceparent as submit stores it), a
# share $2 of them sampled (flags 01; 00: the root's sampler left it out).
SEED_TRACED_JOBS_SQL = """
INSERT INTO stage_jobs (document_id, stage, generation, trace_context)
SELECT id, $1, 1, '00-' || md5(id::text) || '-' || left(md5(random()::text), 16)
                  || CASE WHEN random() < $2 THEN '-01' ELSE '-00' END
FROM documents
"""

# The stage runs of sampled documents: what the receiver must have got for a run.
SAMPLED_RUNS_SQL = "SELECT count(*) FROM stage_jobs WHERE trace_context LIKE '%-01'"

# History: finished jobs spread over the documents and stages, in one statement.
SEED_FINISHED_SQL = """
WITH docs AS (SELECT array_agg(id) AS ids FROM documents)
INSERT INTO stage_jobs (document_id, stage, generation, state, attempts, started_at, finished_at)
SELECT docs.ids[1 + g % cardinality(docs.ids)],
       ($2::text[])[1 + g % cardinality($2::text[])],
       1, 'succeeded', 1, now(), now()
FROM docs, generate_series(1, $1) AS g
"""

# From the first claim to the last stage's last commit, on the server's clock.
SPAN_SQL = """
SELECT extract(epoch FROM max(finished_at) - $1::timestamptz)::float8 AS span_s,
       (SELECT count(*) FROM documents WHERE status = 'ready') AS ready
FROM stage_jobs WHERE stage = $2 AND state = 'succeeded'
"""

CLAIMED_SQL = "SELECT count(*) FROM stage_jobs WHERE stage = $1 AND started_at IS NOT NULL"

WAKE_SQL = """
SELECT document_id, (extract(epoch FROM started_at - created_at) * 1000)::float8 AS ms,
       extract(epoch FROM started_at)::float8 AS started_s
FROM stage_jobs WHERE stage = $1 AND started_at IS NOT NULL
"""

# The baseline: claim ONE job with SKIP LOCKED in a single UPDATE..RETURNING ...
BASELINE_CLAIM_SQL = """
UPDATE stage_jobs
SET state = 'running', attempts = attempts + 1, lease_token = gen_random_uuid(),
    lease_expires_at = now() + interval '60 seconds', started_at = now()
WHERE id = (
    SELECT id FROM stage_jobs
    WHERE state = 'queued' AND stage = $1 AND run_after <= now()
    ORDER BY priority DESC, run_after, id
    LIMIT 1
    FOR UPDATE SKIP LOCKED
)
RETURNING id
"""
# ... then mark it done and enqueue the next stage in one statement,
BASELINE_ADVANCE_SQL = """
WITH done AS (
    UPDATE stage_jobs SET state = 'succeeded', finished_at = now(), lease_expires_at = NULL
    WHERE id = $1
    RETURNING document_id, generation, max_attempts, priority
)
INSERT INTO stage_jobs (document_id, stage, generation, max_attempts, priority)
SELECT document_id, $2, generation, max_attempts, priority FROM done
"""
# ... or, after the last stage, mark the document ready (the same finish line as ragline).
BASELINE_FINISH_SQL = """
WITH done AS (
    UPDATE stage_jobs SET state = 'succeeded', finished_at = now(), lease_expires_at = NULL
    WHERE id = $1
    RETURNING document_id
)
UPDATE documents AS d SET status = 'ready' FROM done WHERE d.id = done.document_id
"""


# -- seeding ------------------------------------------------------------------------------


async def reseed(
    conn: Conn, docs: int, job_stage: str | None, sampled: float | None = None
) -> None:
    """Empty the tables, insert ``docs`` documents and, unless None, one job each (unless
    ``sampled`` is None, in a trace of its own, that share of them sampled)."""
    await conn.execute(RESET_SQL)
    await conn.execute(SEED_DOCS_SQL, docs, job_stage or STAGES[0])
    if job_stage is not None and sampled is not None:
        await conn.execute(SEED_TRACED_JOBS_SQL, job_stage, sampled)
    elif job_stage is not None:
        await conn.execute(SEED_JOBS_SQL, job_stage)
    await conn.execute("VACUUM ANALYZE documents, stage_jobs")
    # Flush the seed now rather than in the middle of the timed run.
    with contextlib.suppress(asyncpg.InsufficientPrivilegeError):
        await conn.execute("CHECKPOINT")


# -- 1. throughput ------------------------------------------------------------------------


def noop_pipeline() -> Pipeline:
    return Pipeline(stages=[ScriptedStage(name, noop=True) for name in STAGES])


async def run_ragline(dsn: str, _docs: int, slots: int) -> None:
    config = WorkerConfig(
        stages=STAGES,
        concurrency=dict.fromkeys(STAGES, slots),
        exit_when_idle=True,
        poll_s=THROUGHPUT_POLL_S,
    )
    await Worker(noop_pipeline(), dsn, config).run()


class Baseline:
    """``slots`` tasks per stage, each on its own connection, claiming ONE job at a time.

    The plainest loop there is: no pool (so no reset query when a connection goes back),
    no lease renewal, no notifications. A slot with nothing to claim waits for an
    in-process hand-off from the stage before, so polling does not slow it down either.
    """

    def __init__(self, dsn: str, docs: int) -> None:
        self.dsn = dsn
        self.left = docs
        self.finished = anyio.Event()
        self.handoff: dict[
            str, tuple[MemoryObjectSendStream[None], MemoryObjectReceiveStream[None]]
        ] = {stage: anyio.create_memory_object_stream[None](math.inf) for stage in STAGES}

    def close(self) -> None:
        for send, receive in self.handoff.values():
            send.close()
            receive.close()

    async def slot(self, index: int) -> None:
        stage = STAGES[index]
        after = STAGES[index + 1] if index + 1 < len(STAGES) else None
        async with connection(self.dsn) as conn:
            while True:
                job_id = await conn.fetchval(BASELINE_CLAIM_SQL, stage)
                if job_id is None:
                    await self._idle(stage)
                else:
                    await self._settle(conn, job_id, after)

    async def _idle(self, stage: str) -> None:
        with anyio.move_on_after(BASELINE_IDLE_S):
            await self.handoff[stage][1].receive()

    async def _settle(self, conn: Conn, job_id: int, after: str | None) -> None:
        if after is not None:
            await conn.execute(BASELINE_ADVANCE_SQL, job_id, after)
            self.handoff[after][0].send_nowait(None)
            return
        await conn.execute(BASELINE_FINISH_SQL, job_id)
        self.left -= 1
        if self.left == 0:
            self.finished.set()


async def run_baseline(dsn: str, docs: int, slots: int) -> None:
    baseline = Baseline(dsn, docs)
    try:
        async with anyio.create_task_group() as tg:
            for index in range(len(STAGES)):
                for _ in range(slots):
                    tg.start_soon(baseline.slot, index)
            await baseline.finished.wait()
            tg.cancel_scope.cancel()
    finally:
        baseline.close()


async def hops_per_s(
    dsn: str, docs: int, slots: int, runner: Runner, sampled: float | None = None
) -> float:
    """Seed ``docs`` documents (traced: see :func:`reseed`), run them through all stages;
    stage hops per second."""
    async with connection(dsn) as conn:
        await reseed(conn, docs, STAGES[0], sampled)
        started: datetime = await conn.fetchval("SELECT clock_timestamp()")
        with anyio.fail_after(RUN_TIMEOUT_S):
            await runner(dsn, docs, slots)
        span = await conn.fetchrow(SPAN_SQL, started, LAST)
    if span is None or span["ready"] != docs:
        raise RuntimeError(f"run ended with {span and span['ready']} of {docs} documents ready")
    return len(STAGES) * docs / float(span["span_s"])


class Pair(msgspec.Struct, frozen=True):
    slots: int
    ragline: list[float]
    baseline: list[float]

    @property
    def ratio(self) -> float:
        return statistics.median(self.ragline) / statistics.median(self.baseline)


async def throughput(
    dsn: str,
    opts: Options,
    contenders: Sequence[Runner],
    sampled: Sequence[float | None] | None = None,
    repeat: int | None = None,
) -> list[list[float]]:
    """Per contender, per slot count: the median of ``repeat`` (default ``opts.repeat``)
    rounds after one unmeasured run each (each contender's documents traced as
    ``sampled`` says, :func:`reseed`)."""
    results: list[list[float]] = [[] for _ in contenders]
    shares = list(sampled or [None] * len(contenders))
    for slots in opts.slots:
        runs: list[list[float]] = [[] for _ in contenders]
        for i, measured in warm_up_then_turns(len(contenders), repeat or opts.repeat):
            hops = await hops_per_s(dsn, opts.docs, slots, contenders[i], shares[i])
            if measured:
                runs[i].append(hops)
        for result, out in zip(results, runs, strict=True):
            result.append(statistics.median(out))
        print(
            f"  slots={slots}: "
            + "  ".join(f"[{', '.join(f'{v:.0f}' for v in out)}]" for out in runs),
            flush=True,
        )
    return results


def warm_up_then_turns(contenders: int, rounds: int) -> list[tuple[int, bool]]:
    """The runs in order, as (contender, measured): each contender once unmeasured, then
    ``rounds`` rounds, round ``r`` starting with contender ``r`` (mod their count)."""
    order = [(i, False) for i in range(contenders)]
    for r in range(rounds):
        order += [((r + k) % contenders, True) for k in range(contenders)]
    return order


async def section_throughput(dsn: str, opts: Options) -> None:
    heading(
        f"1. Throughput: no-op {len(STAGES)}-stage pipeline, {opts.docs} documents "
        f"(hops/s = {len(STAGES)}N / time until all ready; median of {opts.repeat}, "
        "after a warm-up run each, alternating; raw runs ragline, baseline)"
    )
    ragline, baseline = await throughput(dsn, opts, (run_ragline, run_baseline))
    widths = (5, 15, 16, 6, 12)
    row("slots", "ragline hops/s", "baseline hops/s", "ratio", "floor 0.80", widths=widths)
    for slots, ours, theirs in zip(opts.slots, ragline, baseline, strict=True):
        ratio = ours / theirs
        row(
            slots,
            f"{ours:.0f}",
            f"{theirs:.0f}",
            f"{ratio:.2f}",
            verdict(ratio >= HOPS_FLOOR),
            widths=widths,
        )


# -- 2. wake latency ----------------------------------------------------------------------


async def trickle(dsn: str, document_ids: Sequence[Any]) -> dict[Any, float]:
    """Enqueue one job at a time, 5–20 ms apart, as an application would; returns when
    each enqueue had committed (wall clock, seconds since the epoch)."""
    committed: dict[Any, float] = {}
    async with pool_of(dsn, 1) as pool:
        repo = JobRepository(pool)
        for document_id in document_ids:
            await repo.enqueue([NewJob(document_id=document_id, stage=LAST)])
            committed[document_id] = time.time()
            await anyio.sleep(random.uniform(0.005, 0.020))
    return committed


async def wait_claimed(conn: Conn, count: int, timeout_s: float) -> None:
    """Poll until ``count`` jobs were claimed (the worker is another task, not a process)."""
    with anyio.fail_after(timeout_s):
        while True:
            if await conn.fetchval(CLAIMED_SQL, LAST) >= count:
                return
            await anyio.sleep(0.05)


class Wake(msgspec.Struct, frozen=True):
    #: insert → claim, server clock (includes the enqueuer's own commit).
    insert_ms: list[float]
    #: enqueue returned → claim; the host's clock, so only meaningful on a local server.
    commit_ms: list[float]


async def wake_latencies(dsn: str, jobs: int, *, listen: bool) -> Wake:
    """Milliseconds from each job's enqueue to its claim."""
    config = WorkerConfig(
        stages=(LAST,), concurrency={LAST: WAKE_SLOTS}, listen=listen, poll_s=WAKE_POLL_S
    )
    worker = Worker(noop_pipeline(), dsn, config)
    async with connection(dsn) as conn:
        await reseed(conn, jobs, None)
        ids = [r["id"] for r in await conn.fetch("SELECT id FROM documents")]
        async with anyio.create_task_group() as tg:
            tg.start_soon(worker.run)
            await anyio.sleep(WORKER_SETTLE_S)
            committed = await trickle(dsn, ids)
            await wait_claimed(conn, jobs, WAKE_POLL_S * 3 + 10)
            worker.stop()
        rows = await conn.fetch(WAKE_SQL, LAST)
    return Wake(
        insert_ms=[r["ms"] for r in rows],
        commit_ms=[(r["started_s"] - committed[r["document_id"]]) * 1000 for r in rows],
    )


async def section_wake(dsn: str, opts: Options) -> None:
    heading(
        f"2. Wake latency: idle worker ({WAKE_SLOTS} slots), {opts.wake_jobs} jobs "
        "enqueued one at a time 5–20 ms apart; created_at → started_at, server clock"
    )
    print(
        "insert→claim: created_at → started_at (server clock; includes the enqueue's own "
        "commit); commit→claim: enqueue returned (client) → started_at (same host clock)"
    )
    widths = (22, 15, 8, 8, 8, 22)
    row("mode", "measure", "p50 ms", "p99 ms", "max ms", "floor p50≤3, p99≤15", widths=widths)
    for listen in (True, False):
        wake = await wake_latencies(dsn, opts.wake_jobs, listen=listen)
        mode = "LISTEN/NOTIFY" if listen else f"poll only (poll {WAKE_POLL_S:g}s)"
        for measure, ms in (("insert→claim", wake.insert_ms), ("commit→claim", wake.commit_ms)):
            p50, p99 = percentile(ms, 50), percentile(ms, 99)
            ok = p50 <= WAKE_P50_FLOOR_MS and p99 <= WAKE_P99_FLOOR_MS
            row(
                mode,
                measure,
                f"{p50:.2f}",
                f"{p99:.2f}",
                f"{max(ms):.2f}",
                verdict(ok) if listen else "-",
                widths=widths,
            )


# -- 3. claim latency vs table size -------------------------------------------------------


async def seed_history(conn: Conn, queued: int, finished: int) -> None:
    """``queued`` claimable jobs plus ``finished`` succeeded rows, vacuumed and analyzed."""
    await reseed(conn, queued, LAST)
    await conn.execute(SEED_FINISHED_SQL, finished, list(STAGES))
    await conn.execute("VACUUM ANALYZE stage_jobs")


async def explain_claim(conn: Conn) -> str:
    """The scans in the claim's plan (executed in a transaction that is rolled back)."""
    explain = (
        "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF) " + JOB_QUERIES["complete_and_claim"]
    )
    tx = conn.transaction()
    await tx.start()
    try:
        rows = await conn.fetch(explain, [], [], [], None, "bench", 60.0, [LAST], [1], [], [])
    finally:
        await tx.rollback()
    return "\n".join(r[0].strip(" ->") for r in rows if "Scan" in r[0] or "Cond" in r[0])


async def timed_claims(repo: JobRepository, count: int) -> list[float]:
    """Milliseconds per ``claim(stage, worker, 1, lease)``; each claim is then completed."""
    out: list[float] = []
    for _ in range(count):
        started = time.perf_counter()
        jobs = await repo.claim(LAST, "bench", 1, 60.0)
        out.append((time.perf_counter() - started) * 1000)
        await repo.complete(jobs[0], None)
    return out


async def claim_latencies(dsn: str, finished: int, claims: int) -> tuple[list[float], str]:
    async with connection(dsn) as conn:
        await seed_history(conn, claims + CLAIM_WARMUP, finished)
        plan = await explain_claim(conn)
    async with pool_of(dsn, 1) as pool:
        ms = await timed_claims(JobRepository(pool), claims + CLAIM_WARMUP)
    return ms[CLAIM_WARMUP:], plan


async def section_claim(dsn: str, opts: Options) -> None:
    heading(
        f"3. Claim latency vs table size: {opts.claims} × claim(limit 1) + complete, "
        "with finished rows in stage_jobs"
    )
    widths = (14, 8, 8, 8)
    row("finished rows", "p50 ms", "p99 ms", "mean ms", widths=widths)
    means: list[float] = []
    plan = ""
    for finished in (opts.small_rows, opts.big_rows):
        ms, plan = await claim_latencies(dsn, finished, opts.claims)
        means.append(statistics.mean(ms))
        row(
            f"{finished:,}",
            f"{percentile(ms, 50):.3f}",
            f"{percentile(ms, 99):.3f}",
            f"{means[-1]:.3f}",
            widths=widths,
        )
    ratio = means[1] / means[0]
    print(
        f"mean ratio {opts.big_rows:,} / {opts.small_rows:,}: {ratio:.2f} "
        f"(floor ≤ {CLAIM_RATIO_FLOOR}: {verdict(ratio <= CLAIM_RATIO_FLOOR)})"
    )
    print(
        f"access paths of complete_and_claim (a claim of 1) with {opts.big_rows:,} "
        f"finished rows:\n{plan}",
        flush=True,
    )


# -- 4. tracing -----------------------------------------------------------------------------


def traced_runner(
    tracer: Tracer | None,
    cpu_us: dict[int, list[float]],
    flush: Callable[[], object] = lambda: None,
    received: Callable[[], int] | None = None,
) -> Runner:
    """Section 1's ragline run, its spans going to ``tracer`` (None: tracing off); then
    ``flush`` (an exporter's backlog, outside the time measured, not into the next run).
    Appends this process's CPU µs per hop, the flush's included, to ``cpu_us[slots]``: on
    a busy machine a steadier figure than hops/s, since others' load moves wall time far
    more than CPU time. ``received``: the receiver's count of spans, which must have grown
    by the sampled runs (none lost)."""

    async def run(dsn: str, docs: int, slots: int) -> None:
        config = WorkerConfig(
            stages=STAGES,
            concurrency=dict.fromkeys(STAGES, slots),
            exit_when_idle=True,
            poll_s=THROUGHPUT_POLL_S,
            trace=tracer is not None,
        )
        before = received() if received else 0
        started = time.process_time()
        await Worker(noop_pipeline(), dsn, config, tracer=tracer or TRACER).run()
        await anyio.to_thread.run_sync(flush)
        used_s = time.process_time() - started
        cpu_us.setdefault(slots, []).append(used_s * 1e6 / (len(STAGES) * docs))
        if received is not None:
            await check_received(dsn, received() - before)

    return run


async def check_received(dsn: str, got: int) -> None:
    async with connection(dsn) as conn:
        runs: int = await conn.fetchval(SAMPLED_RUNS_SQL)
    if got != runs:
        raise RuntimeError(f"the receiver got {got} spans for {runs} sampled stage runs")


async def section_trace(dsn: str, opts: Options) -> None:
    from bench.harness.otlp import cpu_s, exporting_provider, receiver_process

    heading(
        f"4. Tracing: section 1's pipeline, {opts.docs} documents each in a trace of its own "
        f"(median of {opts.trace_repeat} rounds after a warm-up run each, the order turning; "
        "raw runs off, no exporter, OTLP exporter, "
        f"OTLP exporter with 1 document in {round(1 / TRACE_SAMPLED)} sampled)"
    )
    print(
        "off: WorkerConfig(trace=False), no span at all; no exporter: the opentelemetry API "
        "with no SDK (a plain install, or OTEL_TRACES_EXPORTER=none); OTLP exporter: what "
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT sets up (runtime.process.tracing."
        "exporting_provider: spans shipped to an exporter process that encodes and sends "
        "OTLP/HTTP itself) to a receiver process on this host, every span counted; sampled: "
        "the same, the documents' roots sampled at that ratio (the runs follow their parent)"
    )
    cpu: list[dict[int, list[float]]] = [{}, {}, {}, {}]
    with receiver_process() as receiver:
        provider = exporting_provider(receiver.url)
        exporter_pid = provider.shipper.proc.pid
        sdk = provider.get_tracer("ragline")
        contenders = (
            traced_runner(None, cpu[0]),
            traced_runner(TRACER, cpu[1]),
            traced_runner(sdk, cpu[2], provider.force_flush, receiver.count),
            traced_runner(sdk, cpu[3], provider.force_flush, receiver.count),
        )
        try:
            off, noop, exported, sampled = await throughput(
                dsn, opts, contenders, [1.0, 1.0, 1.0, TRACE_SAMPLED], opts.trace_repeat
            )
        finally:
            exporter_cpu_s = cpu_s(exporter_pid)
            provider.shutdown()
        received = receiver.count()
    trace_table(opts, off, noop, exported, sampled)
    print(
        "the worker process's CPU per hop, µs (median; the ratio is off's over the mode's: "
        "the throughput the worker's CPU alone would allow, relative to off)"
    )
    medians = [[statistics.median(c[slots]) for slots in opts.slots] for c in cpu]
    inverse = [[1e6 / us for us in column] for column in medians]
    trace_table(opts, *inverse, show=lambda v: f"{1e6 / v:.0f}")
    # Every run counts here, the warm-up's too.
    runs = len(opts.slots) * (opts.trace_repeat + 1) * len(STAGES) * opts.docs
    print(
        f"spans the receiver got: {received:,}, each run's exactly its sampled stage runs "
        f"({runs:,} exported in full, {runs:,} sampled at {TRACE_SAMPLED:g}); the exporter "
        f"process's CPU (beside the worker's, not counted above): {exporter_cpu_s:.1f} s, "
        f"{exporter_cpu_s * 1e6 / max(received, 1):.0f} µs a span"
    )


def trace_table(
    opts: Options, *columns: list[float], show: Callable[[float], str] = lambda v: f"{v:.0f}"
) -> None:
    """hops/s (or what ``show`` makes of a rate) per slot count: off, then each traced
    mode with its ratio to off."""
    off, noop, exported, sampled = columns
    widths = (5, 7, 11, 5, 11, 8, 5, 11, 7, 5, 11)
    row("slots", "off", "no exporter", "ratio", ">=.97", "exporter", "ratio", ">=.90", "sampled",
        "ratio", ">=.90", widths=widths)  # fmt: skip
    for i, slots in enumerate(opts.slots):
        base = off[i]
        cells: list[str] = []
        for value, floor in (
            (noop[i], TRACE_NOOP_FLOOR),
            (exported[i], TRACE_EXPORT_FLOOR),
            (sampled[i], TRACE_EXPORT_FLOOR),
        ):
            cells += [show(value), f"{value / base:.2f}", verdict(value / base >= floor)]
        row(slots, show(base), *cells, widths=widths)


# -- entry point --------------------------------------------------------------------------

SECTIONS: dict[str, Callable[[str, Options], Awaitable[None]]] = {
    "throughput": section_throughput,
    "wake": section_wake,
    "claim": section_claim,
    "trace": section_trace,
}


async def main(opts: Options) -> None:
    tune_worker_interpreter()
    await banner(opts.server_dsn, "ragline engine benchmark", "uvloop")
    async with bench_database(opts.server_dsn) as dsn:
        for part in opts.parts:
            await SECTIONS[part](dsn, opts)


def parse_args(argv: Sequence[str] | None = None) -> Options:
    parser = bench_parser("bench.queue", __doc__)
    parser.add_argument(
        "--parts",
        help=f"comma-separated subset of {','.join(ALL_PARTS)} (default {','.join(PARTS)})",
    )
    full = Options(server_dsn=server_dsn())
    quick = msgspec.structs.replace(
        full,
        docs=300,
        slots=(1, 4),
        repeat=1,
        trace_repeat=1,
        wake_jobs=40,
        claims=200,
        big_rows=100_000,
    )
    opts, args = parse_scaled(parser, argv, full, quick)
    if args.repeat is not None:
        opts = msgspec.structs.replace(opts, trace_repeat=args.repeat)
    if not args.parts:
        return opts
    parts = tuple(p for p in args.parts.split(",") if p in SECTIONS)
    return msgspec.structs.replace(opts, parts=parts)


if __name__ == "__main__":
    anyio.run(main, parse_args(), backend_options={"use_uvloop": True})
