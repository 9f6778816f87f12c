"""Peer benchmark: ragline's engine next to PgQueuer on the same no-op pipeline, in one run.

``python -m bench.peers [--docs N] [--slots 1,4,16] [--repeat 2] [--quick]`` needs the
optional peer (``pip install pgqueuer``). For each slot count W it creates a throwaway
database (``ragline_bench_<random>``, as ``bench.queue`` does), installs PgQueuer's schema
next to ragline's, and alternates, ``--repeat`` times:

* ragline: exactly the throughput measurement of ``bench.queue`` (one in-process
  ``Worker``, W slots per stage, LISTEN/NOTIFY on); hops/s = 5N / (last ``index`` job's
  ``finished_at`` − server clock at start);
* PgQueuer: N ``parse`` jobs enqueued in one batch, then one ``QueueManager`` with five
  entrypoints parse→chunk→vision→embed→index, each with ``concurrency_limit=W``, each
  enqueuing the next stage's job for the same document; hops/s = 5N / (``created`` of
  the last ``index`` row in ``pgqueuer_log``, written by the statement that deletes the
  finished job − server clock at start). Its LISTEN/NOTIFY trigger is on, as it ships;
  ``batch_size`` is W and the fallback poll 1 s (the reasons are where they are set).

Then wake latency: an idle consumer (4 slots of ``index``), jobs enqueued one at a time
5–20 ms apart; milliseconds from the enqueue returning on the client to the claim on the
server's clock (ragline's ``started_at``, PgQueuer's ``updated``, both ``now()`` of the
claiming statement), and for PgQueuer also to its handler's first line. Client and
server share the host's clock only on a local server; a claim can be stamped before the
enqueuing client has read its own commit, hence figures just below zero.

Figures are printed, never asserted. A ratio above 1 means ragline moved more hops per
second. The machine is shared and noisy: read the ratio of the medians, not the absolute
hops/s, and compare runs of the same invocation only.
"""

from __future__ import annotations

import contextlib
import importlib
import random
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

import anyio
import asyncpg
import msgspec

from bench.args import bench_parser, parse_scaled
from bench.database import Conn, bench_database, connection, pool_of, server_dsn
from bench.harness.pipelines import STAGES
from bench.queue import (
    LAST,
    RUN_TIMEOUT_S,
    WAKE_SLOTS,
    WORKER_SETTLE_S,
    Options,
    hops_per_s,
    run_ragline,
    wake_latencies,
)
from bench.report import banner, heading, percentile, row

#: PgQueuer's fallback poll; with LISTEN on it only matters if a notification is missed
#: (PgQueuer itself re-polls after 0.1 s while it sees eligible work).
PGQ_DEQUEUE_TIMEOUT = timedelta(seconds=1.0)

# PgQueuer's default object names (no PGQUEUER_PREFIX).
PGQ_RESET_SQL = "TRUNCATE pgqueuer, pgqueuer_log, pgqueuer_statistics RESTART IDENTITY"
PGQ_SPAN_SQL = """
SELECT extract(epoch FROM max(created) - $1::timestamptz)::float8 AS span_s,
       count(*) AS done
FROM pgqueuer_log WHERE entrypoint = $2 AND status = 'successful'
"""


def load_pgqueuer() -> Any:
    """The ``pgqueuer`` module, or None; imported by name so mypy needs no stubs for it."""
    try:
        return importlib.import_module("pgqueuer")
    except ImportError:
        return None


# -- PgQueuer's pipeline ------------------------------------------------------------------


class PgqPipeline:
    """One QueueManager, one entrypoint per stage; each handler enqueues the next stage."""

    def __init__(self, pgq: Any, conn: Conn, enqueuer: Any, docs: int, slots: int) -> None:
        self.qm = pgq.QueueManager(pgq.Queries(pgq.AsyncpgDriver(conn)))
        self.enqueuer = enqueuer
        self.left = docs
        self.slots = slots
        for index, stage in enumerate(STAGES):
            after = STAGES[index + 1] if index + 1 < len(STAGES) else None
            register = self.qm.entrypoint(stage, concurrency_limit=slots, accepts_context=False)
            register(self._handler(after))

    def _handler(self, after: str | None) -> Callable[[Any], Awaitable[None]]:
        async def handle(job: Any) -> None:
            if after is not None:
                await self.enqueuer.enqueue(after, job.payload)
                return
            self.left -= 1
            if self.left == 0:
                self.qm.shutdown.set()

        return handle

    async def run(self) -> None:
        """Until the last ``index`` job is done; the exit flushes PgQueuer's log buffer."""
        # batch_size W, not the default 10: it also sizes the buffer of finished jobs
        # (flushed when full or every 0.1 s), and a finished job holds its
        # concurrency_limit slot until that flush, so with 10 > W every hop waits for
        # the timer (about 50 hops/s at W=1, hundreds of ms of wake latency).
        await self.qm.run(dequeue_timeout=PGQ_DEQUEUE_TIMEOUT, batch_size=self.slots)


