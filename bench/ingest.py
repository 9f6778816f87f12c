"""End-to-end ingest benchmark: ragline's parse→index next to raw PyMuPDF, in one run.

``python -m bench.ingest [--docs N] [--repeat 3] [--quick] [--index-only]`` creates
throwaway databases (``ragline_bench_<random>``) on ``DATABASE_URL`` (default: the local
server) and prints:

1. pages/s of the whole pipeline on the real-PDF corpus with TWO worker processes
   (``python -m runtime --pipeline bench.standins:plugin --exit-when-idle``: the real
   parse, chunk, asset store and embedded vector index; the embedder and vision replaced
   by zero-cost stand-ins), from the first claim to the last document ready, next to raw
   PyMuPDF's two-process text + image extraction of the same files, and where the time
   went per stage (from ``stage_jobs.started_at``/``finished_at``); ``--repeat`` pairs
   alternate (each ragline run on a fresh database) and the median ratio is the verdict,
   since one pair moves by ±0.03 with the machine's load;
   then every document indexed again by an index-only worker: its CPU per point
   (less an idle worker's start-up CPU), target ≤ 20 µs;
2. peak RSS of one ``--stages parse`` worker parsing a 2,000-page PDF, and on the most
   image-heavy corpus file next to raw PyMuPDF's own peak for that file.

``--index-only``: one ragline run (no raw PyMuPDF, no memory section), then the index
stage's CPU per point; for work on the index stage. With it, ``--rounds N`` (3) runs the
index stage alone N times into a fresh dense-only shard and N times into a fresh one
with the keyword side, in turns: the keyword side's cost to the stage, all-in.

Peak RSS is the kernel's ``ru_maxrss`` of the child process (``os.wait4``), started
through :mod:`bench.harness.rusage` so that it is the child's own, not this process's.
"""

# PyMuPDF's API is only partly typed.
# mypy: disallow-untyped-calls=False

from __future__ import annotations

import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import asyncpg
import msgspec
import pymupdf

from bench.args import bench_parser
from bench.harness.corpus import CORPUS_DIR, corpus_ready
from bench.harness.proccpu import postgres_cpu_s
from bench.index_parts import index_parts
from bench.queue import (
    banner,
    bench_database,
    connection,
    heading,
    pool_of,
    row,
    server_dsn,
    verdict,
)
from bench.standins import ZeroEmbedder
from runtime.jobs.documents import DocumentRepository
from stages.actions.submit import inspect_file, submit
from stages.adapters.assets.directory import DirStore
from stages.adapters.vector_index.edge.shard import ensure_shard
from stages.ports.assets import AssetStore

REPO = Path(__file__).resolve().parent.parent
PLUGIN = "bench.standins:plugin"
WORKERS = 2
RAW_PROCESSES = 2
RATIO_FLOOR = 0.60
WORKER_RSS_FLOOR_MB = 300.0
INDEX_US_TARGET = 20.0
BIG_PAGES = 2000
BIG_RSS_FLOOR_MB = 400.0
IMAGE_RSS_MARGIN_MB = 100.0
RUN_TIMEOUT_S = 3600.0
QUICK_DOCS = 20

# Raw PyMuPDF in a lean interpreter (nothing imported but pymupdf), so its memory and
# start-up are the floor ragline is compared with. ``rate FILE...``: a pool of N forked
# processes over the files (largest first), timed around the map; ``one FILE``: one file.
RAW_SCRIPT = r"""
import json, multiprocessing, sys, time
import pymupdf

def extract(path):
    pages = images = size = 0
    try:
        doc = pymupdf.open(path)
    except Exception:
        return [path, -1, 0, 0]
    for page in doc:
        page.get_text()
        for img in page.get_images(full=True):
            info = doc.extract_image(img[0])
            if info:
                images += 1
                size += len(info["image"])
        pages += 1
    doc.close()
    return [path, pages, images, size]

mode, args = sys.argv[1], sys.argv[2:]
if mode == "one":
    print(json.dumps({"seconds": 0.0, "files": [extract(args[0])]}))
else:
    procs, files = int(args[0]), args[1:]
    with multiprocessing.get_context("fork").Pool(procs) as pool:
        pool.map(abs, range(procs))  # workers up before the clock starts
        started = time.perf_counter()
        out = list(pool.imap_unordered(extract, files, chunksize=1))
        seconds = time.perf_counter() - started
    print(json.dumps({"seconds": seconds, "files": out}))
"""

