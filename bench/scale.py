"""Scale benchmark (issue 37): every interactive read and maintenance pass at 1k, 100k and
1M documents.

``python -m bench.scale [--docs 1k,100k,1M] [--keep]`` fills one database per size
(``ragline_scale_<size>`` on ``DATABASE_URL``, default the local server) by COPY
(:mod:`bench.harness.scale_fill`: documents in mixed states, their finished and live jobs,
22 short chunks each; the pipeline never runs), then measures, per size:

- reads, in process (median of ``REPEAT`` after one warm-up): ``status`` (the stage table
  and its notes), ``status DOC``, ``failures`` (first page), ``collections``;
- the HTTP API and web view through ``ragline serve`` (a subprocess): the documents list,
  its next page and a page deep in the middle (keyset cursors), the failed documents, a
  document, ``/v1/stages``, the web view's list, document page and stage table;
- SSE fan-out: ``SSE_CLIENTS`` streams on ``/v1/events``, one document changed, the time
  until each stream has the event (p50 and max over ``SSE_ROUNDS`` changes);
- claim: ``complete_and_claim`` round trips (complete the last job, claim one), p50/p99,
  with the fill's finished jobs beside the queue;
- ``retry --error-kind permanent`` (every failed-at-embed document: 5% of them) and
  ``delete`` (``DELETE_SHARE`` of the documents' rows) inside a transaction rolled back;
- ``sync`` planning against a listing of every file of the source plus 1% new ones;
- ``verify`` (a subprocess under :mod:`bench.harness.rusage`: its peak RSS alone) with an
  index and a store that agree with the fill (:mod:`bench.harness.scale_verify`).

It prints a table (a row per figure, a column per size) and the floors at the largest size:
every read ≤ ``READ_FLOOR_MS``, claim p99 ≤ ``CLAIM_RATIO_FLOOR`` × its figure at the
smallest size, verify's peak RSS ≤ ``VERIFY_RSS_FLOOR_MB`` and its time within
``VERIFY_LINEAR_FLOOR`` × linear. The databases are dropped unless ``--keep``; a kept one
is reused by the next run. Disk: about 6 GB at 1M documents (20.7M chunks).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import asyncpg
import httpx
import msgspec

from bench.args import bench_parser
from bench.database import server_dsn
from bench.harness.cli import Cli
from bench.harness.db import execute, migrate_database, with_database
from bench.harness.scale_fill import SOURCE_ID, document_id, fill, state_of
from bench.harness.serve import Server, running_server
from bench.report import percentile
from runtime.cli.commands import stage_table, timeline
from runtime.jobs.postgres import JobRepository, retry_failed_jobs
from runtime.jobs.status import failures
from runtime.jobs.store import Claim
from stages.actions import sync
from stages.actions.browse import encode_cursor
from stages.app import status_notes
from stages.db import model_switch, sources
from stages.pipeline import STAGES
from stages.ports.http import DocumentOut
from stages.ports.sources import Entry, Listing

SIZES = (1_000, 100_000, 1_000_000)
REPEAT = 5
READ_FLOOR_MS = 200.0
CLAIM_RATIO_FLOOR = 1.5
VERIFY_RSS_FLOOR_MB = 300.0
VERIFY_LINEAR_FLOOR = 1.2
CLAIMS = 1000
CLAIM_ROUNDS = 5
SSE_CLIENTS = 100
SSE_ROUNDS = 5
DELETE_SHARE = 0.1
#: New files in sync's listing, as a share of the source's.
SYNC_NEW_SHARE = 0.01
CLAIM_STAGE = "index"
CLAIM_OWNER = "scale:claim"

Conn = Any  # asyncpg.Connection[Any]: a Pool's reads, on one connection


class Options(msgspec.Struct, frozen=True, kw_only=True):
    server_dsn: str
    sizes: tuple[int, ...] = SIZES
    keep: bool = False


# -- the database ---------------------------------------------------------------------------


async def _documents_in(dsn: str) -> int:
    conn = await asyncpg.connect(dsn)
    try:
        return int(await conn.fetchval("SELECT coalesce(sum(n), 0) FROM document_counts"))
    finally:
        await conn.close()


async def _fill(dsn: str, size: int) -> float:
    conn = await asyncpg.connect(dsn)
    try:
        started = time.perf_counter()
        await fill(conn, 1, size + 1)
        return time.perf_counter() - started
    finally:
        await conn.close()


def filled(server: str, size: int) -> tuple[str, float | None]:
    """The DSN of ``ragline_scale_<size>``, filled (reused when it already holds ``size``
    documents), and the fill's seconds (None: reused)."""
    name = f"ragline_scale_{size}"
    dsn = with_database(server, name)
    try:
        if anyio.run(_documents_in, dsn) == size:
            return dsn, None
    except (OSError, asyncpg.PostgresError):
        pass
    execute(server, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)", f"CREATE DATABASE {name}")
    migrate_database(dsn)
    return dsn, anyio.run(_fill, dsn, size)


