"""Parse benchmark: the parse stage's CPU per page next to raw PyMuPDF's, and its memory.

    python -m bench.parse [--docs N] [--rounds R] [--no-memory]

Needs the corpus (``tests/corpus/fetch.sh``). Three modes over the same corpus PDFs:

- ``raw``: bench.ingest's raw side (``page.get_text()``, then ``doc.extract_image()`` of
  every image on every page), the floor ragline is compared with end to end;
- ``pages``: :func:`stages.parsing.formats.pdf.iter_pages` (validation, block text, images filtered,
  deduplicated and converted), as the stage calls it;
- ``stage``: the parse stage's own work (``ParseStage._parse`` in its worker thread: the
  pages, each image stored in a directory asset store through the event loop, the
  output built). Not included: reading the job's row and writing the page rows.

1. CPU ms per page (``time.process_time``: every thread of the process) of each mode,
   interleaved document by document in one process, the order rotated each document so
   load from other processes hits all alike; then pages per wall second of raw and stage,
   each on a pool of two processes.
2. Memory: each mode over the same PDFs in a fresh process (with the worker's malloc
   settings): peak RSS (VmHWM) and RSS after the last document (what a long-running
   worker keeps), then the same on the 2,000-page PDF.
"""

# mypy: disallow-untyped-calls=False

from __future__ import annotations

import atexit
import functools
import json
import multiprocessing
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import anyio
import anyio.to_thread
import pymupdf

from bench.args import bench_parser
from bench.harness.corpus import CORPUS_DIR, corpus_ready
from bench.harness.proccpu import process_cpu_s
from runtime.models import Job
from stages.actions.submit import PDF
from stages.parsing.formats.pdf import iter_pages, open_pdf
from stages.pipeline.parse import ParseOutput, ParseStage
from stages.services import Services

ROOT = Path(__file__).resolve().parent.parent
Mode = Callable[[Path], int]


def parse_raw(path: Path) -> int:
    """bench.ingest's ``extract``: text and every image on every page; returns pages."""
    doc = pymupdf.open(path)
    for number in range(doc.page_count):
        page = doc.load_page(number)
        page.get_text()
        for info in page.get_images(full=True):
            doc.extract_image(info[0])
    count = int(doc.page_count)
    doc.close()
    return count


def parse_pages(path: Path) -> int:
    doc = open_pdf(path, name=path.name)
    count = sum(1 for _ in iter_pages(doc, trim_cache_every_pages=200, layout=True))
    doc.close()
    return count


@functools.cache
def _stage() -> ParseStage:
    """A ParseStage over a directory asset store (under a temporary directory)."""
    tmp = Path(tempfile.mkdtemp(prefix="bench-parse-"))
    atexit.register(shutil.rmtree, tmp, ignore_errors=True)
    stage = ParseStage(Services({}, tmp))
    # Its parser process up (PyMuPDF imported: it says Ready) before anything is timed.
    stage.services.parser.wait_ready()
    return stage


def parse_stage(path: Path) -> int:
    """The stage's thread work on one PDF, in an event loop of its own (a few ms more
    than in a worker, whose loop is running already); the reading itself runs in the
    stage's parser process, whose CPU :func:`timed` adds."""
    now = datetime.now(UTC)
    job = Job(
        id=1, document_id=uuid.uuid4(), stage="parse", generation=1, attempts=1,
        max_attempts=3, lease_token=uuid.uuid4(), lease_expires_at=now, created_at=now,
    )  # fmt: skip
    stage = _stage()
    request = stage._request(path, path.name, PDF)
    work = functools.partial(stage._parse, job, request)
    # The task's result is the page count, not the output: asyncio.run (Python 3.11)
    # formats the main task's repr, its whole result included, while it restores the
    # SIGINT handler; on the output with its pages' layouts that took ~0.3 ms a page of
    # this process's CPU that no worker spends (its loop never ends per document).
    return anyio.run(_pages_of, work)


async def _pages_of(work: Callable[[], ParseOutput]) -> int:
    return len((await anyio.to_thread.run_sync(work)).pages)


def _parser_cpu() -> float:
    """CPU seconds of this process's parser process so far (started and ready first)."""
    pid = _stage().services.parser.pid
    assert pid is not None
    return process_cpu_s(pid)


def _cpu(mode: str) -> float:
    """CPU seconds spent so far on ``mode``'s work: this process's, and its parser's."""
    return time.process_time() + (_parser_cpu() if mode == "stage" else 0.0)


MODES: dict[str, Mode] = {"raw": parse_raw, "pages": parse_pages, "stage": parse_stage}


