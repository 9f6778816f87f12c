"""Provider benchmark: the fleet-wide budget and circuit, measured side by side in one run.

``python -m bench.provider [--parts fleet,overhead,hops,outage] [--quick]`` creates a
throwaway database on ``DATABASE_URL`` (default: the local server) and prints:

1. **fleet**: calls/min of 1, 3 and 6 worker processes (``python -m runtime --stages
   embed``, 4 slots each, one call per job through the engine's provider gate) sharing
   ``RAGLINE_EMBED_RPM`` against ``bench.harness.fake_cohere`` in its own process, which
   answers 429 above that rate. Floors: at 3 and 6 processes the fleet calls at <= 110%
   of the budget and <= 2% of calls are answered 429.
2. **overhead**: what the shared budget costs per call (one reservation round trip; callers
   waiting together in a process share one), next to a bare ``SELECT 1``.
3. **hops**: bench.queue's no-op five-stage pipeline, its stages declaring a provider
   (the circuit check in every claim, the board refreshed every poll) against the same
   stages declaring none, alternating; floor 0.95. Also, informative: every job calling
   through the gate with a budget (one reservation per hop on a no-op job).
4. **outage**: a full outage (every call answered 503) of ``--outage-s`` seconds (90)
   in the middle of a run of two worker processes on DEFAULT retry and circuit settings:
   documents failed (floor 0), attempts spent, and calls that reached the provider per
   probe interval while the circuit was open (floor <= 1).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import anyio
import asyncpg
import msgspec

from bench.args import bench_parser
from bench.database import Pool, bench_database, connection, pool_of, server_dsn
from bench.harness.fake_cohere import FakeCohereProcess
from bench.harness.fleet import run_fleet, start_fleet, submit_jobs
from bench.harness.pipelines import STAGES, ScriptedStage
from bench.queue import THROUGHPUT_POLL_S, hops_per_s, run_ragline
from bench.report import heading, row, verdict
from runtime.providers.gate import Providers
from runtime.providers.specs import DEFAULT_PROBE_S, SESSION_SETTINGS, ProviderSpec
from runtime.stage import JobContext, Pipeline
from runtime.worker.config import WorkerConfig
from runtime.worker.worker import Worker

PARTS = ("fleet", "overhead", "hops", "outage")
NAME = "cohere/embed-v4.0"
FLEET_RATE_CEILING = 1.10
FLEET_429_CEILING = 0.02
HOPS_FLOOR = 0.95


class Options(msgspec.Struct, frozen=True, kw_only=True):
    server_dsn: str
    parts: tuple[str, ...] = PARTS
    rpm: float = 1200.0
    fleet_s: float = 15.0
    processes: tuple[int, ...] = (1, 3, 6)
    calls: int = 2000
    docs: int = 1000
    slots: tuple[int, ...] = (1, 4)
    repeat: int = 8
    outage_s: float = 90.0


# -- 1. fleet rate --------------------------------------------------------------------------


def section_fleet(dsn: str, opts: Options, logs: Path) -> None:
    heading(
        f"1. Fleet rate: N processes x 4 slots share RAGLINE_EMBED_RPM={opts.rpm:g} "
        f"against a server answering 429 above it (~{opts.fleet_s:g} s each)"
    )
    widths = (9, 7, 12, 9, 10, 8, 18)
    row("processes", "calls", "calls/min", "of budget", "429s", "429 %", "floor <=110%, <=2%",
        widths=widths)  # fmt: skip
    server = FakeCohereProcess("--dims", "8", "--rate-limit-per-s", f"{opts.rpm / 60:g}")
    try:
        for n in opts.processes:
            jobs = int(opts.rpm / 60 * opts.fleet_s)
            run = run_fleet(dsn, server.url, processes=n, rpm=opts.rpm, jobs=jobs, log_dir=logs)
            ok = run.share_of_budget <= FLEET_RATE_CEILING and run.share_429 <= FLEET_429_CEILING
            row(
                n,
                run.calls,
                f"{run.calls_per_min:.0f}",
                f"{run.share_of_budget:.1%}",
                run.rate_limited,
                f"{run.share_429:.2%}",
                verdict(ok) if n >= 3 else "-",
                widths=widths,
            )
    finally:
        server.close()


# -- 2. overhead per call -------------------------------------------------------------------


async def timed_calls(providers: Providers, calls: int, tasks: int) -> float:
    """Seconds per call through the gate, ``tasks`` callers at once."""

    async def caller(n: int) -> None:
        for _ in range(n):
            async with providers.call(NAME, tokens=100):
                pass

    started = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for _ in range(tasks):
            tg.start_soon(caller, calls // tasks)
    return (time.perf_counter() - started) / (calls // tasks * tasks)


async def select_one_s(dsn: str, calls: int) -> float:
    async with pool_of(dsn, 2) as pool:
        started = time.perf_counter()
        for _ in range(calls):
            await pool.fetchval("SELECT 1")
        return (time.perf_counter() - started) / calls


@contextlib.asynccontextmanager
async def gate_pool(dsn: str, size: int, durable: bool = False) -> AsyncIterator[Pool]:
    """A pool as the worker gives its provider gate (``durable``: with every commit
    flushed, as the job pool's are)."""
    settings = {} if durable else SESSION_SETTINGS
    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=size, server_settings=settings)
    try:
        yield pool
    finally:
        await pool.close()