# Finish line: the first claim of any job to the last index job's commit (server clock).
SPAN_SQL = """
SELECT extract(epoch FROM max(finished_at) FILTER (WHERE stage = 'index' AND state = 'succeeded')
                         - min(started_at))::float8 AS span_s
FROM stage_jobs
"""
PAGES_SQL = "SELECT count(*) FROM pages"
CHUNKS_SQL = "SELECT count(*) FROM chunks"
ASSETS_SQL = "SELECT count(*), coalesce(sum(byte_size), 0)::bigint FROM assets"
FAILED_SQL = """
SELECT filename, stage, error FROM documents WHERE status = 'failed' ORDER BY 1
"""
STATUS_SQL = "SELECT status::text AS status, count(*) AS n FROM documents GROUP BY 1 ORDER BY 1"
# Seconds each stage's successful jobs ran, summed over both processes' slots.
STAGE_SQL = """
SELECT stage, count(*) AS jobs,
       sum(extract(epoch FROM finished_at - started_at))::float8 AS busy_s,
       max(extract(epoch FROM finished_at - started_at))::float8 AS max_s,
       extract(epoch FROM max(finished_at) - min(started_at))::float8 AS window_s
FROM stage_jobs WHERE state = 'succeeded' GROUP BY stage
"""
READY_SQL = "SELECT id FROM documents WHERE status = 'ready'"
# Index jobs of the latest generation of every document (the index-only re-run).
INDEX_BUSY_SQL = """
SELECT sum(extract(epoch FROM j.finished_at - j.started_at))::float8
FROM stage_jobs AS j JOIN documents AS d ON d.id = j.document_id AND d.generation = j.generation
WHERE j.stage = 'index' AND j.state = 'succeeded'
"""
JOB_STATE_SQL = """
SELECT state::text, last_error FROM stage_jobs
WHERE document_id = $1 AND stage = $2 ORDER BY id DESC LIMIT 1
"""


class Options(msgspec.Struct, frozen=True, kw_only=True):
    server_dsn: str
    docs: int | None = None
    repeat: int = 3
    index_only: bool = False
    rounds: int = 3


class RawFile(msgspec.Struct, frozen=True):
    path: str
    pages: int
    images: int
    image_bytes: int


class RawRun(msgspec.Struct, frozen=True):
    seconds: float
    files: list[RawFile]

    @property
    def pages(self) -> int:
        return sum(max(f.pages, 0) for f in self.files)


class Measured(msgspec.Struct, frozen=True):
    """A finished child process: exit code, wall seconds, peak resident memory, CPU."""

    exit_code: int
    seconds: float
    max_rss_mb: float
    cpu_s: float


class StageTime(msgspec.Struct, frozen=True):
    stage: str
    jobs: int
    busy_s: float
    max_s: float
    window_s: float


def load_note() -> str:
    """The machine's load and how long it has been up, printed next to timings: this host
    is shared and noisy, and a virtual machine in its first minutes after boot ran
    ragline's pairs 5-10% slower than later (README's bench.ingest row)."""
    one, five, _ = os.getloadavg()
    note = f"load average {one:.1f} (1 min), {five:.1f} (5 min) on {os.cpu_count()} CPUs"
    try:
        up_s = float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return note
    return f"{note}, up {up_s / 60:.0f} min"


