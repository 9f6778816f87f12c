"""The default path as a new user meets it, next to the models' own speed (issue 38).

``python -m bench.default_path [--docs N] [--quick]`` runs ``python -m runtime ingest``
(the README's first command: one process, every stage, the embedded defaults: the local
embedder, OCR vision through RapidOCR, the embedded vector index) over a fixed slice of
the real corpus (``tests/corpus/fetch.sh``): the distinct corpus PDFs that hold embedded
images, sorted by name, at most 400 pages each (a 1,158-page manual with one image would
only measure text), the first N (20). It runs into a throwaway data dir and a throwaway
database on ``DATABASE_URL`` (else an embedded PostgreSQL started for the run), and
prints:

- wall time of the command (start-up and model loads included) and pages/s;
- peak RSS: the ingest process tree's summed ``VmRSS`` (sampled; ingest plus its parser
  process) and the largest single process's ``ru_maxrss``; the tree's CPU seconds;
- where the time went per stage, from ``stage_jobs.started_at``/``finished_at`` (busy =
  summed job durations; window = first start to last finish; per-stage CPU is not
  separable inside one process: the tree's total is given);
- OCR images described (and how many gave text), chunks embedded;
- beside it, one process (``bench.harness.default_path_loop``) calling the same OCR
  (``LocalOCR.describe_sync``) on the images ragline stored and the same embedder
  (``LocalEmbedder.embed_sync``) on the chunk texts ragline embedded, with no engine, no
  database and no index: images/s and chunks/s, the models' own speed on this machine;
- the vision and embed stages again, each alone: the slice submitted to a second
  database, then one worker per step (``--stages parse,chunk``, ``vision``, ``embed``,
  ``index``, each ``--exit-when-idle``), so a stage has the cores to itself as the loop's
  model has;
- ragline's vision and embed throughput (inputs over the stage's window) in ingest and
  alone, and alone as a share of the loop's (issue 38's floor: >= 0.85 each);
- where the memory goes: the imports, the embedder and an OCR engine, each measured in a
  fresh process (``bench.harness.model_memory``).

One run, no repeats: on a shared, noisy machine quote the load average printed with it.
"""

# PyMuPDF's API is only partly typed.
# mypy: disallow-untyped-calls=False

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import asyncpg
import msgspec
import pymupdf

from bench.args import bench_parser
from bench.database import connection
from bench.harness.corpus import CORPUS_DIR, corpus_ready
from bench.harness.db import server_dsn, throwaway_database
from bench.harness.default_path_loop import LoopResult
from bench.harness.default_path_rss import TreeRss
from bench.harness.model_memory import PARTS
from bench.ingest import (
    Measured,
    StageTime,
    load_note,
    pipeline_summary,
    spawn,
    stage_times,
    wait_measured,
)
from bench.report import banner, heading, row, verdict
from stages.actions.submit import inspect_file

DEFAULT_DOCS = 20
QUICK_DOCS = 2
MAX_PAGES = 400
SHARE_FLOOR = 0.85
RSS_FLOOR_MB = 600.0
RUN_TIMEOUT_S = 3600.0
#: ingest's exit codes that still leave a run to report (1: some documents failed).
REPORTABLE_EXITS = (0, 1)

# What the vision stage did: images stored, described, and described with text.
VISION_SQL = """
SELECT count(*) AS stored,
       count(*) FILTER (WHERE description IS NOT NULL) AS described,
       count(*) FILTER (WHERE btrim(description) <> '') AS with_text
FROM assets
"""
EMBEDDED_SQL = "SELECT count(*) FROM embeddings"
# The stages' jobs running at a moment (the tree's peak).
RUNNING_SQL = """
SELECT stage, count(*) AS n FROM stage_jobs
WHERE started_at <= to_timestamp($1) AND coalesce(finished_at, now()) >= to_timestamp($1)
GROUP BY stage ORDER BY stage
"""
CHUNK_KINDS_SQL = "SELECT kind::text AS kind, count(*) AS n FROM chunks GROUP BY 1 ORDER BY 1"