async def overhead_row(
    dsn: str, spec: ProviderSpec, calls: int, tasks: int, durable: bool = False
) -> tuple[float, float]:
    async with gate_pool(dsn, 4, durable) as pool:
        providers = Providers(pool, f"bench-{tasks}", {"embed": (spec,)})
        await providers.register()
        per_call = await timed_calls(providers, calls, tasks)
        trips = providers.round_trips(NAME)
        return per_call, trips / calls


async def section_overhead(dsn: str, opts: Options) -> None:
    heading(
        "2. Overhead of the shared budget per call (budget far above the call rate, so "
        "nobody waits: the cost is the reservation itself)"
    )
    bare = await select_one_s(dsn, opts.calls)
    budget = ProviderSpec(name=NAME, requests_per_min=1e9, tokens_per_min=1e12)
    circuit_only = ProviderSpec(name=NAME)
    widths = (44, 12, 16)
    row("gate", "per call", "round trips/call", widths=widths)
    row("bare SELECT 1 (reference)", f"{bare * 1e6:.0f} µs", "1", widths=widths)
    for label, spec, tasks, durable in (
        ("circuit only (no budget), 1 caller", circuit_only, 1, False),
        ("budget, 1 caller", budget, 1, False),
        ("budget, 1 caller, commits flushed (not used)", budget, 1, True),
        ("budget, 16 callers in one process", budget, 16, False),
    ):
        per_call, trips = await overhead_row(dsn, spec, opts.calls, tasks, durable)
        row(label, f"{per_call * 1e6:.0f} µs", f"{trips:.2f}", widths=widths)
    per_call = await contended(dsn, budget, opts.calls)
    row("budget, 3 pools x 4 callers (row contention)", f"{per_call * 1e6:.0f} µs", "-",
        widths=widths)  # fmt: skip