# -- the corpus ---------------------------------------------------------------------------


def corpus_files(limit: int | None) -> list[Path]:
    """Distinct corpus PDFs (by content), the first ``limit`` by name, largest first."""
    if not corpus_ready():
        sys.exit("corpus not fetched: PYTHON=/work/venv/bin/python bash tests/corpus/fetch.sh")
    seen: set[str] = set()
    picked: list[Path] = []
    for path in sorted((CORPUS_DIR / "pdfs").glob("*.pdf")):
        digest = inspect_file(path).sha256
        if digest not in seen:
            seen.add(digest)
            picked.append(path)
    chosen = picked[:limit] if limit else picked
    return sorted(chosen, key=lambda p: p.stat().st_size, reverse=True)


def big_pdf(tmp: Path, corpus: Sequence[Path]) -> Path:
    """The 2,000-page corpus PDF, or one concatenated from corpus files into ``tmp``."""
    cached = CORPUS_DIR / "big" / "big-2000.pdf"
    if cached.is_file():
        return cached
    out = pymupdf.open()
    for path in sorted(corpus):
        with pymupdf.open(path) as src:
            out.insert_pdf(src, to_page=min(src.page_count, BIG_PAGES - out.page_count) - 1)
        if out.page_count >= BIG_PAGES:
            break
    target = tmp / "big-2000.pdf"
    out.save(target)
    out.close()
    return target


# -- child processes ----------------------------------------------------------------------


def child_env() -> dict[str, str]:
    """This environment minus ragline's and the providers' knobs (the flags say it all)."""
    skip = ("RAGLINE_", "COHERE_", "QDRANT_", "MINIO_", "DATABASE_URL")
    return {k: v for k, v in os.environ.items() if not k.startswith(skip)}


def worker_command(dsn: str, data_dir: Path, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "runtime", "--database-url", dsn, "--data-dir", str(data_dir),
        "--pipeline", PLUGIN, "--no-auto-migrate", "--log-level", "warning",
        "--exit-when-idle", *extra,
    ]  # fmt: skip


class Spawned(msgspec.Struct, frozen=True):
    """A child started through :mod:`bench.harness.rusage`, which writes its rusage to
    ``report`` (a child's own ``wait4`` figure would include this process's peak RSS)."""

    proc: subprocess.Popen[bytes]
    report: Path


def spawn(cmd: Sequence[str], log: Path, stdout: int | None = None) -> Spawned:
    """Start ``cmd`` (its output to ``log``, or its stdout to ``stdout``) in a session
    of its own, so an overrun kills it with its children."""
    fd, name = tempfile.mkstemp(prefix="rusage-", suffix=".json", dir=log.parent)
    os.close(fd)
    report = Path(name)
    launcher = [sys.executable, "-m", "bench.harness.rusage", str(report), *cmd]
    with log.open("ab") as sink:
        proc = subprocess.Popen(
            launcher, cwd=REPO, env=child_env(), stdout=sink if stdout is None else stdout,
            stderr=sink, start_new_session=True,
        )  # fmt: skip
    return Spawned(proc, report)


def wait_measured(child: Spawned, started: float, timeout_s: float) -> Measured:
    """Wait for ``child``; kill it (and its children) if it overruns."""
    deadline = started + timeout_s
    while child.proc.poll() is None:
        if time.perf_counter() > deadline:
            os.killpg(child.proc.pid, signal.SIGKILL)
        time.sleep(0.02)
    wall = time.perf_counter() - started
    try:
        report = json.loads(child.report.read_text())
    except (OSError, ValueError):  # killed before it could say
        return Measured(child.proc.returncode, wall, 0.0, 0.0)
    finally:
        child.report.unlink(missing_ok=True)
    return Measured(report["exit_code"], wall, report["max_rss_kb"] / 1024, report["cpu_s"])