def drop(server: str, size: int) -> None:
    execute(server, f"DROP DATABASE IF EXISTS ragline_scale_{size} WITH (FORCE)")


# -- timing ---------------------------------------------------------------------------------


async def timed_ms(call: Callable[[], Awaitable[object]], repeat: int = REPEAT) -> float:
    """The median of ``repeat`` calls after one warm-up, in ms."""
    await call()
    spans = []
    for _ in range(repeat):
        started = time.perf_counter()
        await call()
        spans.append((time.perf_counter() - started) * 1000)
    return statistics.median(spans)


def middle(size: int) -> uuid.UUID:
    """A document in the middle of the table (its number: a processing one, for
    ``status DOC`` to explain)."""
    n = size // 2
    while state_of(n)[0] != "processing":
        n += 1
    return document_id(n)


# -- reads in process -----------------------------------------------------------------------


async def reads(pool: asyncpg.Pool, size: int) -> dict[str, float]:
    doc = middle(size)

    async def status() -> None:
        await stage_table(pool, STAGES)
        await status_notes(pool, None)

    async def status_doc() -> None:
        await timeline(pool, doc)
        await status_notes(pool, doc)

    return {
        "status": await timed_ms(status),
        "status DOC": await timed_ms(status_doc),
        "failures (first page)": await timed_ms(lambda: failures(pool, None, None, 100)),
        "collections": await timed_ms(lambda: model_switch.collection_counts(pool)),
    }


# -- HTTP and the web view ------------------------------------------------------------------


@contextmanager
def serving(dsn: str) -> Iterator[Server]:
    with tempfile.TemporaryDirectory(prefix="ragline-scale-") as tmp:
        cli = Cli(dsn, Path(tmp) / "data", Path(tmp) / "logs")
        with running_server(cli) as server:
            yield server


async def http_reads(url: str, size: int) -> dict[str, float]:
    doc = middle(size)
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        first = (await client.get("/v1/documents", params={"limit": 50})).json()
        after = first["next_cursor"]
        # The cursor of a document in the middle: the page after it is as deep as pages go.
        found = (await client.get(f"/v1/documents/{document_id(size // 2)}")).json()
        deep = encode_cursor(msgspec.convert(found, DocumentOut))

        def get(path: str, **params: str | int) -> Callable[[], Awaitable[object]]:
            async def call() -> None:
                r = await client.get(path, params=params)
                r.raise_for_status()

            return call

        paths = {
            "HTTP documents, first page": get("/v1/documents", limit=50),
            "HTTP documents, next page": get("/v1/documents", limit=50, cursor=after),
            "HTTP documents, middle page": get("/v1/documents", limit=50, cursor=deep),
            "HTTP documents, failed": get("/v1/documents", limit=50, status="failed"),
            "HTTP a document": get(f"/v1/documents/{doc}"),
            "HTTP /v1/stages": get("/v1/stages"),
            "web documents list": get("/"),
            "web document page": get(f"/documents/{doc}"),
            "web stages": get("/stages"),
        }
        return {name: await timed_ms(call) for name, call in paths.items()}