async def contended(dsn: str, spec: ProviderSpec, calls: int) -> float:
    async with gate_pool(dsn, 4) as a, gate_pool(dsn, 4) as b, gate_pool(dsn, 4) as c:
        procs = [Providers(p, f"p{i}", {"embed": (spec,)}) for i, p in enumerate((a, b, c))]
        for p in procs:
            await p.register()
        started = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for p in procs:
                tg.start_soon(timed_calls, p, calls // 3, 4)
        return (time.perf_counter() - started) / (calls // 3 // 4 * 4 * 3)


# -- 3. hops/s with the governor in the claim path -----------------------------------------


class Declaring(ScriptedStage):
    """A no-op stage that declares a provider (closed circuit) and never calls it."""

    providers = (ProviderSpec(name=NAME),)


class Metered(ScriptedStage):
    """A no-op stage whose every job goes through the gate with a (never binding) budget."""

    providers = (ProviderSpec(name=NAME, requests_per_min=1e9),)

    async def process(self, ctx: JobContext) -> Any:
        async with ctx.calling(NAME):
            return None


async def run_pipeline(dsn: str, slots: int, stage: type[ScriptedStage]) -> None:
    config = WorkerConfig(
        stages=STAGES,
        concurrency=dict.fromkeys(STAGES, slots),
        exit_when_idle=True,
        poll_s=THROUGHPUT_POLL_S,
    )
    pipeline = Pipeline(stages=[stage(name, noop=True) for name in STAGES])
    await Worker(pipeline, dsn, config).run()


async def run_declaring(dsn: str, _docs: int, slots: int) -> None:
    await run_pipeline(dsn, slots, Declaring)


async def run_metered(dsn: str, _docs: int, slots: int) -> None:
    await run_pipeline(dsn, slots, Metered)


async def pair_ratios(dsn: str, opts: Options, slots: int) -> tuple[list[float], list[float]]:
    """Hops/s of plain and declaring runs in ABBA order (so a load that drifts during the
    run weighs on both alike); returns both series."""
    plain: list[float] = []
    declaring: list[float] = []
    for i in range(opts.repeat):
        order = ((run_ragline, plain), (run_declaring, declaring))
        for runner, out in order if i % 2 == 0 else order[::-1]:
            out.append(await hops_per_s(dsn, opts.docs, slots, runner))
    return plain, declaring


async def claim_check_s(dsn: str, checks: int = 200_000) -> float:
    """Seconds the worker's circuit check adds per hop (one ``claimable`` before a claim,
    one ``blocked`` per completion), measured alone: the end-to-end ratio below moves
    with the machine's load by far more than this."""
    async with gate_pool(dsn, 2) as pool:
        providers = Providers(pool, "bench", {s: (ProviderSpec(name=NAME),) for s in STAGES})
        await providers.register()
        started = time.perf_counter()
        for _ in range(checks):
            providers.claimable("embed", 4)
            providers.blocked("embed")
        return (time.perf_counter() - started) / checks


async def section_hops(dsn: str, opts: Options) -> None:
    heading(
        f"3. bench.queue hops/s, {opts.docs} documents: stages declaring a provider vs "
        f"none, {opts.repeat} pairs in ABBA order, median of the pairs' ratios; and every "
        "job gated with a budget (informative, median of 3)"
    )
    widths = (5, 10, 14, 12, 11, 16, 6)
    row("slots", "plain", "with circuit", "pair ratio", "floor 0.95", "every job gated",
        "ratio", widths=widths)  # fmt: skip
    for slots in opts.slots:
        plain, declaring = await pair_ratios(dsn, opts, slots)
        ratio = statistics.median(d / p for p, d in zip(plain, declaring, strict=True))
        metered = statistics.median(
            [await hops_per_s(dsn, opts.docs, slots, run_metered) for _ in range(3)]
        )
        row(
            slots,
            f"{statistics.median(plain):.0f}",
            f"{statistics.median(declaring):.0f}",
            f"{ratio:.2f}",
            verdict(ratio >= HOPS_FLOOR),
            f"{metered:.0f}",
            f"{metered / statistics.median(plain):.2f}",
            widths=widths,
        )
        print(f"  raw plain {[round(v) for v in plain]}, with circuit "
              f"{[round(v) for v in declaring]}", flush=True)  # fmt: skip
    check = await claim_check_s(dsn)
    print(
        f"  the circuit check alone: {check * 1e6:.2f} µs per hop, "
        f"{check * statistics.median(plain):.3%} of a hop at the last plain rate"
    )


# -- 4. a full outage on default settings ---------------------------------------------------


def section_outage(dsn: str, opts: Options, logs: Path) -> None:
    heading(
        f"4. A {opts.outage_s:g} s full outage (503) mid-run: 2 processes x 4 slots, "
        "default retry and circuit settings (RAGLINE_EMBED_RPM=600 paces the run)"
    )
    server = FakeCohereProcess("--dims", "8")
    jobs = 300
    ids = submit_jobs(dsn, jobs, "embed")
    fleet = start_fleet(dsn, server.url, 2, logs, RAGLINE_EMBED_RPM="600")
    started = time.monotonic()
    try:
        while server.stats()["requests"].get("embed", 0) < 60:
            time.sleep(0.05)
        server.outage(503)
        time.sleep(opts.outage_s)
        server.outage(None)
        ended = time.monotonic()
        for proc in fleet:
            proc.wait(opts.outage_s + 600)
        stats = server.stats()
    finally:
        for proc in fleet:
            proc.stop()
        server.close()
    report_outage(dsn, ids, stats, opts, time.monotonic() - started, time.monotonic() - ended)


def report_outage(
    dsn: str, ids: Sequence[Any], stats: dict[str, Any], opts: Options, took_s: float,
    after_s: float,
) -> None:  # fmt: skip
    async def jobs() -> list[asyncpg.Record]:
        async with connection(dsn) as conn:
            return list(
                await conn.fetch(
                    "SELECT state::text AS state, attempts FROM stage_jobs"
                    " WHERE stage = 'embed' AND document_id = ANY($1::uuid[])",
                    list(ids),
                )
            )

    rows = anyio.run(jobs)
    failed = sum(1 for r in rows if r["state"] == "failed")
    done = sum(1 for r in rows if r["state"] == "succeeded")
    at = sorted(stats["outage_requests_at"])
    gaps = [b - a for a, b in itertools.pairwise(at)]
    # The circuit opens after its 5th failure in a row; calls already in flight (8 slots)
    # may still land. After that only probes reach the provider.
    probes = gaps[5 + 8 :]
    print(f"  documents: {done} of {len(ids)} done, {failed} failed (floor 0)")
    print(f"  attempts per job: max {max(r['attempts'] for r in rows)} (max_attempts 3)")
    print(f"  calls during the outage: {len(at)}; gaps between probes (s): "
          f"{[round(g, 1) for g in probes]}")  # fmt: skip
    shortest = min(probes) if probes else float("inf")
    print(
        f"  shortest gap between probes {shortest:.1f} s vs first probe interval "
        f"{DEFAULT_PROBE_S:g} s: {verdict(shortest >= DEFAULT_PROBE_S * 0.95)} "
        "(<= 1 call per probe interval)"
    )
    print(f"  run took {took_s:.0f} s; the last job finished {after_s:.0f} s after the outage")
    print(f"  {verdict(failed == 0 and done == len(ids))}: nobody ran `retry`")


# -- main -----------------------------------------------------------------------------------


async def async_parts(dsn: str, opts: Options) -> None:
    if "overhead" in opts.parts:
        await section_overhead(dsn, opts)
    if "hops" in opts.parts:
        await section_hops(dsn, opts)


def main(opts: Options) -> None:
    print(f"ragline provider benchmark: Python {sys.version.split()[0]}, {os.cpu_count()} CPUs")

    async def with_db() -> None:
        async with bench_database(opts.server_dsn) as dsn:
            with tempfile.TemporaryDirectory() as tmp:
                logs = Path(tmp)
                if "fleet" in opts.parts:
                    await anyio.to_thread.run_sync(section_fleet, dsn, opts, logs)
                await async_parts(dsn, opts)
                if "outage" in opts.parts:
                    await anyio.to_thread.run_sync(section_outage, dsn, opts, logs)

    anyio.run(with_db, backend_options={"use_uvloop": True})


def parse_args(argv: Sequence[str] | None = None) -> Options:
    parser = bench_parser("bench.provider", __doc__)
    parser.add_argument("--parts", help=f"comma-separated subset of {','.join(PARTS)}")
    parser.add_argument("--rpm", type=float, help="the fleet's budget (1200)")
    parser.add_argument("--outage-s", type=float, help="outage length (90)")
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    args = parser.parse_args(argv)
    out: dict[str, Any] = {}
    if args.quick:
        out.update(fleet_s=5.0, processes=(1, 3), calls=300, docs=300, repeat=1, outage_s=10.0)
    if args.parts:
        out["parts"] = tuple(p for p in args.parts.split(",") if p in PARTS)
    if args.rpm:
        out["rpm"] = args.rpm
    if args.outage_s:
        out["outage_s"] = args.outage_s
    return Options(server_dsn=server_dsn(), **out)


if __name__ == "__main__":
    main(parse_args())