def run_children(cmds: Sequence[Sequence[str]], log: Path) -> list[Measured]:
    """Start every command at once; wait for all; fail loudly with the log's tail."""
    started = time.perf_counter()
    children = [spawn(cmd, log) for cmd in cmds]
    results = [wait_measured(child, started, RUN_TIMEOUT_S) for child in children]
    if any(r.exit_code != 0 for r in results):
        tail = log.read_text(errors="replace")[-3000:]
        raise RuntimeError(f"child exited {[r.exit_code for r in results]}; log tail:\n{tail}")
    return results


def raw_pymupdf(mode: str, args: Sequence[str], log: Path) -> tuple[RawRun, Measured]:
    out = log.with_suffix(".json")
    cmd = [sys.executable, "-c", RAW_SCRIPT, mode, *args]
    started = time.perf_counter()
    with out.open("wb") as sink:
        child = spawn(cmd, log, stdout=sink.fileno())
    measured = wait_measured(child, started, RUN_TIMEOUT_S)
    if measured.exit_code != 0:
        raise RuntimeError(f"raw PyMuPDF exited {measured.exit_code}: {log.read_text()[-2000:]}")
    raw = json.loads(out.read_text())
    files = [RawFile(*f) for f in raw["files"]]
    return RawRun(seconds=float(raw["seconds"]), files=files), measured


# -- 1. end to end ------------------------------------------------------------------------


async def submit_all(dsn: str, assets: AssetStore, files: Sequence[Path]) -> list[uuid.UUID]:
    async with pool_of(dsn, 2) as pool:
        return [(await submit(pool, assets, path)).document_id for path in files]


async def stage_times(conn: asyncpg.Connection[Any]) -> list[StageTime]:
    rows = await conn.fetch(STAGE_SQL)
    order = {s: i for i, s in enumerate(("parse", "chunk", "vision", "embed", "index"))}
    times = [StageTime(**dict(r)) for r in rows]
    return sorted(times, key=lambda t: order.get(t.stage, 99))


def print_stage_times(times: Sequence[StageTime], span_s: float) -> None:
    total = sum(t.busy_s for t in times) or 1.0
    print(
        "where the time went (successful jobs; busy = sum of job durations over all slots "
        f"of both processes; {WORKERS} processes × the stage's slots run at once):"
    )
    widths = (6, 5, 9, 7, 8, 10, 14)
    row("stage", "jobs", "busy s", "share", "max s", "window s", "mean ms/job", widths=widths)
    for t in times:
        row(
            t.stage, t.jobs, f"{t.busy_s:.1f}", f"{t.busy_s / total:.0%}", f"{t.max_s:.2f}",
            f"{t.window_s:.1f}", f"{t.busy_s / t.jobs * 1000:.1f}", widths=widths,
        )  # fmt: skip
    print(f"(end-to-end span {span_s:.1f}s)")


async def pipeline_summary(conn: asyncpg.Connection[Any]) -> tuple[float, int]:
    span = await conn.fetchval(SPAN_SQL)
    pages = int(await conn.fetchval(PAGES_SQL))
    statuses = {r["status"]: r["n"] for r in await conn.fetch(STATUS_SQL)}
    chunks = int(await conn.fetchval(CHUNKS_SQL))
    assets, asset_bytes = await conn.fetchrow(ASSETS_SQL) or (0, 0)
    print(
        f"documents {statuses}; {pages} pages, {chunks} chunks, {assets} images stored "
        f"({asset_bytes / 1e6:.1f} MB)"
    )
    for r in await conn.fetch(FAILED_SQL):
        print(f"  FAILED {r['filename']} at {r['stage']}: {r['error']}")
    if span is None:
        raise RuntimeError("no index job succeeded")
    return float(span), pages


class RaglineRun(msgspec.Struct, frozen=True):
    span_s: float
    pages: int
    #: Both worker processes' CPU (their parser processes' included), start-up included.
    cpu_s: float
    #: The local PostgreSQL server's CPU over the run (None: not visible from here).
    postgres_cpu_s: float | None


