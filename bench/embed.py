"""Embed-stage benchmark against a local Cohere-compatible server, in one run.

``python -m bench.embed [--docs N] [--rpm R] [--quick]`` starts
``bench.harness.fake_cohere`` in its own process (so its JSON work does not share the
worker's GIL), creates a throwaway database (``ragline_bench_<random>``) on
``DATABASE_URL`` (default: the local server), parses and chunks N corpus documents with
the real stages, then prints:

1. batching: uncached unique chunks U and the embed requests R the server saw, against
   ``sum over documents of ceil(U_doc / 96)`` (one embed slot, so each document's cache
   lookup sees every earlier document's vectors and the expectation is exact);
2. throughput against ``RAGLINE_EMBED_RPM``: requests/min over the embed phase as a share
   of the limit, for a fresh limiter (its bucket holds one second's worth, which a fresh
   process may send at once) and for a limiter already at its limit
   (the steady state a long-running worker lives in), at 1024 dimensions (production)
   and at a tiny dimension (client cost negligible, so only the limiter can bind);
3. re-ingesting the same bytes (``submit --force``) and ``reprocess --from index``:
   embed requests sent by each (the cache makes both free).

Request times are the commit times of the per-batch embedding checkpoints
(``embeddings.created_at``: one transaction per request), cross-checked against the
server's own request counter.
"""

from __future__ import annotations

import math
import os
import tempfile
import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import asyncpg
import msgspec

from bench import database, report
from bench.args import bench_parser
from bench.harness.fake_cohere import FakeCohereProcess
from bench.ingest import corpus_files, load_note
from runtime.jobs.documents import DocumentRepository
from runtime.worker.config import WorkerConfig
from runtime.worker.worker import Worker
from stages.actions.submit import submit
from stages.pipeline import DEFAULT_CONCURRENCY, STAGES, pipeline_for
from stages.services import Services

DEFAULT_RPM = 600
DEFAULT_DOCS = 60
QUICK_DOCS = 12
PROD_DIMS = 1024
#: Small enough that decoding a response costs next to nothing on the client.
LIGHT_DIMS = 16
MAX_BATCH = 96
RATE_TOLERANCE = 0.10
RUN_TIMEOUT_S = 3600.0
PREP_STAGES = ("parse", "chunk", "vision")
EMBED_STAGES = ("embed", "index")

# Each request's vectors are written in one checkpoint transaction: now() is its start.
REQUEST_TIMES_SQL = """
SELECT created_at, count(*) AS n FROM embeddings WHERE model = $1
GROUP BY created_at ORDER BY created_at
"""
# Documents in the order their embed job started (one slot: the order they ran in).
EMBED_ORDER_SQL = """
SELECT document_id FROM stage_jobs
WHERE stage = 'embed' AND state = 'succeeded' AND document_id = ANY($1::uuid[])
ORDER BY started_at
"""
DOC_SHAS_SQL = "SELECT DISTINCT sha256 FROM chunks WHERE document_id = $1"
STATUS_SQL = """
SELECT status::text AS status, count(*) AS n FROM documents
WHERE id = ANY($1::uuid[]) GROUP BY 1 ORDER BY 1
"""


class Options(msgspec.Struct, frozen=True, kw_only=True):
    server_dsn: str
    docs: int = DEFAULT_DOCS
    rpm: int = DEFAULT_RPM


class Run(msgspec.Struct, frozen=True, kw_only=True):
    """One embed+index pass: what the server counted and when requests completed."""

    label: str
    model: str
    requests: int
    texts: int
    times: list[datetime]


# -- the environment of the runs ------------------------------------------------------------