class Options(msgspec.Struct, frozen=True, kw_only=True):
    docs: int = DEFAULT_DOCS


class Slice(msgspec.Struct, frozen=True):
    files: list[Path]
    pages: int
    images: int


class IngestRun(msgspec.Struct, frozen=True, kw_only=True):
    measured: Measured
    tree_rss_mb: float
    #: At the tree's peak: seconds after ingest started, each process's MB (by module),
    #: the stages' jobs then running.
    peak_after_s: float = 0.0
    peak_parts_mb: dict[str, float] = {}
    peak_running: dict[str, int] = {}
    pages: int
    span_s: float
    stages: list[StageTime]
    images_stored: int
    images_described: int
    images_with_text: int
    chunks_embedded: int


# -- the slice ----------------------------------------------------------------------------


def pdf_pages_images(path: Path) -> tuple[int, int]:
    """(pages, distinct embedded images) of a PDF."""
    with pymupdf.open(path) as pdf:
        xrefs = {img[0] for page in pdf for img in page.get_images(full=True)}
        return pdf.page_count, len(xrefs)


def corpus_slice(docs: int) -> Slice:
    """The first ``docs`` distinct corpus PDFs by name holding images, <= MAX_PAGES each."""
    if not corpus_ready():
        sys.exit("corpus not fetched: PYTHON=.venv/bin/python bash tests/corpus/fetch.sh")
    seen: set[str] = set()
    files: list[Path] = []
    pages = images = 0
    for path in sorted((CORPUS_DIR / "pdfs").glob("*.pdf")):
        if len(files) >= docs:
            break
        digest = inspect_file(path).sha256
        if digest in seen:
            continue
        seen.add(digest)
        n_pages, n_images = pdf_pages_images(path)
        if n_images and n_pages <= MAX_PAGES:
            files.append(path)
            pages, images = pages + n_pages, images + n_images
    return Slice(files, pages, images)


# -- ragline ------------------------------------------------------------------------------


def ingest_command(dsn: str, data_dir: Path, files: Sequence[Path]) -> list[str]:
    return [
        sys.executable, "-m", "runtime", "--database-url", dsn, "--data-dir", str(data_dir),
        "--log-level", "warning", "ingest", "--no-progress", "--json", *map(str, files),
    ]  # fmt: skip


def run_ingest(dsn: str, data_dir: Path, files: Sequence[Path]) -> tuple[Measured, TreeRss]:
    """The ingest command through bench.harness.rusage, its tree's RSS sampled."""
    log = data_dir.parent / "ingest.log"
    out = data_dir.parent / "ingest.json"
    started = time.perf_counter()
    with out.open("wb") as sink:
        child = spawn(ingest_command(dsn, data_dir, files), log, stdout=sink.fileno())
    with TreeRss(child.proc.pid) as tree:
        measured = wait_measured(child, started, RUN_TIMEOUT_S)
    if measured.exit_code not in REPORTABLE_EXITS:
        tail = log.read_text(errors="replace")[-3000:]
        sys.exit(f"ingest exited {measured.exit_code}; stdout {out.read_text()[:500]}\n{tail}")
    return measured, tree


async def read_run(dsn: str, peak_at: float = 0.0) -> dict[str, Any]:
    async with connection(dsn) as conn:
        span_s, pages = await pipeline_summary(conn)
        vision = await conn.fetchrow(VISION_SQL)
        kinds = {r["kind"]: r["n"] for r in await conn.fetch(CHUNK_KINDS_SQL)}
        print(f"chunks by kind: {kinds}")
        return {
            "span_s": span_s,
            "pages": pages,
            "stages": await stage_times(conn),
            "images_stored": vision["stored"] if vision else 0,
            "images_described": vision["described"] if vision else 0,
            "images_with_text": vision["with_text"] if vision else 0,
            "chunks_embedded": int(await conn.fetchval(EMBEDDED_SQL)),
            "peak_running": {r["stage"]: r["n"] for r in await conn.fetch(RUNNING_SQL, peak_at)},
        }