async def ragline_run(dsn: str, data_dir: Path, files: Sequence[Path]) -> RaglineRun:
    """Two worker processes over all stages."""
    await submit_all(dsn, DirStore(data_dir / "assets"), files)
    cmd = worker_command(dsn, data_dir)
    pg_before = postgres_cpu_s()
    measured = await anyio.to_thread.run_sync(
        run_children, [cmd] * WORKERS, data_dir / "workers.log"
    )
    pg_after = postgres_cpu_s()
    rss = ", ".join(f"{m.max_rss_mb:.0f}" for m in measured)
    cpu = ", ".join(f"{m.cpu_s:.1f}" for m in measured)
    peak = max(m.max_rss_mb for m in measured)
    pg_cpu = None if pg_before is None or pg_after is None else pg_after - pg_before
    print(
        f"worker processes: exit {[m.exit_code for m in measured]}, peak RSS MB [{rss}] "
        f"(floor ≤ {WORKER_RSS_FLOOR_MB:.0f}: {verdict(peak <= WORKER_RSS_FLOOR_MB)}), "
        f"CPU s (start-up included) [{cpu}]; PostgreSQL CPU s "
        + ("(not visible: another host)" if pg_cpu is None else f"{pg_cpu:.1f}")
    )
    async with connection(dsn) as conn:
        span_s, pages = await pipeline_summary(conn)
        times = await stage_times(conn)
    print_stage_times(times, span_s)
    return RaglineRun(span_s, pages, sum(m.cpu_s for m in measured), pg_cpu)


def end_to_end_heading(files: Sequence[Path], repeat: int) -> None:
    total_mb = sum(p.stat().st_size for p in files) / 1e6
    heading(
        f"1. End to end parse→index: {len(files)} corpus PDFs ({total_mb:.0f} MB), "
        f"{WORKERS} worker processes (stand-in embedder and vision) vs raw PyMuPDF text + "
        f"images in {RAW_PROCESSES} processes; {repeat} pair(s) of runs, alternating, "
        "each on a fresh database"
    )


async def section_end_to_end(
    dsn: str, data_dir: Path, files: Sequence[Path]
) -> tuple[RawRun, float]:
    """One ragline run then one raw run; returns the raw run and the pages/s ratio."""
    print(f"before ragline: {load_note()}")
    ours_run = await ragline_run(dsn, data_dir, files)
    span_s, pages, cpu_s = ours_run.span_s, ours_run.pages, ours_run.cpu_s
    print(f"after ragline / before raw: {load_note()}")
    args = [str(RAW_PROCESSES), *map(str, files)]
    raw, measured = await anyio.to_thread.run_sync(
        raw_pymupdf, "rate", args, data_dir / "raw-rate.log"
    )
    print(f"after raw: {load_note()}")
    raw_images = sum(f.images for f in raw.files)
    print(
        f"raw PyMuPDF: {raw.pages} pages, {raw_images} images extracted "
        f"({sum(f.image_bytes for f in raw.files) / 1e6:.1f} MB) in {raw.seconds:.1f}s; "
        f"CPU s (start-up included) {measured.cpu_s:.1f}"
    )
    ours, theirs = pages / span_s, raw.pages / raw.seconds
    widths = (22, 8, 9, 8)
    row("", "pages", "seconds", "pages/s", widths=widths)
    row("ragline (2 processes)", pages, f"{span_s:.1f}", f"{ours:.1f}", widths=widths)
    row("raw PyMuPDF (2 procs)", raw.pages, f"{raw.seconds:.1f}", f"{theirs:.1f}", widths=widths)
    ratio = ours / theirs
    print(f"ratio ragline / raw: {ratio:.3f}")
    # CPU is steadier than wall time on a shared machine.
    raw_ms = measured.cpu_s / max(raw.pages, 1) * 1e3
    ours_ms = cpu_s / pages * 1e3
    line = (
        f"CPU per page (start-up included): ragline workers {ours_ms:.2f} ms, "
        f"raw PyMuPDF {raw_ms:.2f} ms; raw / ragline {raw_ms / ours_ms:.2f}"
    )
    if ours_run.postgres_cpu_s is not None:
        with_pg = (cpu_s + ours_run.postgres_cpu_s) / pages * 1e3
        line += f"; with PostgreSQL's {with_pg:.2f} ms, raw / ragline {raw_ms / with_pg:.2f}"
    print(line)
    return raw, ratio