async def sse_fan_out(url: str, dsn: str, size: int) -> dict[str, float]:
    """``SSE_CLIENTS`` streams; per change, each stream's delay from the UPDATE's commit."""
    doc, latencies = middle(size), []
    arrived: dict[str, list[float]] = {}
    everyone = {f"scale{r}": anyio.Event() for r in range(SSE_ROUNDS)}
    opened = anyio.Event()
    streams = 0
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:

        async def listen() -> None:
            nonlocal streams
            async with client.stream("GET", "/v1/events") as r:
                streams += 1
                if streams == SSE_CLIENTS:
                    opened.set()
                async for line in r.aiter_lines():
                    if not line.startswith("data: "):
                        continue
                    stage = str(msgspec.json.decode(line[6:]).get("stage"))
                    arrived.setdefault(stage, []).append(time.perf_counter())
                    if len(arrived[stage]) == SSE_CLIENTS and stage in everyone:
                        everyone[stage].set()

        async with anyio.create_task_group() as tg:
            for _ in range(SSE_CLIENTS):
                tg.start_soon(listen)
            with anyio.fail_after(60):
                await opened.wait()
            await anyio.sleep(1.0)  # each stream's LISTEN is in place before the first change
            conn = await asyncpg.connect(dsn)
            try:
                for stage, done in everyone.items():
                    sent = time.perf_counter()
                    await conn.execute(BUMP_SQL, doc, stage)
                    with anyio.fail_after(30):
                        await done.wait()
                    latencies += [(t - sent) * 1000 for t in arrived[stage]]
                await conn.execute(BUMP_SQL, doc, state_of(size // 2)[1])
            finally:
                await conn.close()
            tg.cancel_scope.cancel()
    return {
        f"SSE {SSE_CLIENTS} clients, p50": percentile(latencies, 50),
        f"SSE {SSE_CLIENTS} clients, max": max(latencies),
    }


BUMP_SQL = "UPDATE documents SET stage = $2 WHERE id = $1"


# -- claim ----------------------------------------------------------------------------------


ENQUEUE_SQL = """
INSERT INTO stage_jobs (document_id, stage, generation)
SELECT id, $2, 1 FROM documents WHERE status = 'ready' ORDER BY created_at DESC LIMIT $1
RETURNING id
"""
FORGET_SQL = "DELETE FROM stage_jobs WHERE id = ANY($1::bigint[])"


async def claim_spans(pool: asyncpg.Pool, count: int = CLAIMS) -> list[float]:
    """``count`` round trips as the completer makes them, in ms: complete the job held and
    claim the next (one statement, one commit). The jobs are deleted afterwards, claimed
    or not."""
    repo = JobRepository(pool)
    made = [r["id"] for r in await pool.fetch(ENQUEUE_SQL, count + 1, CLAIM_STAGE)]
    claim = Claim(CLAIM_OWNER, 300.0, {CLAIM_STAGE: 1})
    held: list[Any] = []
    spans = []
    try:
        for _ in range(count):
            started = time.perf_counter()
            settled = await repo.settle([(j, None) for j in held], claim)
            spans.append((time.perf_counter() - started) * 1000)
            held = settled.claimed
    finally:
        await pool.execute(FORGET_SQL, made)
    return spans


async def claims(pool: asyncpg.Pool) -> dict[str, float]:
    spans = await claim_spans(pool)
    return {"claim p50": percentile(spans, 50), "claim p99": percentile(spans, 99)}


async def claims_side_by_side(small: str, large: str) -> tuple[float, float]:
    """Claim p99 on the smallest and the largest database, measured in alternating rounds
    (``CLAIM_ROUNDS`` of ``CLAIMS`` / ``CLAIM_ROUNDS`` each) so the shared machine's load
    falls on both alike."""
    spans: dict[str, list[float]] = {small: [], large: []}
    pools = {dsn: await asyncpg.create_pool(dsn, min_size=1, max_size=2) for dsn in spans}
    try:
        for _ in range(CLAIM_ROUNDS):
            for dsn, pool in pools.items():
                spans[dsn] += await claim_spans(pool, CLAIMS // CLAIM_ROUNDS)
    finally:
        for pool in pools.values():
            await pool.close()
    return percentile(spans[small], 99), percentile(spans[large], 99)


TRIGGERS_SQL = "ALTER TABLE documents {} TRIGGER documents_counted_update"


async def trigger_cost(dsn: str) -> tuple[list[float], list[float]]:
    """Claim round trips with the counting trigger of completions (0022) on and off, in
    alternating rounds on one database: what counting costs the hot path. Each completion
    updates its document (status, stage), so the statement trigger runs on every one."""
    spans: tuple[list[float], list[float]] = ([], [])
    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=2)
    try:
        for _ in range(CLAIM_ROUNDS):
            for on, into in ((True, spans[0]), (False, spans[1])):
                await pool.execute(TRIGGERS_SQL.format("ENABLE" if on else "DISABLE"))
                into += await claim_spans(pool, CLAIMS // CLAIM_ROUNDS)
    finally:
        await pool.execute(TRIGGERS_SQL.format("ENABLE"))
        await pool.close()
    return spans


# -- maintenance ----------------------------------------------------------------------------


async def rolled_back(
    pool: asyncpg.Pool, body: Callable[[Conn], Awaitable[int]]
) -> tuple[float, int]:
    """``body`` on one connection inside a transaction that is rolled back: (ms, rows)."""
    async with pool.acquire() as conn:
        tx = conn.transaction()
        await tx.start()
        try:
            started = time.perf_counter()
            rows = await body(conn)
            return (time.perf_counter() - started) * 1000, rows
        finally:
            await tx.rollback()


async def retry_kind(conn: Conn) -> int:
    return len(await retry_failed_jobs(conn, None, kind="permanent"))


def delete_share(size: int) -> Callable[[Conn], Awaitable[int]]:
    ids = [document_id(n) for n in range(1, size + 1, int(1 / DELETE_SHARE))]

    async def body(conn: Conn) -> int:
        gone = 0
        for first in range(0, len(ids), 1000):
            rows = await conn.fetch(
                "DELETE FROM documents WHERE id = ANY($1::uuid[]) RETURNING id",
                ids[first : first + 1000],
            )
            gone += len(rows)
        return gone

    return body


class Listed:
    """A source's listing as a scanner gives it, without a folder: every file it has
    documents for, unchanged, and ``SYNC_NEW_SHARE`` new ones of sizes no document has."""

    uri = "/scale"

    def __init__(self, known: dict[str, sources.Known]) -> None:
        entries = {
            u: Entry(uri=u, size=k.byte_size, mtime_ns=k.mtime_ns or 0) for u, k in known.items()
        }
        for i in range(int(len(known) * SYNC_NEW_SHARE)):
            entries[f"new-{i}.pdf"] = Entry(uri=f"new-{i}.pdf", size=10**9 + i, mtime_ns=1)
        self.listing = Listing(entries=entries, skipped=[])

    async def list(self) -> Listing:
        return self.listing

    def chunks(self, uri: str) -> AsyncGenerator[bytes, None]:
        raise NotImplementedError("the plan hashes no file: every size is new or unchanged")

    async def sha256(self, uri: str) -> str:
        raise NotImplementedError("the plan hashes no file: every size is new or unchanged")

    def path_of(self, uri: str) -> Path | None:
        return None


async def sync_plan(pool: asyncpg.Pool) -> dict[str, float]:
    source = sources.Source(id=SOURCE_ID, uri=Listed.uri, collection="default")
    scanner = Listed(await sources.documents(pool, SOURCE_ID))
    started = time.perf_counter()
    planned = await sync.plan(pool, scanner, source, "default")
    ms = (time.perf_counter() - started) * 1000
    assert planned.unchanged == planned.known, planned.counts()
    return {f"sync planning ({len(scanner.listing.entries):,} entries)": ms}


def verify_run(dsn: str, size: int) -> dict[str, float]:
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        cmd = [sys.executable, "-m", "bench.harness.scale_verify", dsn, str(size)]
        found = subprocess.run(
            [sys.executable, "-m", "bench.harness.rusage", out.name, *cmd],
            check=True, capture_output=True, text=True, env={**os.environ},
        )  # fmt: skip
        usage = json.loads(Path(out.name).read_text())
    report = json.loads(found.stdout)
    if not report["clean"]:
        print(f"  verify at {size}: {report['problems']} problem(s)", file=sys.stderr)
    return {
        "verify s": report["seconds"],
        "verify CPU s": usage["cpu_s"],
        "verify peak RSS MB": usage["max_rss_kb"] / 1024,
    }


# -- a size ---------------------------------------------------------------------------------


async def measure(dsn: str, size: int) -> dict[str, float]:
    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=4)
    try:
        figures = await reads(pool, size)
        figures |= await claims(pool)
        ms, rows = await rolled_back(pool, retry_kind)
        figures[f"retry --error-kind ({rows:,} failed)"] = ms
        ms, rows = await rolled_back(pool, delete_share(size))
        figures[f"delete ({rows:,} documents)"] = ms
        figures |= await sync_plan(pool)
        return figures
    finally:
        await pool.close()


def one_size(opts: Options, size: int) -> dict[str, float]:
    dsn, fill_s = filled(opts.server_dsn, size)
    print(f"{size:,} documents: " + ("reused" if fill_s is None else f"filled in {fill_s:.0f} s"))
    figures = anyio.run(measure, dsn, size)
    with serving(dsn) as server:
        figures |= anyio.run(http_reads, server.url, size)
        figures |= anyio.run(sse_fan_out, server.url, dsn, size)
    return figures


def verify_runs(opts: Options, by_size: dict[int, dict[str, float]]) -> None:
    """``verify`` at each size, smallest first, and at the second largest once more after
    the largest: the linearity floor compares the largest with the mean of those two runs,
    made either side of it, so the shared machine's load weighs on both alike."""
    sizes = sorted(by_size)
    again = sizes[-2:-1]
    for size in [*sizes, *again]:
        found = verify_run(with_database(opts.server_dsn, f"ragline_scale_{size}"), size)
        figures = by_size[size]
        if "verify s" in figures:  # the second run: the mean of both times, the larger peak
            found = {
                k: max(v, figures[k]) if k.endswith("MB") else (v + figures[k]) / 2
                for k, v in found.items()
            }
        figures |= found


# -- the report -----------------------------------------------------------------------------


def table(by_size: dict[int, dict[str, float]]) -> None:
    sizes = sorted(by_size)
    names: list[str] = []
    for figures in by_size.values():
        names += [n for n in _generic(figures) if n not in names]
    print(f"\n{'':42}" + "".join(f"{_size(s):>12}" for s in sizes))
    for name in names:
        cells = []
        for s in sizes:
            value = _generic(by_size[s]).get(name)
            cells.append(f"{'-' if value is None else _cell(name, value):>12}")
        print(f"{name:42}" + "".join(cells))


def _generic(figures: dict[str, float]) -> dict[str, float]:
    """Figures keyed without their counts ("delete (100 documents)" -> "delete"), so the
    sizes line up."""
    return {name.split(" (")[0]: value for name, value in figures.items()}


def _cell(name: str, value: float) -> str:
    if name.endswith(" s"):
        return f"{value:.1f} s"
    if name.endswith(" MB"):
        return f"{value:.0f} MB"
    return f"{value:.1f} ms"


def _size(n: int) -> str:
    return f"{n // 1_000_000}M" if n >= 1_000_000 else f"{n // 1000}k"


READS = (
    "status", "status DOC", "failures", "collections", "HTTP documents, first page",
    "HTTP documents, next page", "HTTP documents, middle page", "HTTP documents, failed",
    "HTTP a document", "HTTP /v1/stages", "web documents list", "web document page",
    "web stages",
)  # fmt: skip


def floors(by_size: dict[int, dict[str, float]], claim: float) -> bool:
    """The floors at the largest size; ``claim``: its claim p99 over the smallest's, side
    by side."""
    small, large = min(by_size), max(by_size)
    hi = _generic(by_size[large])
    slow = {n: hi[n] for n in READS if hi.get(n, 0.0) > READ_FLOOR_MS}
    rss, verify_s = hi["verify peak RSS MB"], hi["verify s"]
    rss_floor = VERIFY_RSS_FLOOR_MB
    checks = [
        (f"every read at {_size(large)} <= {READ_FLOOR_MS:.0f} ms", not slow, str(slow or "")),
        (f"claim p99, {_size(large)}/{_size(small)}", claim <= CLAIM_RATIO_FLOOR, f"{claim:.2f}x"),
        (f"verify peak RSS <= {rss_floor:.0f} MB", rss <= rss_floor, f"{rss:.0f} MB"),
    ]  # fmt: skip
    mids = [s for s in by_size if s != large and s * 10 >= large]
    if mids:
        mid = max(mids)
        linear = verify_s / (_generic(by_size[mid])["verify s"] * large / mid)
        what = f"verify time {_size(large)} vs {_size(mid)}, over linear"
        checks.append((what, linear <= VERIFY_LINEAR_FLOOR, f"{linear:.2f}x"))
    print()
    for what, ok, figure in checks:
        print(f"  {'ok  ' if ok else 'FAIL'} {what}: {figure}")
    return all(ok for _, ok, _ in checks)


def parse_sizes(text: str) -> tuple[int, ...]:
    scale = {"k": 1_000, "m": 1_000_000}
    out = []
    for part in text.lower().split(","):
        part = part.strip()
        out.append(int(part[:-1]) * scale[part[-1]] if part[-1] in scale else int(part))
    return tuple(sorted(out))


def parse_args(argv: Sequence[str] | None = None) -> Options:
    parser = bench_parser("bench.scale", __doc__)
    parser.add_argument("--docs", default="1k,100k,1M", help="sizes, e.g. 1k,100k,1M")
    parser.add_argument("--keep", action="store_true", help="keep the databases (reused)")
    args = parser.parse_args(argv)
    return Options(server_dsn=server_dsn(), sizes=parse_sizes(args.docs), keep=args.keep)


def main(opts: Options) -> int:
    by_size = {size: one_size(opts, size) for size in opts.sizes}
    verify_runs(opts, by_size)
    table(by_size)
    ok = True
    if len(by_size) > 1:
        small, large = min(by_size), max(by_size)
        dsn_of = {s: with_database(opts.server_dsn, f"ragline_scale_{s}") for s in by_size}
        p99 = anyio.run(claims_side_by_side, dsn_of[small], dsn_of[large])
        print(f"\nclaim p99 side by side: {p99[0]:.2f} ms at {_size(small)}, ", end="")
        print(f"{p99[1]:.2f} ms at {_size(large)}")
        on, off = anyio.run(trigger_cost, dsn_of[large])
        print(
            f"claim at {_size(large)}, counting trigger on / off, side by side: "
            f"p50 {percentile(on, 50):.2f} / {percentile(off, 50):.2f} ms, "
            f"p99 {percentile(on, 99):.2f} / {percentile(off, 99):.2f} ms"
        )
        ok = floors(by_size, p99[1] / p99[0])
    if not opts.keep:
        for size in opts.sizes:
            drop(opts.server_dsn, size)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(parse_args()))