def ragline_run(dsn: str, data_dir: Path, files: Sequence[Path]) -> IngestRun:
    print(f"before ingest: {load_note()}", flush=True)
    measured, tree = run_ingest(dsn, data_dir, files)
    print(f"after ingest: {load_note()}", flush=True)
    return IngestRun(
        measured=measured,
        tree_rss_mb=tree.max_mb,
        peak_after_s=tree.max_at - tree.started,
        peak_parts_mb={name: kb / 1024 for name, kb in tree.max_parts.items()},
        **anyio.run(read_run, dsn, tree.max_at),
    )


# -- each stage alone ---------------------------------------------------------------------


class AloneRun(msgspec.Struct, frozen=True, kw_only=True):
    """The vision and embed stages each run by a worker of its own over the whole slice,
    one after the other (``--stages S --exit-when-idle``): the machine's cores are the
    stage's alone, as the loop's are the model's."""

    images: int
    vision_window_s: float
    chunks: int
    embed_window_s: float


def runtime_command(dsn: str, data_dir: Path, *args: str) -> list[str]:
    return [
        sys.executable, "-m", "runtime", "--database-url", dsn, "--data-dir", str(data_dir),
        "--log-level", "warning", *args,
    ]  # fmt: skip


def run_step(dsn: str, data_dir: Path, name: str, *args: str) -> None:
    log = data_dir.parent / f"alone-{name}.log"
    child = spawn(runtime_command(dsn, data_dir, *args), log)
    measured = wait_measured(child, time.perf_counter(), RUN_TIMEOUT_S)
    if measured.exit_code != 0:
        sys.exit(f"{name} exited {measured.exit_code}:\n{log.read_text(errors='replace')[-3000:]}")


def alone_run(server: str, data_dir: Path, files: Sequence[Path]) -> AloneRun:
    with throwaway_database(server, "ragline_dp_alone") as dsn:
        run_step(dsn, data_dir, "submit", "submit", *map(str, files))
        for stages in ("parse,chunk", "vision", "embed", "index"):
            run_step(dsn, data_dir, stages, "--stages", stages, "--exit-when-idle")
        print(f"after the stages alone: {load_note()}", flush=True)
        got = anyio.run(read_run, dsn)
    times = {t.stage: t.window_s for t in got["stages"]}
    return AloneRun(
        images=got["images_described"],
        vision_window_s=times.get("vision", 0.0),
        chunks=got["chunks_embedded"],
        embed_window_s=times.get("embed", 0.0),
    )


# -- the one-process loop -----------------------------------------------------------------


def loop_run(dsn: str, data_dir: Path) -> tuple[LoopResult, Measured]:
    out = data_dir.parent / "loop.json"
    cmd = [sys.executable, "-m", "bench.harness.default_path_loop", dsn, str(data_dir), str(out)]
    started = time.perf_counter()
    child = spawn(cmd, data_dir.parent / "loop.log")
    measured = wait_measured(child, started, RUN_TIMEOUT_S)
    if measured.exit_code != 0:
        log = (data_dir.parent / "loop.log").read_text(errors="replace")[-3000:]
        sys.exit(f"the one-process loop exited {measured.exit_code}:\n{log}")
    print(f"after the loop: {load_note()}", flush=True)
    return msgspec.json.decode(out.read_bytes(), type=LoopResult), measured


# -- report -------------------------------------------------------------------------------


def rate(count: int, seconds: float) -> float:
    return count / seconds if seconds > 0 else 0.0


def share(ours: float, theirs: float) -> float:
    """Ragline's throughput as a fraction of the loop's (0 when the loop did nothing)."""
    return ours / theirs if theirs > 0 else 0.0


def stage(run: IngestRun, name: str) -> StageTime | None:
    return next((t for t in run.stages if t.stage == name), None)