async def pgq_reseed(pgq: Any, conn: Conn, entrypoint: str, docs: int) -> None:
    """Empty PgQueuer's tables and enqueue ``docs`` jobs in one batch."""
    await conn.execute(PGQ_RESET_SQL)
    queries = pgq.Queries(pgq.AsyncpgDriver(conn))
    payloads = [str(i).encode() for i in range(docs)]
    await queries.enqueue([entrypoint] * docs, payloads, [0] * docs)
    await conn.execute("VACUUM ANALYZE pgqueuer, pgqueuer_log")
    with contextlib.suppress(asyncpg.InsufficientPrivilegeError):
        await conn.execute("CHECKPOINT")


async def pgq_hops_per_s(pgq: Any, dsn: str, docs: int, slots: int) -> float:
    """The PgQueuer twin of ``bench.queue.hops_per_s``.

    The QueueManager has its own connection (``AsyncpgDriver``: dequeue, LISTEN, acks);
    the handlers enqueue through a pool with a connection per slot, as ragline's has.
    """
    handlers = len(STAGES) * slots
    async with (
        connection(dsn) as conn,
        connection(dsn) as qm_conn,
        pool_of(dsn, handlers) as pool,
    ):
        await pgq_reseed(pgq, conn, STAGES[0], docs)
        enqueuer = pgq.Queries(pgq.AsyncpgPoolDriver(pool))
        pipeline = PgqPipeline(pgq, qm_conn, enqueuer, docs, slots)
        started: datetime = await conn.fetchval("SELECT clock_timestamp()")
        with anyio.fail_after(RUN_TIMEOUT_S):
            await pipeline.run()
        span = await conn.fetchrow(PGQ_SPAN_SQL, started, LAST)
    if span is None or span["done"] != docs:
        raise RuntimeError(f"PgQueuer ended with {span and span['done']} of {docs} documents")
    return len(STAGES) * docs / float(span["span_s"])


async def pgq_install(pgq: Any, dsn: str) -> None:
    async with connection(dsn) as conn:
        await pgq.Queries(pgq.AsyncpgDriver(conn)).install()


# -- 1. throughput ------------------------------------------------------------------------


class Runs(msgspec.Struct):
    ragline: list[float]
    pgqueuer: list[float]


async def alternate(pgq: Any, dsn: str, opts: Options, slots: int) -> Runs:
    runs = Runs([], [])
    for _ in range(opts.repeat):
        runs.ragline.append(await hops_per_s(dsn, opts.docs, slots, run_ragline))
        runs.pgqueuer.append(await pgq_hops_per_s(pgq, dsn, opts.docs, slots))
    return runs


async def section_throughput(pgq: Any, opts: Options) -> None:
    heading(
        f"1. Throughput: no-op {len(STAGES)}-stage pipeline, {opts.docs} documents "
        f"(hops/s = {len(STAGES)}N / time until the last index job is done; median of "
        f"{opts.repeat}, alternating; raw runs ragline, pgqueuer)"
    )
    medians: list[tuple[int, float, float]] = []
    for slots in opts.slots:
        async with bench_database(opts.server_dsn) as dsn:
            await pgq_install(pgq, dsn)
            runs = await alternate(pgq, dsn, opts, slots)
        print(f"  slots={slots}: {fmt(runs.ragline)}  {fmt(runs.pgqueuer)}", flush=True)
        medians.append((slots, statistics.median(runs.ragline), statistics.median(runs.pgqueuer)))
    widths = (5, 15, 16, 6)
    row("slots", "ragline hops/s", "pgqueuer hops/s", "ratio", widths=widths)
    for slots, ours, theirs in medians:
        row(slots, f"{ours:.0f}", f"{theirs:.0f}", f"{ours / theirs:.2f}", widths=widths)


