"""Serve benchmark: the HTTP API next to the CLI and the engine, in one run.

``python -m bench.serve [--quick] [--parts ...]`` starts ``ragline serve`` subprocesses on
throwaway databases (``DATABASE_URL``, default the local server) and prints:

1. ``engine``: the no-op pipeline's hops/s (bench.queue's runner) with the document-event
   triggers dropped, present with nobody listening, and with a server listening;
2. ``upload``: the same 200 PDFs (the corpus, else generated) uploaded over HTTP vs
   ``python -m runtime submit DIR`` (one process, its start-up included);
3. ``sse``: latency from a document update (sent, committed) to its event on an open
   ``/v1/events`` stream;
4. ``status``: ``GET /v1/documents/{id}`` per second, 8 concurrent clients;
5. ``search``: ``GET /v1/search`` latency with 100,000 points in the embedded index;
6. ``rss``: the server's peak RSS while a 1 GB body streams in.

Figures are printed, never asserted (a shared, noisy machine): compare side by side.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import anyio
import asyncpg
import httpx
import msgspec

from bench.harness.cli import Cli
from bench.harness.db import throwaway_database
from bench.harness.serve import running_server
from bench.queue import hops_per_s, run_ragline
from bench.serve_support import (
    PARTS,
    SAMPLES,
    Options,
    bench_db,
    http_uploads,
    pct,
    served,
    upload_files,
    verdict,
)
from runtime.jobs.events import EventHub

UPLOAD_FLOOR = 0.8
SSE_P50_MS, SSE_P99_MS = 10.0, 50.0
RSS_CEILING_MB = 150.0
DROP_TRIGGERS = """DROP TRIGGER documents_created_or_deleted ON documents;
DROP TRIGGER documents_changed ON documents"""
CREATE_TRIGGERS = """
CREATE TRIGGER documents_created_or_deleted AFTER INSERT OR DELETE ON documents
    FOR EACH ROW EXECUTE FUNCTION ragline_document_event();