# -- index CPU per point ------------------------------------------------------------------


async def index_cpu_per_point(dsn: str, data_dir: Path, rounds: int = 0) -> None:
    """Every document indexed again by one ``--stages index`` worker alone: its CPU (less
    an idle worker's start-up CPU) per point, all-in (reading chunks and vectors, building
    points, the embedded index's upsert, the job's commit). With ``rounds``, also the
    same into a dense-only shard (made as the stage makes one, without the keyword side),
    the two alternating, each into a fresh shard: the keyword side's cost to the stage
    (issue 34's floor: ≤ 1.5× dense only)."""
    async with pool_of(dsn, 2) as pool:
        ids = [r["id"] for r in await pool.fetch(READY_SQL)]
        points = int(await pool.fetchval(CHUNKS_SQL))
    if not ids or not points:
        print(f"index stage alone: nothing to index ({len(ids)} documents ready)")
        return
    cmd = worker_command(dsn, data_dir, "--stages", "index", "--concurrency", "2")
    log = data_dir / "index-only.log"
    [idle] = await anyio.to_thread.run_sync(run_children, [cmd], log)
    busy = await index_run(dsn, cmd, log, ids)
    async with connection(dsn) as conn:
        busy_s = await conn.fetchval(INDEX_BUSY_SQL)
    cpu_s = max(busy.cpu_s - idle.cpu_s, 0.0)
    us = cpu_s / max(points, 1) * 1e6
    print(
        f"index stage alone ({len(ids)} documents, {points} points, 2 slots): worker CPU "
        f"{busy.cpu_s:.2f}s - idle start-up {idle.cpu_s:.2f}s = {cpu_s:.2f}s → {us:.1f} µs "
        f"of CPU per point (target ≤ {INDEX_US_TARGET:.0f}: {verdict(us <= INDEX_US_TARGET)}); "
        f"busy (job durations) {float(busy_s or 0) / max(points, 1) * 1e6:.0f} µs per point; "
        f"peak RSS {busy.max_rss_mb:.0f} MB"
    )
    if rounds:
        await keyword_side_rounds(dsn, data_dir, cmd, log, ids, points, idle.cpu_s, rounds)


async def index_run(dsn: str, cmd: Sequence[str], log: Path, ids: Sequence[uuid.UUID]) -> Measured:
    """Every document's index job again, run by one worker until idle."""
    async with pool_of(dsn, 2) as pool:
        repo = DocumentRepository(pool)
        for doc_id in ids:
            await repo.reprocess(doc_id, "index")
    [busy] = await anyio.to_thread.run_sync(run_children, [cmd], log)
    return busy