def base_env(url: str, rpm: int) -> dict[str, str]:
    skip = ("RAGLINE_", "COHERE_", "QDRANT_", "MINIO_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(skip)}
    env.update(
        COHERE_API_KEY="bench",
        COHERE_BASE_URL=url,
        RAGLINE_EMBEDDER="cohere",
        RAGLINE_VISION="none",
        RAGLINE_EMBED_RPM=str(rpm),
        RAGLINE_EMBED_DIMENSIONS=str(PROD_DIMS),
    )
    return env


# -- running the stages in-process --------------------------------------------------------


async def run_stages(
    dsn: str, services: Services, stages: tuple[str, ...], slots: Mapping[str, int]
) -> None:
    """A worker over ``stages`` with these services until no job of them is left."""
    config = WorkerConfig(
        stages=stages,
        concurrency={s: slots.get(s, DEFAULT_CONCURRENCY[s]) for s in stages},
        exit_when_idle=True,
        poll_s=0.5,
        retry_base_s=0.5,
    )
    with anyio.fail_after(RUN_TIMEOUT_S):
        await Worker(pipeline_for(services), dsn, config).run()


async def fill_limiter(services: Services) -> None:
    """Take a minute's budget at once, as a worker that has been busy for a minute has."""
    limiter = services.limiter
    if limiter is not None:
        for _ in range(int(limiter.max_rate)):
            await limiter.acquire()


async def embed_pass(
    dsn: str,
    env: Mapping[str, str],
    server: FakeCohereProcess,
    label: str,
    *,
    full: bool,
    slots: int,
) -> Run:
    """Run embed+index with fresh services built from ``env``; count what was sent."""
    services = Services(env, Path(env["RAGLINE_DATA_DIR"]))
    await anyio.to_thread.run_sync(server.reset)
    if full:
        await fill_limiter(services)
    await run_stages(dsn, services, EMBED_STAGES, {"embed": slots})
    stats = await anyio.to_thread.run_sync(server.stats)
    model = services.embedder.model
    async with database.connection(dsn) as conn:
        times = [r["created_at"] for r in await conn.fetch(REQUEST_TIMES_SQL, model)]
    return Run(
        label=label,
        model=model,
        requests=int(stats["requests"].get("embed", 0)),
        texts=int(stats["texts_embedded"]),
        times=times,
    )


# -- 1. batching --------------------------------------------------------------------------


async def expected_requests(conn: asyncpg.Connection[Any], ids: Sequence[uuid.UUID]) -> list[int]:
    """Per document, in embed order: the unique texts no earlier document had."""
    seen: set[str] = set()
    uncached: list[int] = []
    for r in await conn.fetch(EMBED_ORDER_SQL, list(ids)):
        shas = {s["sha256"] for s in await conn.fetch(DOC_SHAS_SQL, r["document_id"])}
        uncached.append(len(shas - seen))
        seen |= shas
    return uncached


async def section_batching(dsn: str, ids: Sequence[uuid.UUID], run: Run) -> None:
    report.heading(
        f"1. Batching: {len(ids)} documents, embed-v4.0@{PROD_DIMS}, one embed slot, "
        f"max batch {MAX_BATCH}"
    )
    async with database.connection(dsn) as conn:
        per_doc = await expected_requests(conn, ids)
        statuses = {r["status"]: r["n"] for r in await conn.fetch(STATUS_SQL, list(ids))}
    expected = sum(math.ceil(u / MAX_BATCH) for u in per_doc)
    print(f"documents {statuses}; {len(per_doc)} embedded")
    print(f"uncached unique chunks U = {sum(per_doc)}; texts the server embedded: {run.texts}")
    print(load_note())
    ok = run.requests == expected and run.texts == sum(per_doc)
    print(
        f"embed requests: expected sum ceil(U_doc/{MAX_BATCH}) = {expected}, server saw "
        f"R = {run.requests}, checkpoints {len(run.times)}: {'ok' if ok else 'MISMATCH'}"
    )


# -- 2. throughput against the limit ------------------------------------------------------


def per_minute(times: Sequence[datetime]) -> float:
    """Requests per minute from the first to the last request (n-1 gaps)."""
    if len(times) < 2:
        return float("nan")
    span_s = (times[-1] - times[0]).total_seconds()
    return (len(times) - 1) / span_s * 60 if span_s > 0 else float("inf")


def busiest_minute(times: Sequence[datetime]) -> int:
    """The most requests that completed within any 60 s window."""
    best, start = 0, 0
    for end, t in enumerate(times):
        while (t - times[start]).total_seconds() >= 60:
            start += 1
        best = max(best, end - start + 1)
    return best


def rate_row(run: Run, rpm: int, *, judged: bool) -> None:
    rate = per_minute(run.times)
    span_s = (run.times[-1] - run.times[0]).total_seconds() if run.times else 0.0
    share = rate / rpm
    ok = abs(share - 1) <= RATE_TOLERANCE
    report.row(
        run.label, run.requests, f"{span_s:.1f}", f"{rate:.0f}", f"{share:.0%}",
        busiest_minute(run.times) if span_s >= 60 else "-",
        report.verdict(ok) if judged else "-", widths=RATE_WIDTHS,
    )  # fmt: skip


RATE_WIDTHS = (34, 8, 7, 8, 9, 11, 11)


def print_rates(runs: Sequence[tuple[Run, bool]], rpm: int) -> None:
    report.row("run", "requests", "span s", "req/min", "of limit", "max in 60s", "floor ±10%",
               widths=RATE_WIDTHS)  # fmt: skip
    for run, judged in runs:
        rate_row(run, rpm, judged=judged)


async def reembed_all(dsn: str, ids: Sequence[uuid.UUID]) -> None:
    """A new generation from embed for every document (earlier checkpoints stay)."""
    async with database.pool_of(dsn, 1) as pool:
        docs = DocumentRepository(pool)
        for doc_id in ids:
            await docs.reprocess(doc_id, "embed")


async def section_rate(
    dsn: str,
    env: Mapping[str, str],
    server: FakeCohereProcess,
    ids: Sequence[uuid.UUID],
    counted: Run,
) -> None:
    rpm = int(env["RAGLINE_EMBED_RPM"])
    slots = DEFAULT_CONCURRENCY["embed"]
    report.heading(
        f"2. Throughput vs RAGLINE_EMBED_RPM={rpm} ({rpm / 60:g} req/s), one process; "
        f"'fresh' = limiter as built (empty bucket: one second's worth may go at once), 'full' = "
        f"limiter already at its limit (steady state); rate = (R-1) / (last - first request)"
    )
    runs: list[tuple[Run, bool]] = [(counted, False)]
    # A new model name or dimension is a new cache key: every chunk is a miss again.
    for dims, model, full in (
        (LIGHT_DIMS, "embed-v4.0", False),
        (LIGHT_DIMS, "embed-v4.0-steady", True),
        (PROD_DIMS, "embed-v4.0-steady", True),
    ):
        label = f"{'full' if full else 'fresh'}, {dims} dims, {slots} slots"
        run_env = {**env, "RAGLINE_EMBED_DIMENSIONS": str(dims), "RAGLINE_EMBED_MODEL": model}
        await reembed_all(dsn, ids)
        runs.append((await embed_pass(dsn, run_env, server, label, full=full, slots=slots), full))
    print_rates(runs, rpm)
    print(load_note())


# -- 3. cache: re-ingest and reprocess --from index -----------------------------------------


async def section_cache(
    dsn: str,
    env: Mapping[str, str],
    server: FakeCohereProcess,
    files: Sequence[Path],
    ids: Sequence[uuid.UUID],
) -> None:
    report.heading(f"3. Embedding cache: {len(files)} documents, embed-v4.0@{PROD_DIMS}")
    services = Services(env, Path(env["RAGLINE_DATA_DIR"]))
    async with database.pool_of(dsn, 2) as pool:
        copies = [(await submit(pool, services.assets, p, force=True)).document_id for p in files]
    await anyio.to_thread.run_sync(server.reset)
    await run_stages(dsn, services, STAGES, {})
    resubmitted = (await anyio.to_thread.run_sync(server.stats))["requests"].get("embed", 0)
    async with database.pool_of(dsn, 1) as pool:
        docs = DocumentRepository(pool)
        for doc_id in ids:
            await docs.reprocess(doc_id, "index")
        await anyio.to_thread.run_sync(server.reset)
        await run_stages(dsn, Services(env, services.data_dir), ("index",), {})
        ready = await docs.count_finished([*ids, *copies])
    reindexed = (await anyio.to_thread.run_sync(server.stats))["requests"].get("embed", 0)
    print(f"documents finished: {ready} of {len(ids) + len(copies)}")
    print(f"submit --force of the same bytes ({len(copies)} new documents): {resubmitted} "
          f"embed requests (expected 0: {report.verdict(resubmitted == 0)})")  # fmt: skip
    print(f"reprocess --from index ({len(ids)} documents): {reindexed} embed requests "
          f"(expected 0: {report.verdict(reindexed == 0)})")  # fmt: skip


# -- entry point --------------------------------------------------------------------------


async def prepare(dsn: str, env: Mapping[str, str], files: Sequence[Path]) -> list[uuid.UUID]:
    """Submit the documents and run parse, chunk and vision (none) on them."""
    services = Services(env, Path(env["RAGLINE_DATA_DIR"]))
    async with database.pool_of(dsn, 2) as pool:
        ids = [(await submit(pool, services.assets, p)).document_id for p in files]
    await run_stages(dsn, services, PREP_STAGES, {})
    return ids


async def main(opts: Options) -> None:
    after = "fake Cohere server in its own process"
    await report.banner(opts.server_dsn, "ragline embed benchmark", after=after)
    files = corpus_files(opts.docs)
    server = FakeCohereProcess("--dims", str(PROD_DIMS))
    try:
        with tempfile.TemporaryDirectory(prefix="ragline-bench-") as tmp:
            env = {**base_env(server.url, opts.rpm), "RAGLINE_DATA_DIR": tmp}
            async with database.bench_database(opts.server_dsn) as dsn:
                ids = await prepare(dsn, env, files)
                counted = await embed_pass(dsn, env, server, f"fresh, {PROD_DIMS} dims, 1 slot",
                                           full=False, slots=1)  # fmt: skip
                await section_batching(dsn, ids, counted)
                await section_rate(dsn, env, server, ids, counted)
                await section_cache(dsn, env, server, files, ids)
    finally:
        server.close()


def parse_args(argv: Sequence[str] | None = None) -> Options:
    parser = bench_parser("bench.embed", __doc__)
    parser.add_argument("--docs", type=int, help=f"corpus documents ({DEFAULT_DOCS})")
    parser.add_argument("--rpm", type=int, default=DEFAULT_RPM, help="RAGLINE_EMBED_RPM")
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_DOCS} documents")
    args = parser.parse_args(argv)
    docs = args.docs or (QUICK_DOCS if args.quick else DEFAULT_DOCS)
    return Options(server_dsn=database.server_dsn(), docs=docs, rpm=args.rpm)


if __name__ == "__main__":
    anyio.run(main, parse_args(), backend_options={"use_uvloop": True})