CREATE TRIGGER documents_changed AFTER UPDATE ON documents FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status OR OLD.stage IS DISTINCT FROM NEW.stage
          OR OLD.generation IS DISTINCT FROM NEW.generation)
    EXECUTE FUNCTION ragline_document_event()"""
BUMP_SQL = "UPDATE documents SET stage = $2, updated_at = now() WHERE id = $1"


# -- 1. engine -------------------------------------------------------------------------------


async def engine_run(dsn: str, opts: Options, variant: str) -> float:
    conn = await asyncpg.connect(dsn)
    try:
        if variant == "no trigger":
            await conn.execute(DROP_TRIGGERS)
        if variant != "listening":
            return await hops_per_s(dsn, opts.engine_docs, opts.engine_slots, run_ragline)
        pool = await asyncpg.create_pool(dsn, min_size=1, max_size=2)
        try:
            # A registered, LISTENing hub with no subscriber: the database pays for each
            # event (row + NOTIFY) as with a server up, and this process does no more.
            hub = EventHub(dsn, pool)
            async with anyio.create_task_group() as tg:
                await tg.start(hub.run)
                hops = await hops_per_s(dsn, opts.engine_docs, opts.engine_slots, run_ragline)
                tg.cancel_scope.cancel()
            return hops
        finally:
            await pool.close()
    finally:
        if variant == "no trigger":
            await conn.execute(CREATE_TRIGGERS)
        await conn.close()


async def section_engine(opts: Options) -> None:
    variants = ("no trigger", "trigger, nobody listening", "listening")
    print(
        f"\n== 1. Engine: no-op 5-stage pipeline, {opts.engine_docs} documents, "
        f"{opts.engine_slots} slots (hops/s, median of {opts.repeat}, alternating) =="
    )
    runs: dict[str, list[float]] = {v: [] for v in variants}
    async with bench_db(opts.server_dsn) as dsn:
        for _ in range(opts.repeat):
            for v in variants:
                runs[v].append(await engine_run(dsn, opts, v))
    base = statistics.median(runs[variants[0]])
    for v in variants:
        med = statistics.median(runs[v])
        raw = ", ".join(f"{x:.0f}" for x in runs[v])
        print(f"  {v:28} {med:7.0f} hops/s  ({med / base:.2f}x)  [{raw}]")


# -- 2. uploads ------------------------------------------------------------------------------


def section_upload(opts: Options, tmp: Path) -> None:
    files = upload_files(opts.uploads, tmp)
    folder = tmp / "upload-set"
    folder.mkdir(exist_ok=True)
    for f in files:
        (folder / f.name).symlink_to(f.resolve())
    mb = sum(f.stat().st_size for f in files) / 1e6
    print(f"\n== 2. Uploads: the same {len(files)} PDFs ({mb:.0f} MB), fresh database each ==")
    with throwaway_database(opts.server_dsn, "ragline_bserve") as dsn:
        cli = Cli(dsn, tmp / "cli-data", tmp / "cli-logs")
        cli.run("migrate")
        started = time.perf_counter()
        result = cli.run("submit", str(folder), "--json", timeout_s=600)
        cli_s = time.perf_counter() - started
        if result.code != 0:
            print(f"  submit exited {result.code}: {result.err_lines[:3]}")
    results = {}
    for concurrency in (1, 4):
        with served(opts, tmp / f"http-{concurrency}") as (server, _cli):
            results[concurrency] = anyio.run(http_uploads, server.url, files, concurrency)
    n = len(files)
    print(
        f"  CLI submit (one process, start-up included)   {cli_s:6.2f} s  {n / cli_s:6.1f} docs/s"
    )
    for c, s in results.items():
        ratio = cli_s / s
        print(
            f"  HTTP, {c} client(s)                            {s:6.2f} s  {n / s:6.1f} docs/s"
            f"  {ratio:.2f}x CLI  floor {UPLOAD_FLOOR}: {verdict(ratio >= UPLOAD_FLOOR)}"
        )


# -- 3. SSE latency ------------------------------------------------------------------------


async def sse_latencies(url: str, dsn: str, doc_id: uuid.UUID, events: int) -> list[float]:
    received: dict[str, float] = {}
    sent: dict[str, float] = {}
    opened, all_in = anyio.Event(), anyio.Event()
    async with (
        httpx.AsyncClient(base_url=url, timeout=60) as client,
        anyio.create_task_group() as tg,
    ):

        async def reader() -> None:
            async with client.stream("GET", "/v1/events") as r:
                opened.set()
                async for line in r.aiter_lines():
                    if line.startswith("data: "):
                        stage = msgspec.json.decode(line[6:])["stage"]
                        received[stage] = time.perf_counter()
                        if len(received) >= events:
                            all_in.set()
                            return

        tg.start_soon(reader)
        await opened.wait()
        await anyio.sleep(0.5)
        conn = await asyncpg.connect(dsn)
        try:
            for i in range(events):
                stage = f"s{i}"
                sent[stage] = time.perf_counter()
                await conn.execute(BUMP_SQL, doc_id, stage)
                await anyio.sleep(0.01)
        finally:
            await conn.close()
        with anyio.fail_after(30):
            await all_in.wait()
        tg.cancel_scope.cancel()
    return [(received[k] - sent[k]) * 1000 for k in sent]


def section_sse(opts: Options, tmp: Path) -> None:
    with served(opts, tmp / "sse") as (server, cli):
        r = httpx.post(
            server.url + "/v1/documents",
            content=(SAMPLES / "sourdough.pdf").read_bytes(),
            headers={"Content-Disposition": 'attachment; filename="sse.pdf"'},
        )
        doc_id = uuid.UUID(r.json()["id"])
        lat = anyio.run(sse_latencies, server.url, cli.dsn, doc_id, opts.sse_events)
    p50, p99 = pct(lat, 0.5), pct(lat, 0.99)
    ok = p50 <= SSE_P50_MS and p99 <= SSE_P99_MS
    print(f"\n== 3. SSE: {len(lat)} updates, from sending the UPDATE (autocommit) to its event ==")
    print(
        f"  p50 {p50:.2f} ms  p99 {p99:.2f} ms  max {max(lat):.2f} ms  "
        f"(ceilings {SSE_P50_MS:.0f} / {SSE_P99_MS:.0f} ms: {verdict(ok)})"
    )


# -- 4. status GETs ------------------------------------------------------------------------


async def status_rate(url: str, paths: Sequence[str], seconds: float, clients: int) -> float:
    count = 0
    deadline = time.perf_counter() + seconds

    async def one(client: httpx.AsyncClient) -> None:
        nonlocal count
        while time.perf_counter() < deadline:
            r = await client.get(random.choice(paths))
            r.raise_for_status()
            count += 1

    started = time.perf_counter()
    async with (
        httpx.AsyncClient(base_url=url, timeout=30) as client,
        anyio.create_task_group() as tg,
    ):
        for _ in range(clients):
            tg.start_soon(one, client)
    return count / (time.perf_counter() - started)


def section_status(opts: Options, tmp: Path) -> None:
    files = upload_files(20, tmp)
    with served(opts, tmp / "status") as (server, _cli):
        anyio.run(http_uploads, server.url, files, 4)
        ids = [d["id"] for d in httpx.get(server.url + "/v1/documents").json()["documents"]]
        one = anyio.run(
            status_rate, server.url, [f"/v1/documents/{i}" for i in ids], opts.status_s, 8
        )
        listed = anyio.run(status_rate, server.url, ["/v1/documents?limit=20"], opts.status_s, 8)
    print("\n== 4. Status GETs, 8 concurrent clients (the client shares the machine's CPUs) ==")
    print(f"  GET /v1/documents/{{id}} (timeline, counts, points)  {one:6.0f} requests/s")
    print(f"  GET /v1/documents?limit=20                          {listed:6.0f} requests/s")


# -- 5. search -----------------------------------------------------------------------------


#: Words the filled chunks are made of (a chunk: 120 of them, Zipf-like weights, plus an
#: identifier of its own), so that the keyword side has a real vocabulary to rank.
_WORDS = (
    "lighthouse lens lamp beam sea night harbour tide moon spring neap range table power "
    "sourdough starter flour water salt bake crust oven dough rise borrow checker lifetime "
    "reference owner move copy trait struct function return value error code socket buffer "
    "lease queue worker stage commit transaction index vector search keyword page section"
)
VOCABULARY = tuple(_WORDS.split())


async def fill_index(dsn: str, data_dir: Path, points: int) -> str:
    """``points`` chunks of 50 per document, in the embedded index (dense vectors and
    keywords) and in PostgreSQL (each document ready, its points the ones that answer)."""
    from stages.ports.vector_index import Keywords, new_point
    from stages.services import Services
    from stages.text.keywords import text_vector

    services = Services(
        {k: v for k, v in os.environ.items() if not k.startswith("COHERE")}, data_dir
    )
    rng = random.Random(7)
    weights = [1 / (n + 1) for n in range(len(VOCABULARY))]
    async with services.lifespan():
        dims = services.embedder.dimensions
        await services.index.ensure_vector_collection(services.vector_collection, dims)
        batch: list[Any] = []
        for i in range(points):
            doc = uuid.UUID(int=i // 50 + 1)
            words = [*rng.choices(VOCABULARY, weights, k=120), f"ident_{i}_x{i % 997}"]
            text = " ".join(words)
            payload = {"filename": f"doc-{i // 50}.pdf", "text": text, "page_start": 1,
                       "page_end": 1, "ordinal": i % 50}  # fmt: skip
            point = new_point(doc, i % 50, 1, [rng.gauss(0, 1) for _ in range(dims)], payload)
            batch.append(msgspec.structs.replace(point, keywords=Keywords(*text_vector(text))))
            if len(batch) == 1000:
                await services.index.upsert(services.vector_collection, batch)
                batch = []
        if batch:
            await services.index.upsert(services.vector_collection, batch)
    await ready_documents(dsn, (points + 49) // 50)
    return services.vector_collection


async def ready_documents(dsn: str, count: int) -> None:
    """``count`` ready documents whose generation 1 answers search (as the filled points)."""
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(
            "INSERT INTO documents (id, filename, media_type, byte_size, sha256, status,"
            " generation, indexed_generation)"
            " SELECT ('00000000-0000-0000-0000-' || lpad(to_hex(n), 12, '0'))::uuid,"
            " 'doc-' || (n - 1) || '.pdf', 'application/pdf', 1, md5(n::text), 'ready', 1, 1"
            " FROM generate_series(1, $1) AS n",
            count,
        )
    finally:
        await conn.close()


async def search_latencies(url: str, count: int, mode: str) -> list[float]:
    words = ["lighthouse lens", "sourdough starter", "borrow checker", "lease queue", "vector"]
    out = []
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        await client.get("/v1/search", params={"q": "warm up", "k": 5, "mode": mode})
        for i in range(count):
            query = f"{words[i % 5]} ident_{i * 37}_x{i * 37 % 997}"
            started = time.perf_counter()
            r = await client.get("/v1/search", params={"q": query, "k": 10, "mode": mode})
            r.raise_for_status()
            out.append((time.perf_counter() - started) * 1000)
            if i == 0 and not r.json():
                raise SystemExit(f"bench.serve: {mode} search found nothing: the fill is wrong")
    return out


def section_search(opts: Options, tmp: Path) -> None:
    data = tmp / "search" / "data"
    with throwaway_database(opts.server_dsn, "ragline_bserve") as dsn:
        cli = Cli(dsn, data, tmp / "search" / "logs")
        migrated = cli.run("migrate")
        if migrated.code != 0:
            raise SystemExit(f"bench.serve: migrate failed: {migrated}")
        started = time.perf_counter()
        anyio.run(fill_index, dsn, data, opts.points)
        fill_s = time.perf_counter() - started
        with running_server(cli) as server:
            # The modes in turns, so that the machine's load falls on each alike.
            lat: dict[str, list[float]] = {m: [] for m in ("dense", "keyword", "hybrid")}
            for _ in range(4):
                for mode, seen in lat.items():
                    seen += anyio.run(search_latencies, server.url, opts.searches // 4, mode)
    print(f"\n== 5. Search: {opts.points} points (embedded index, local embedder), k=10 ==")
    print(f"  filled in {fill_s:.0f} s; {opts.searches} searches per mode (query embedding "
          "included in dense and hybrid; hits read from PostgreSQL):")  # fmt: skip
    for mode, seen in lat.items():
        print(f"  {mode:8} p50 {pct(seen, 0.5):.1f} ms  p99 {pct(seen, 0.99):.1f} ms")
    hybrid, dense = pct(lat["hybrid"], 0.99), pct(lat["dense"], 0.99)
    print(f"  hybrid p99 {hybrid:.1f} ms (floor <= 50: {'ok' if hybrid <= 50 else 'BELOW FLOOR'})"
          f"; {hybrid / dense:.2f}x dense's")  # fmt: skip


# -- 6. RSS during a 1 GB upload -----------------------------------------------------------


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def big_body(mb: int) -> Iterator[bytes]:
    yield b"%PDF-1.4\n"
    block = os.urandom(1 << 20)
    for _ in range(mb):
        yield block


def section_rss(opts: Options, tmp: Path) -> None:
    with served(opts, tmp / "rss", "--max-upload-mb", str(opts.big_mb + 16)) as (server, _cli):
        pid = server.proc.proc.pid
        before = rss_mb(pid)
        peak = before
        done = threading.Event()

        def sample() -> None:
            nonlocal peak
            while not done.is_set():
                peak = max(peak, rss_mb(pid))
                time.sleep(0.05)

        sampler = threading.Thread(target=sample)
        sampler.start()
        started = time.perf_counter()
        try:
            r = httpx.post(
                server.url + "/v1/documents",
                content=big_body(opts.big_mb),
                headers={"Content-Disposition": 'attachment; filename="big.pdf"'},
                timeout=600,
            )
        finally:
            done.set()
            sampler.join()
        took = time.perf_counter() - started
    print(f"\n== 6. RSS: the server while a {opts.big_mb} MB body streams in (chunked) ==")
    print(
        f"  answered {r.status_code} in {took:.1f} s ({opts.big_mb / took:.0f} MB/s); RSS before "
        f"{before:.0f} MB, peak {peak:.0f} MB (ceiling {RSS_CEILING_MB:.0f}: "
        f"{verdict(peak <= RSS_CEILING_MB)})"
    )


# -- main ----------------------------------------------------------------------------------


def main(opts: Options) -> None:
    print(f"ragline serve benchmark: Python {sys.version.split()[0]}, {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory(prefix="ragline-bench-serve-") as raw:
        tmp = Path(raw)
        if "engine" in opts.parts:
            anyio.run(section_engine, opts)
        for part, fn in (
            ("upload", section_upload),
            ("sse", section_sse),
            ("status", section_status),
            ("search", section_search),
            ("rss", section_rss),
        ):
            if part in opts.parts:
                (tmp / part).mkdir(exist_ok=True)
                fn(opts, tmp / part)


def parse_args(argv: Sequence[str] | None = None) -> Options:
    parser = argparse.ArgumentParser(prog="python -m bench.serve", description=__doc__)
    parser.add_argument("--parts", default=",".join(PARTS), help="comma-separated subset")
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    parser.add_argument("--slots", type=int, default=4, help="engine part: slots per stage (4)")
    parser.add_argument("--repeat", type=int, default=3, help="engine part: runs per variant (3)")
    args = parser.parse_args(argv)
    dsn = os.environ.get("DATABASE_URL", "postgresql://root@127.0.0.1:5432/postgres")
    parts = tuple(p for p in args.parts.split(",") if p)
    if args.quick:
        return Options(
            server_dsn=dsn,
            parts=parts,
            engine_docs=200,
            repeat=1,
            uploads=20,
            sse_events=50,
            status_s=1.0,
            points=2000,
            searches=20,
            big_mb=64,
        )
    return Options(server_dsn=dsn, parts=parts, engine_slots=args.slots, repeat=args.repeat)


if __name__ == "__main__":
    main(parse_args())