async def keyword_side_rounds(
    dsn: str,
    data_dir: Path,
    cmd: Sequence[str],
    log: Path,
    ids: Sequence[uuid.UUID],
    points: int,
    idle_cpu_s: float,
    rounds: int,
) -> None:
    """The index stage alone into a fresh dense-only shard and a fresh one with the
    keyword side, in turns: each one's best worker CPU a point (less the idle start-up)."""
    [shard] = [p for p in (data_dir / "qdrant").iterdir() if p.is_dir() and p.name[0] != "."]
    best: dict[bool, float] = {}
    for turn in range(rounds * 2):
        keywords = bool(turn % 2)
        shutil.rmtree(shard)
        ensure_shard(shard, ZeroEmbedder().dimensions, keywords=keywords)
        run = await index_run(dsn, cmd, log, ids)
        us = max(run.cpu_s - idle_cpu_s, 0.0) / points * 1e6
        side = "with keywords" if keywords else "dense only"
        print(f"  {side}: {us:.1f} µs a point, peak RSS {run.max_rss_mb:.0f} MB", flush=True)
        best[keywords] = min(best.get(keywords, us), us)
    ratio = best[True] / best[False]
    print(
        f"index stage alone, dense-only shard vs with the keyword side ({rounds} rounds in "
        f"turns, best of each): {best[False]:.1f} vs {best[True]:.1f} µs of worker CPU a "
        f"point: {ratio:.2f}x (floor ≤ 1.5x: {verdict(ratio <= 1.5)})"
    )


# -- 2. memory ----------------------------------------------------------------------------


async def parse_once(dsn: str, data_dir: Path, doc_id: uuid.UUID, log: Path) -> Measured:
    """One ``--stages parse`` worker until the document's parse job is settled."""
    cmd = worker_command(dsn, data_dir, "--stages", "parse", "--concurrency", "1")
    [measured] = await anyio.to_thread.run_sync(run_children, [cmd], log)
    async with connection(dsn) as conn:
        state, error = await conn.fetchrow(JOB_STATE_SQL, doc_id, "parse") or (None, None)
    if state != "succeeded":
        # The peak still counts (the pages were parsed before the write failed); say so.
        print(f"  NOTE: the parse job ended {state} (after retries): {error}")
    return measured


async def big_pdf_rss(dsn: str, data_dir: Path, path: Path) -> None:
    async with pool_of(dsn, 1) as pool:
        doc_id = (await submit(pool, DirStore(data_dir / "assets"), path)).document_id
    pages, size_mb = await anyio.to_thread.run_sync(pdf_size, path)
    worker = await parse_once(dsn, data_dir, doc_id, data_dir / "big-parse.log")
    _, raw = await anyio.to_thread.run_sync(
        raw_pymupdf, "one", [str(path)], data_dir / "raw-big.log"
    )
    ok = worker.max_rss_mb <= BIG_RSS_FLOOR_MB
    print(
        f"{path.name} ({pages} pages, {size_mb:.1f} MB): parse worker peak "
        f"RSS {worker.max_rss_mb:.0f} MB in {worker.seconds:.1f}s "
        f"(floor ≤ {BIG_RSS_FLOOR_MB:.0f} MB: {verdict(ok)}); raw PyMuPDF peak "
        f"{raw.max_rss_mb:.0f} MB"
    )


def pdf_size(path: Path) -> tuple[int, float]:
    """(pages, megabytes) of a PDF."""
    with pymupdf.open(path) as pdf:
        return pdf.page_count, path.stat().st_size / 1e6


def image_heaviest(raw: RawRun) -> RawFile:
    return max(raw.files, key=lambda f: (f.image_bytes, f.images))


async def image_rss(dsn: str, data_dir: Path, heavy: RawFile) -> None:
    path = Path(heavy.path)
    async with pool_of(dsn, 1) as pool:
        doc = await DocumentRepository(pool).find_by_sha256(inspect_file(path).sha256)
        if doc is None:
            raise RuntimeError(f"{path.name} was not ingested")
        await DocumentRepository(pool).reprocess(doc.id, "parse")
    worker = await parse_once(dsn, data_dir, doc.id, data_dir / "image-parse.log")
    _, raw = await anyio.to_thread.run_sync(
        raw_pymupdf, "one", [str(path)], data_dir / "raw-image.log"
    )
    limit = raw.max_rss_mb + IMAGE_RSS_MARGIN_MB
    print(
        f"{path.name} ({heavy.pages} pages, {heavy.images} image extractions, "
        f"{heavy.image_bytes / 1e6:.1f} MB of images): parse worker peak RSS "
        f"{worker.max_rss_mb:.0f} MB, raw PyMuPDF peak {raw.max_rss_mb:.0f} MB "
        f"(floor ≤ raw + {IMAGE_RSS_MARGIN_MB:.0f} = {limit:.0f} MB: "
        f"{verdict(worker.max_rss_mb <= limit)})"
    )


