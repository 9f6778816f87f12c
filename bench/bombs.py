"""Format bombs against the parser process: its peak RSS and CPU time on each; and the
chunker on the largest text the parser lets through.

    python -m bench.bombs [--kinds docx,epub,...] [--scale 1.0] [--baseline /tmp/base]
                          [--no-chunk]

Makes each bomb at run time (``bench.harness.bombs.BOMBS``, in a temporary directory): a
DOCX whose ``document.xml`` is 900 MB of one-letter paragraphs (~3 MB zipped), an EPUB
whose chapter and an XPS whose page are 200 MB of the same, the largest of each the
parser's part caps let through (``-max``), an EPUB chapter of 4 MB of tiny paragraphs
(``epub-slow``), an HTML page of 100,000 nested ``<div>``s, a 500 MB text file on one
line, and a 50,000 x 50,000 px PNG. ``--scale`` multiplies the sizes (not the PNG's).

Each is read by a fresh parser process (:class:`stages.parsing.process.ParserProcess`,
the one a worker starts) with the request the parse stage makes
(:func:`stages.pipeline.parse.parse_request`) from the settings in the environment (so
``RAGLINE_PARSE_MEMORY_MB``, ``RAGLINE_PARSE_CPU_S`` and ``RAGLINE_PARSE_MAX_CHARS``
apply). With ``--baseline TREE`` the same file is then read by that tree's parser too
(``TREE/.venv/bin/python -m stages.parsing.child``, run in ``TREE``; an older parser
ignores the limits it does not know), its row under this tree's. A thread reads the
parser's ``/proc/PID/status`` and ``stat`` every 20 ms (:class:`~bench.harness.bombs.
PeakWatch`): peak RSS is its ``VmHWM`` (start-up included), CPU its user + system time
since it was ready. For the machine's sake a parser above ``--ceiling-mb`` (4096) of RSS
or ``--ceiling-s`` (150) of CPU is killed and the row says so. Floors (this tree's rows):
no bomb over 1,024 MB of peak RSS nor 120 s of CPU (the limit is on CPU time; wall time
is shown, and grows with the machine's load), and each outcome one line.

Then (unless ``--no-chunk``) a one-line text of 49 million characters, just under the
default character limit, is read and chunked in a child of each tree
(:func:`~bench.harness.bombs.chunk_in_child`) with the local model's and Cohere's token
counters: how far its RSS grows. Floor: 512 MB.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec

from bench.args import bench_parser
from bench.harness.bombs import BOMBS, TEXT_MAX_MB, PeakWatch, chunk_in_child, one_line_text
from bench.report import heading, row, verdict
from stages.parsing.formats.unit import Unit
from stages.parsing.process import CHILD_COMMAND, ParserProcess
from stages.parsing.wire import ParseRequest
from stages.pipeline.parse import parse_request
from stages.settings import PipelineSettings

PEAK_FLOOR_MB = 1024
TIME_FLOOR_S = 120.0
#: How far reading and chunking the largest text let through may grow a process.
CHUNK_FLOOR_MB = 512
_WIDTHS = (8, 4, 9, 8, 8, 7, 11)
_CHUNK_WIDTHS = (8, 4, 9, 9, 8, 8, 11)


class Result(msgspec.Struct, frozen=True):
    kind: str
    tree: str
    file_mb: float
    peak_mb: float
    cpu_s: float
    wall_s: float
    outcome: str

    @property
    def ok(self) -> bool:
        return (
            self.peak_mb <= PEAK_FLOOR_MB
            and self.cpu_s <= TIME_FLOOR_S
            and "\n" not in self.outcome
            and not self.outcome.startswith("stopped")
        )


def measure(
    request: ParseRequest, parser: ParserProcess, ceilings: tuple[float, float]
) -> tuple[float, float, float, str]:
    """Peak RSS (MB), CPU and wall seconds of ``parser`` reading the request, and how it
    ended (one line, unless a parser said more)."""
    parser.wait_ready()
    assert parser.pid is not None
    watch = PeakWatch(parser.pid, *ceilings)
    units = chars = 0

    def take(unit: Unit) -> None:
        nonlocal units, chars
        units, chars = units + 1, chars + len(unit.text)

    started = time.monotonic()
    try:
        parser.parse(request, take)
        outcome = f"read: {units} sections/pages, {chars / 1e6:.1f} M characters"
    except Exception as exc:
        outcome = f"{type(exc).__name__}: {exc}"
    wall = time.monotonic() - started
    watch.stop()
    parser.close()
    return watch.peak_mb, watch.cpu_s, wall, watch.stopped or outcome


def run_kind(
    kind: str, folder: Path, scale: float, ceilings: tuple[float, float], baseline: Path | None
) -> list[Result]:
    bomb = BOMBS[kind]
    path = bomb.make(folder, scale)
    size = path.stat().st_size / 2**20
    settings = PipelineSettings.from_env(os.environ)
    request = parse_request(path, path.name, bomb.media_type, settings)
    trees: list[tuple[str, ParserProcess]] = [("this", ParserProcess())]
    if baseline is not None:
        command = (str(baseline / ".venv" / "bin" / "python"), *CHILD_COMMAND[1:])
        trees.append(("base", ParserProcess(command, cwd=str(baseline))))
    results = []
    for tree, parser in trees:
        peak, cpu, wall, outcome = measure(request, parser, ceilings)
        results.append(Result(kind, tree, size, peak, cpu, wall, outcome))
    path.unlink()
    return results


class ChunkResult(msgspec.Struct, frozen=True):
    counter: str
    tree: str
    file_mb: float
    grown_mb: float
    cpu_s: float
    outcome: str

    @property
    def ok(self) -> bool:
        return self.grown_mb <= CHUNK_FLOOR_MB and not self.outcome.startswith("stopped")


def run_chunker(
    folder: Path, scale: float, ceiling_mb: float, baseline: Path | None
) -> list[ChunkResult]:
    """The largest one-line text the default character limit lets through, read and
    chunked in a child of each tree with each token counter."""
    path = one_line_text(folder / "one-line-max.txt", TEXT_MAX_MB * scale)
    size = path.stat().st_size / 2**20
    results = []
    for counter in ("local", "cohere"):
        trees: list[tuple[str, dict[str, Any]]] = [("this", {})]
        if baseline is not None:
            python = str(baseline / ".venv" / "bin" / "python")
            trees.append(("base", {"python": python, "cwd": baseline}))
        for tree, where in trees:
            seen = chunk_in_child(path, counter, ceiling_mb=ceiling_mb, **where)
            outcome = seen.stopped or f"{seen.pages} pages, {seen.chunks} chunks"
            results.append(ChunkResult(counter, tree, size, seen.grown_mb, seen.cpu_s, outcome))
    path.unlink()
    return results


def report_chunks(results: Sequence[ChunkResult]) -> bool:
    heading(
        "reading and chunking the largest one-line text let through "
        f"(floor: RSS grows <= {CHUNK_FLOOR_MB} MB)"
    )
    row("counter", "tree", "file MB", "grown MB", "CPU s", "", "floors", widths=_CHUNK_WIDTHS)
    good = True
    for r in results:
        floors = verdict(r.ok) if r.tree == "this" else "-"
        good = good and (r.ok or r.tree != "this")
        cells = (r.counter, r.tree, f"{r.file_mb:.1f}", f"{r.grown_mb:.0f}", f"{r.cpu_s:.1f}")
        row(*cells, "", floors, widths=_CHUNK_WIDTHS)
        print(f"        {r.outcome}", flush=True)
    return good


def report(results: Sequence[Result]) -> bool:
    heading(f"the parser process on each bomb (floors: peak <= {PEAK_FLOOR_MB} MB, <= 120 s)")
    row("bomb", "tree", "file MB", "peak MB", "CPU s", "wall s", "floors", widths=_WIDTHS)
    good = True
    for r in results:
        floors = verdict(r.ok) if r.tree == "this" else "-"
        good = good and (r.ok or r.tree != "this")
        cells = (r.kind, r.tree, f"{r.file_mb:.1f}", f"{r.peak_mb:.0f}", f"{r.cpu_s:.1f}")
        row(*cells, f"{r.wall_s:.1f}", floors, widths=_WIDTHS)
        print(f"        {r.outcome}", flush=True)
    return good


def main(argv: Sequence[str] | None = None) -> int:
    parser = bench_parser("bench.bombs", __doc__)
    parser.add_argument("--kinds", default=",".join(BOMBS), help="bombs to run, comma-separated")
    parser.add_argument("--scale", type=float, default=1.0, help="size factor (1.0: full size)")
    parser.add_argument("--ceiling-mb", type=float, default=4096, help="kill a parser above")
    parser.add_argument("--ceiling-s", type=float, default=150, help="kill a parser above")
    parser.add_argument(
        "--baseline", type=Path, help="another tree (with its .venv) to read each bomb too"
    )
    parser.add_argument(
        "--no-chunk", dest="chunk", action="store_false", help="skip the chunker's section"
    )
    args = parser.parse_args(argv)
    kinds = [k for k in args.kinds.split(",") if k]
    unknown = sorted(set(kinds) - set(BOMBS))
    if unknown:
        parser.error(f"unknown bombs: {', '.join(unknown)} (known: {', '.join(BOMBS)})")
    if args.baseline is not None and not (args.baseline / ".venv" / "bin" / "python").exists():
        parser.error(f"--baseline {args.baseline}: no .venv/bin/python there")
    print(f"bench.bombs: {os.cpu_count()} CPUs, scale {args.scale}", flush=True)
    ceilings = (args.ceiling_mb, args.ceiling_s)
    results: list[Result] = []
    chunked: list[ChunkResult] = []
    with tempfile.TemporaryDirectory(prefix="ragline-bombs-") as folder:
        for kind in kinds:
            results += run_kind(kind, Path(folder), args.scale, ceilings, args.baseline)
        if args.chunk:
            chunked = run_chunker(Path(folder), args.scale, args.ceiling_mb, args.baseline)
    good = report(results)
    good = report_chunks(chunked) and good if chunked else good
    return 0 if good else 1


if __name__ == "__main__":
    raise SystemExit(main())