def timed(job: tuple[str, Path]) -> tuple[int, float]:
    """Run one mode on one PDF; return its pages and the CPU seconds it took (its parser's
    included)."""
    mode, path = job
    start = _cpu(mode)
    pages = MODES[mode](path)
    return pages, _cpu(mode) - start


def cpu_per_page(pdfs: list[Path], rounds: int) -> dict[str, float]:
    """CPU ms per page of each mode, interleaved document by document."""
    pages = dict.fromkeys(MODES, 0)
    cpu_s = dict.fromkeys(MODES, 0.0)
    names = list(MODES)
    for i in range(rounds * len(pdfs)):
        for mode in names[i % 3 :] + names[: i % 3]:
            n, seconds = timed((mode, pdfs[i % len(pdfs)]))
            pages[mode] += n
            cpu_s[mode] += seconds
    return {mode: cpu_s[mode] / pages[mode] * 1e3 for mode in MODES}


def two_processes(pdfs: list[Path], rounds: int) -> dict[str, float]:
    """Pages per wall second of raw and stage, each over the corpus on a pool of two."""
    pages = {"raw": 0, "stage": 0}
    wall_s = {"raw": 0.0, "stage": 0.0}
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        pool.map(timed, [("stage", p) for p in pdfs[:2]])  # warm up: imports, fonts
        for i in range(rounds * 2):
            for mode in ("raw", "stage") if i % 2 == 0 else ("stage", "raw"):
                start = time.perf_counter()
                results = pool.map(timed, [(mode, p) for p in pdfs], chunksize=1)
                wall_s[mode] += time.perf_counter() - start
                pages[mode] += sum(n for n, _ in results)
    return {mode: pages[mode] / wall_s[mode] for mode in pages}


_RSS_PROBE = """
import json, sys
from pathlib import Path
from runtime.process.heap import limit_malloc_arenas
limit_malloc_arenas()
from bench.parse import MODES, rss_mb
before = rss_mb("VmRSS")
pages = sum(MODES[sys.argv[1]](Path(p)) for p in sys.argv[2:])
print(json.dumps([pages, before, rss_mb("VmHWM"), rss_mb("VmRSS")]))
"""


def rss_mb(field: str) -> int:
    """This process's RSS (``VmRSS``) or peak RSS (``VmHWM``) now. Not ``ru_maxrss``:
    Linux carries that over from the parent across fork and exec."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) // 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def memory(mode: str, pdfs: list[Path]) -> tuple[int, int, int, int]:
    """(pages, RSS before the first PDF, peak RSS, RSS after the last) in a fresh process."""
    cmd = [sys.executable, "-c", _RSS_PROBE, mode, *map(str, pdfs)]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True)
    pages, before, peak, after = json.loads(out.stdout)
    return int(pages), int(before), int(peak), int(after)


def report_memory(title: str, pdfs: list[Path]) -> None:
    print(f"memory, {title} (MB; imports included):")
    for mode in MODES:
        pages, before, peak, after = memory(mode, pdfs)
        print(f"  {mode:<6} {pages:6d} pages: before {before}, peak {peak}, after {after}")


def main() -> None:
    parser = bench_parser("bench.parse", __doc__)
    parser.add_argument("--docs", type=int, default=0, help="the first N corpus PDFs (0: all)")
    parser.add_argument("--rounds", type=int, default=1, help="passes over the corpus")
    parser.add_argument("--no-memory", action="store_true", help="skip the memory section")
    args = parser.parse_args()
    if not corpus_ready():
        raise SystemExit("corpus not fetched: run tests/corpus/fetch.sh")
    pdfs = sorted((CORPUS_DIR / "pdfs").glob("*.pdf"))
    pdfs = pdfs[: args.docs] if args.docs else pdfs
    size_mb = sum(p.stat().st_size for p in pdfs) / 2**20
    print(f"corpus: {len(pdfs)} PDFs, {size_mb:.0f} MB")
    ms = cpu_per_page(pdfs, args.rounds)
    print(
        "CPU ms per page, 1 process: "
        + ", ".join(f"{mode} {ms[mode]:.3f}" for mode in MODES)
        + f"; pages per CPU second, stage / raw {ms['raw'] / ms['stage']:.2f}"
    )
    rates = two_processes(pdfs, args.rounds)
    print(
        f"pages per wall second, 2 processes: raw {rates['raw']:.0f}, stage "
        f"{rates['stage']:.0f}; stage / raw {rates['stage'] / rates['raw']:.2f}"
    )
    if not args.no_memory:
        report_memory(f"{len(pdfs)} corpus PDFs in one process", pdfs)
        report_memory("the 2,000-page PDF", [CORPUS_DIR / "big" / "big-2000.pdf"])


if __name__ == "__main__":
    main()