async def section_memory(dsn: str, data_dir: Path, files: Sequence[Path], raw: RawRun) -> None:
    heading(
        "2. Peak RSS of one `--stages parse` worker process (ru_maxrss via wait4, the "
        "child's own: bench.harness.rusage; raw PyMuPDF: a lean interpreter doing text + "
        "image extraction of the same file)"
    )
    await big_pdf_rss(dsn, data_dir, big_pdf(data_dir, files))
    await image_rss(dsn, data_dir, image_heaviest(raw))


# -- entry point --------------------------------------------------------------------------


async def index_only(opts: Options, files: Sequence[Path]) -> None:
    heading(f"Index stage alone: {len(files)} corpus PDFs ingested once, then indexed again")
    with tempfile.TemporaryDirectory(prefix="ragline-bench-") as tmp:
        async with bench_database(opts.server_dsn) as dsn:
            await ragline_run(dsn, Path(tmp), files)
            await index_cpu_per_point(dsn, Path(tmp), opts.rounds)
            await index_parts(dsn, Path(tmp))


async def main(opts: Options) -> None:
    await banner(opts.server_dsn, "ragline ingest benchmark", f"PyMuPDF {pymupdf.VersionBind}")
    files = corpus_files(opts.docs)
    if opts.index_only:
        await index_only(opts, files)
        return
    end_to_end_heading(files, opts.repeat)
    ratios: list[float] = []
    with tempfile.TemporaryDirectory(prefix="ragline-bench-") as tmp:
        for run in range(1, opts.repeat + 1):
            print(f"-- pair {run} of {opts.repeat}", flush=True)
            data_dir = Path(tmp) / f"run-{run}"
            data_dir.mkdir()
            async with bench_database(opts.server_dsn) as dsn:
                raw, ratio = await section_end_to_end(dsn, data_dir, files)
                ratios.append(ratio)
                if run < opts.repeat:
                    continue
                median = statistics.median(ratios)
                print(
                    f"median ratio ragline / raw over {len(ratios)} pair(s): {median:.3f} "
                    f"[{', '.join(f'{r:.3f}' for r in ratios)}] "
                    f"(floor ≥ {RATIO_FLOOR}: {verdict(median >= RATIO_FLOOR)})"
                )
                await index_cpu_per_point(dsn, data_dir)
                await index_parts(dsn, data_dir)
                await section_memory(dsn, data_dir, files, raw)


def parse_args(argv: Sequence[str] | None = None) -> Options:
    parser = bench_parser("bench.ingest", __doc__)
    parser.add_argument("--docs", type=int, help="corpus documents (all distinct ones)")
    parser.add_argument(
        "--repeat", type=int, default=3, help="alternating ragline/raw pairs, median (3)"
    )
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_DOCS} documents, 1 pair")
    parser.add_argument(
        "--index-only", action="store_true", help="one ragline run, then the index line alone"
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="with --index-only: dense-only and keyword-side index runs, in turns (3)",
    )
    args = parser.parse_args(argv)
    docs = args.docs if args.docs is not None else (QUICK_DOCS if args.quick else None)
    repeat = 1 if args.quick else args.repeat
    if repeat < 1:
        parser.error("--repeat must be at least 1")
    return Options(
        server_dsn=server_dsn(),
        docs=docs,
        repeat=repeat,
        index_only=args.index_only,
        rounds=args.rounds,
    )


if __name__ == "__main__":
    anyio.run(main, parse_args(), backend_options={"use_uvloop": True})