def print_stages(run: IngestRun) -> None:
    total = sum(t.busy_s for t in run.stages) or 1.0
    print(
        "where the time went (successful jobs; busy = summed job durations over the "
        "stage's slots; window = first start to last finish):"
    )
    widths = (6, 5, 9, 7, 8, 10, 14)
    row("stage", "jobs", "busy s", "share", "max s", "window s", "mean ms/job", widths=widths)
    for t in run.stages:
        row(
            t.stage, t.jobs, f"{t.busy_s:.1f}", f"{t.busy_s / total:.0%}", f"{t.max_s:.2f}",
            f"{t.window_s:.1f}", f"{t.busy_s / t.jobs * 1000:.1f}", widths=widths,
        )  # fmt: skip
    print(f"(first claim to last index commit: {run.span_s:.1f}s)")


def print_ingest(run: IngestRun, sl: Slice) -> None:
    m = run.measured
    print(
        f"ingest: {run.pages} pages in {m.seconds:.1f}s wall (start-up and model loads "
        f"included): {rate(run.pages, m.seconds):.2f} pages/s; CPU {m.cpu_s:.1f}s "
        f"(process tree, {m.cpu_s / max(m.seconds, 1e-9):.2f} cores busy on average)"
    )
    print(
        f"peak RSS: process tree (summed VmRSS, sampled) {run.tree_rss_mb:.0f} MB "
        f"(floor ≤ {RSS_FLOOR_MB:.0f}: {verdict(run.tree_rss_mb <= RSS_FLOOR_MB)}); "
        f"largest single process (ru_maxrss) {m.max_rss_mb:.0f} MB"
    )
    parts = ", ".join(f"{name} {mb:.0f} MB" for name, mb in run.peak_parts_mb.items())
    running = ", ".join(f"{stage} {n}" for stage, n in run.peak_running.items()) or "none"
    print(
        f"the tree's peak {run.peak_after_s:.0f}s after ingest started: {parts}; "
        f"jobs running then: {running}"
    )
    print(
        f"images: {sl.images} embedded in the PDFs, {run.images_stored} stored, "
        f"{run.images_described} described by OCR, {run.images_with_text} with text; "
        f"chunks embedded: {run.chunks_embedded}"
    )
    print_stages(run)


def print_side_by_side(run: IngestRun, alone: AloneRun, loop: LoopResult, lm: Measured) -> None:
    heading("ragline's stages vs the one-process loop (same inputs, same models)")
    print(
        f"loop: {loop.images} images ({loop.image_bytes / 1e6:.1f} MB) OCR'd in "
        f"{loop.ocr_s:.1f}s (CPU {loop.ocr_cpu_s:.1f}s), {loop.images_with_text} with text; "
        f"{loop.chunks} chunks embedded in {loop.batches} batches in {loop.embed_s:.1f}s "
        f"(CPU {loop.embed_cpu_s:.1f}s); the loop process's peak RSS {lm.max_rss_mb:.0f} MB"
    )
    vision, embed = stage(run, "vision"), stage(run, "embed")
    together_img = rate(run.images_described, vision.window_s if vision else 0.0)
    together_chunks = rate(run.chunks_embedded, embed.window_s if embed else 0.0)
    alone_img = rate(alone.images, alone.vision_window_s)
    alone_chunks = rate(alone.chunks, alone.embed_window_s)
    theirs_img, theirs_chunks = rate(loop.images, loop.ocr_s), rate(loop.chunks, loop.embed_s)
    widths = (8, 14, 12, 11, 9, 14)
    row("", "in ingest /s", "alone /s", "loop /s", "share", "floor ≥ 0.85", widths=widths)
    for name, together, ours, theirs in (
        ("vision", together_img, alone_img, theirs_img),
        ("embed", together_chunks, alone_chunks, theirs_chunks),
    ):
        s = share(ours, theirs)
        row(
            name, f"{together:.2f}", f"{ours:.2f}", f"{theirs:.2f}", f"{s:.2f}",
            verdict(s >= SHARE_FLOOR), widths=widths,
        )  # fmt: skip
    print(
        "(in ingest: inputs over the stage's window, first job start to last finish, while "
        "the other stages share the cores; alone: the same over a worker running only that "
        "stage; share: alone over the loop's, one model with the machine to itself)"
    )
    models_cpu = loop.ocr_cpu_s + loop.embed_cpu_s
    print(
        f"CPU: ingest's process tree {run.measured.cpu_s:.1f}s (everything, start-up "
        f"included) vs the loop's OCR + embedding {models_cpu:.1f}s: "
        f"{share(run.measured.cpu_s, models_cpu):.2f}x the models' own CPU"
    )


