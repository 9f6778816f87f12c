"""Parse benchmark: ragline's page iterator against raw PyMuPDF, side by side in one run.

    python -m bench.parse [--docs N] [--rounds R]

Needs the corpus (``tests/corpus/fetch.sh``). Measures pages per second over the corpus
for ``stages.pdf.iter_pages`` (validation, block text, filtered and deduplicated images)
and for the least work PyMuPDF can do for the same output (``page.get_text()``,
``page.get_images()`` and ``doc.extract_image()`` once per xref), in one process (the
two interleaved document by document, alternating which goes first, so load from other
processes hits both alike) and in two processes (a pool per mode, alternating). Then the
peak RSS of each parsing the 2,000-page PDF, each in a fresh subprocess.
"""

# mypy: disallow-untyped-calls=False

from __future__ import annotations

import argparse
import json
import multiprocessing
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pymupdf

from bench.harness.corpus import CORPUS_DIR, corpus_ready
from stages.pdf import iter_pages, open_pdf

ROOT = Path(__file__).resolve().parent.parent
Mode = Callable[[Path], int]


def parse_raw(path: Path) -> int:
    """Text and images with nothing but PyMuPDF calls; returns the page count."""
    doc = pymupdf.open(path)
    seen: set[int] = set()
    for number in range(doc.page_count):
        page = doc.load_page(number)
        page.get_text()
        for info in page.get_images(full=True):
            if info[0] not in seen:
                seen.add(info[0])
                doc.extract_image(info[0])
    count = int(doc.page_count)
    doc.close()
    return count


def parse_ragline(path: Path) -> int:
    doc = open_pdf(path, name=path.name)
    count = sum(1 for _ in iter_pages(doc))
    doc.close()
    return count


MODES: dict[str, Mode] = {"raw": parse_raw, "ragline": parse_ragline}


class Rates:
    """Pages, wall seconds and CPU seconds per mode."""

    def __init__(self) -> None:
        self.pages = dict.fromkeys(MODES, 0)
        self.wall_s = dict.fromkeys(MODES, 0.0)
        self.cpu_s = dict.fromkeys(MODES, 0.0)

    def per_wall_s(self, mode: str) -> float:
        return self.pages[mode] / self.wall_s[mode]

    def per_cpu_s(self, mode: str) -> float:
        return self.pages[mode] / self.cpu_s[mode]


def timed(job: tuple[str, Path]) -> tuple[int, float]:
    """Run one mode on one PDF; return its pages and the CPU seconds it took here."""
    mode, path = job
    start = time.process_time()
    pages = MODES[mode](path)
    return pages, time.process_time() - start


def alternating(i: int) -> list[str]:
    return list(MODES) if i % 2 == 0 else list(reversed(MODES))


def one_process(pdfs: list[Path], rounds: int) -> Rates:
    """Both modes interleaved document by document."""
    rates = Rates()
    for i in range(rounds * len(pdfs)):
        for mode in alternating(i):
            start = time.perf_counter()
            pages, cpu_s = timed((mode, pdfs[i % len(pdfs)]))
            rates.wall_s[mode] += time.perf_counter() - start
            rates.pages[mode] += pages
            rates.cpu_s[mode] += cpu_s
    return rates


def two_processes(pdfs: list[Path], rounds: int) -> Rates:
    """Each mode over the whole corpus on a pool of two, alternating."""
    rates = Rates()
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        pool.map(timed, [("raw", p) for p in pdfs[:2]])  # warm up: imports, fonts
        for i in range(rounds * 2):
            for mode in alternating(i):
                start = time.perf_counter()
                results = pool.map(timed, [(mode, p) for p in pdfs], chunksize=1)
                rates.wall_s[mode] += time.perf_counter() - start
                rates.pages[mode] += sum(pages for pages, _ in results)
                rates.cpu_s[mode] += sum(cpu_s for _, cpu_s in results)
    return rates


def peak_rss_now_mb() -> int:
    """This process's peak RSS so far (Linux VmHWM). Not ``ru_maxrss``: Linux carries that
    over from the parent across fork and exec, so a child of a big parent reads big."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) // 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


_RSS_PROBE = """
import json, sys
from pathlib import Path
from bench.parse import MODES, peak_rss_now_mb
pages = MODES[sys.argv[1]](Path(sys.argv[2]))
print(json.dumps([pages, peak_rss_now_mb()]))
"""


def peak_rss_mb(mode: str, path: Path) -> tuple[int, int]:
    out = subprocess.run(
        [sys.executable, "-c", _RSS_PROBE, mode, str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    pages, rss = json.loads(out.stdout)
    return int(pages), int(rss)


def baseline_rss_mb() -> int:
    code = "from bench.parse import peak_rss_now_mb; print(peak_rss_now_mb())"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    return int(out.stdout)


def report(title: str, rates: Rates) -> None:
    raw, ours = "raw", "ragline"
    print(
        f"{title:<12} wall: raw {rates.per_wall_s(raw):5.0f}  ragline {rates.per_wall_s(ours):5.0f}"
        f" pages/s  ratio {rates.per_wall_s(ours) / rates.per_wall_s(raw):.2f}   "
        f"CPU: raw {rates.per_cpu_s(raw):5.0f}  ragline {rates.per_cpu_s(ours):5.0f}"
        f" pages/cpu-s  ratio {rates.per_cpu_s(ours) / rates.per_cpu_s(raw):.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--docs", type=int, default=0, help="use the first N PDFs (0: all)")
    parser.add_argument("--rounds", type=int, default=1, help="passes over the corpus per mode")
    args = parser.parse_args()
    if not corpus_ready():
        raise SystemExit("corpus not fetched: run tests/corpus/fetch.sh")
    pdfs = sorted((CORPUS_DIR / "pdfs").glob("*.pdf"))
    pdfs = pdfs[: args.docs] if args.docs else pdfs
    total = sum(pymupdf.open(p).page_count for p in pdfs)
    size_mb = sum(p.stat().st_size for p in pdfs) / 2**20
    print(f"corpus: {len(pdfs)} PDFs, {total} pages, {size_mb:.0f} MB")
    report("1 process", one_process(pdfs, args.rounds))
    report("2 processes", two_processes(pdfs, args.rounds))
    big = CORPUS_DIR / "big" / "big-2000.pdf"
    print(f"peak RSS, {big.name} (PyMuPDF + stages.pdf imported: {baseline_rss_mb()} MB)")
    for mode in MODES:
        pages, rss = peak_rss_mb(mode, big)
        print(f"  {mode:<8} {pages} pages, peak RSS {rss} MB")


if __name__ == "__main__":
    main()