def fmt(values: Sequence[float]) -> str:
    return f"[{', '.join(f'{v:.0f}' for v in values)}]"


# -- 2. wake latency ----------------------------------------------------------------------


class PgqWake(msgspec.Struct, frozen=True):
    #: enqueue returned (client) → ``updated`` set by the dequeue's UPDATE (server clock).
    claim_ms: list[float]
    #: enqueue returned (client) → the handler's first line (client clock).
    handler_ms: list[float]


async def pgq_wake(pgq: Any, dsn: str, jobs: int) -> PgqWake:
    """Milliseconds from each enqueue returning to its claim and to its handler starting."""
    claimed: dict[bytes, float] = {}
    started: dict[bytes, float] = {}
    committed: dict[bytes, float] = {}
    async with connection(dsn) as conn, connection(dsn) as qm_conn:
        await conn.execute(PGQ_RESET_SQL)
        qm = pgq.QueueManager(pgq.Queries(pgq.AsyncpgDriver(qm_conn)))

        async def handle(job: Any) -> None:
            started[job.payload] = time.time()
            claimed[job.payload] = job.updated.timestamp()
            if len(started) == jobs:
                qm.shutdown.set()

        qm.entrypoint(LAST, concurrency_limit=WAKE_SLOTS, accepts_context=False)(handle)
        enqueuer = pgq.Queries(pgq.AsyncpgDriver(conn))
        with anyio.fail_after(RUN_TIMEOUT_S):
            async with anyio.create_task_group() as tg:
                # batch_size: see PgqPipeline.run.
                tg.start_soon(
                    lambda: qm.run(dequeue_timeout=PGQ_DEQUEUE_TIMEOUT, batch_size=WAKE_SLOTS)
                )
                await anyio.sleep(WORKER_SETTLE_S)
                for key in (str(i).encode() for i in range(jobs)):
                    await enqueuer.enqueue(LAST, key)
                    committed[key] = time.time()
                    await anyio.sleep(random.uniform(0.005, 0.020))
    return PgqWake(
        claim_ms=[(claimed[key] - at) * 1000 for key, at in committed.items()],
        handler_ms=[(started[key] - at) * 1000 for key, at in committed.items()],
    )


async def section_wake(pgq: Any, opts: Options) -> None:
    heading(
        f"2. Wake latency: idle consumer ({WAKE_SLOTS} slots of {LAST}), {opts.wake_jobs} "
        "jobs enqueued one at a time 5–20 ms apart; from the enqueue returning on the client"
    )
    async with bench_database(opts.server_dsn) as dsn:
        await pgq_install(pgq, dsn)
        ours = await wake_latencies(dsn, opts.wake_jobs, listen=True)
        theirs = await pgq_wake(pgq, dsn, opts.wake_jobs)
    widths = (9, 26, 8, 8, 8)
    row("", "to", "p50 ms", "p99 ms", "max ms", widths=widths)
    for name, to, ms in (
        ("ragline", "claim (started_at, server)", ours.commit_ms),
        ("pgqueuer", "claim (updated, server)", theirs.claim_ms),
        ("pgqueuer", "handler start (client)", theirs.handler_ms),
    ):
        p50, p99 = percentile(ms, 50), percentile(ms, 99)
        row(name, to, f"{p50:.2f}", f"{p99:.2f}", f"{max(ms):.2f}", widths=widths)


# -- entry point --------------------------------------------------------------------------


async def main(pgq: Any, opts: Options) -> None:
    await banner(opts.server_dsn, f"ragline vs PgQueuer {pgq.__version__}", "uvloop")
    await section_throughput(pgq, opts)
    await section_wake(pgq, opts)


def parse_args(argv: Sequence[str] | None = None) -> Options:
    full = Options(server_dsn=server_dsn(), docs=2000, wake_jobs=200)
    quick = msgspec.structs.replace(full, docs=300, slots=(1, 4), repeat=1, wake_jobs=40)
    return parse_scaled(bench_parser("bench.peers", __doc__), argv, full, quick)[0]


if __name__ == "__main__":
    options = parse_args()
    pgqueuer = load_pgqueuer()
    if pgqueuer is None:
        print("bench.peers: PgQueuer is not installed; `pip install pgqueuer` to run it")
        sys.exit(0)
    anyio.run(main, pgqueuer, options, backend_options={"use_uvloop": True})