def memory_parts() -> list[dict[str, Any]]:
    """bench.harness.model_memory's parts, each in a fresh process."""
    found = []
    for part in PARTS:
        cmd = [sys.executable, "-m", "bench.harness.model_memory", part]
        done = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=600)
        found.append(json.loads(done.stdout))
    return found


def print_memory(parts: Sequence[dict[str, Any]]) -> None:
    heading("where the memory goes (a fresh process per part: bench.harness.model_memory)")
    for p in parts:
        figures = ", ".join(
            f"{key.removesuffix('_mb')} +{value:.0f} MB" if key.endswith("_mb") else
            f"{key.removesuffix('_s')} {value:.1f}s"
            for key, value in p.items()
            if key not in ("part", "base_mb")
        )  # fmt: skip
        print(f"{p['part']}: {p['base_mb']:.0f} MB after imports; {figures or '-'}")
    print(
        "(load: the model loaded; runs: peak over it during the runs; ocr's runs: one "
        "detection pass at the detector's largest input, small: at 200 x 200)"
    )


# -- entry point --------------------------------------------------------------------------


def main(opts: Options) -> None:
    sl = corpus_slice(opts.docs)
    if not sl.files:
        sys.exit("no corpus PDF with images found")
    with server_dsn() as server, throwaway_database(server, "ragline_dp") as dsn:
        anyio.run(
            banner, server, "ragline default-path benchmark", f"PyMuPDF {pymupdf.VersionBind}"
        )
        heading(
            f"python -m runtime ingest on the defaults: {len(sl.files)} corpus PDFs "
            f"({sum(p.stat().st_size for p in sl.files) / 1e6:.0f} MB, {sl.pages} pages, "
            f"{sl.images} embedded images), one run"
        )
        with tempfile.TemporaryDirectory(prefix="ragline-dp-") as tmp:
            data_dir = Path(tmp) / "data"
            data_dir.mkdir()
            run = ragline_run(dsn, data_dir, sl.files)
            print_ingest(run, sl)
            alone_dir = Path(tmp) / "alone"
            alone_dir.mkdir()
            alone = alone_run(server, alone_dir, sl.files)
            loop, lm = loop_run(dsn, data_dir)
            print_side_by_side(run, alone, loop, lm)
    print_memory(memory_parts())


def parse_args(argv: Sequence[str] | None = None) -> Options:
    parser = bench_parser("bench.default_path", __doc__)
    parser.add_argument("--docs", type=int, help=f"PDFs in the slice (default {DEFAULT_DOCS})")
    parser.add_argument(
        "--quick", action="store_true", help=f"a smoke run: the first {QUICK_DOCS} PDFs"
    )
    args = parser.parse_args(argv)
    docs = args.docs if args.docs is not None else (QUICK_DOCS if args.quick else DEFAULT_DOCS)
    if docs < 1:
        parser.error("--docs must be at least 1")
    return Options(docs=docs)


def run(argv: Sequence[str] | None = None) -> None:
    opts = parse_args(argv)
    try:
        main(opts)
    except (OSError, asyncpg.PostgresError) as exc:  # no server, no CREATEDB, ...
        sys.exit(f"bench.default_path: {type(exc).__name__}: {exc}")


if __name__ == "__main__":
    run()
