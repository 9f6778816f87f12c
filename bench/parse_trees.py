"""Parse CPU per page of several source trees side by side, in one run.

    python -m bench.parse_trees TREE [TREE ...] [--docs N] [--rounds R]

Each TREE (a checkout or an exported commit) gets a worker process that imports
``stages`` from it (this venv's packages, its own code) and reads corpus PDFs with
``iter_pages(layout=True)`` as ``bench.parse``'s ``pages`` mode does. The documents go to
the workers one at a time, in turn, the order rotated each document, so load from other
processes on the machine falls on every tree alike. Prints each tree's CPU ms a page
(``time.process_time`` of its worker) and its ratio to the first tree's.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from bench.args import bench_parser
from bench.harness.corpus import CORPUS_DIR, corpus_ready

#: The worker: drops this venv's editable finder (which would import this tree's
#: ``stages``), imports the tree's, then times each path it is sent.
_WORKER = """
import inspect, json, sys, time
tree = sys.argv[1]
sys.meta_path = [f for f in sys.meta_path if "editable" not in repr(f)]
sys.path.insert(0, tree)
from stages.parsing.formats import pdf
assert pdf.__file__.startswith(tree), pdf.__file__
kwargs = {"trim_cache_every_pages": 200}
if "layout" in inspect.signature(pdf.iter_pages).parameters:
    kwargs["layout"] = True
print(json.dumps(pdf.__file__), flush=True)
for line in sys.stdin:
    path = line.strip()
    start = time.process_time()
    doc = pdf.open_pdf(path, name=path)
    pages = sum(1 for _ in pdf.iter_pages(doc, **kwargs))
    doc.close()
    print(json.dumps([time.process_time() - start, pages]), flush=True)
"""


class _Worker:
    def __init__(self, tree: Path) -> None:
        self.tree = tree
        self.process = subprocess.Popen(
            [sys.executable, "-c", _WORKER, str(tree.resolve())],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        self.module = json.loads(self.process.stdout.readline())
        self.cpu_s = 0.0
        self.pages = 0

    def parse(self, path: Path) -> None:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(f"{path}\n")
        self.process.stdin.flush()
        cpu_s, pages = json.loads(self.process.stdout.readline())
        self.cpu_s += cpu_s
        self.pages += pages

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait()


def main(argv: Sequence[str] | None = None) -> int:
    parser = bench_parser("bench.parse_trees", __doc__)
    parser.add_argument("trees", nargs="+", type=Path, help="source trees; the first is the base")
    parser.add_argument("--docs", type=int, default=0, help="the first N corpus PDFs (0: all)")
    parser.add_argument("--rounds", type=int, default=1, help="passes over the corpus")
    args = parser.parse_args(argv)
    if not corpus_ready():
        raise SystemExit("corpus not fetched: run tests/corpus/fetch.sh")
    paths = sorted((CORPUS_DIR / "pdfs").glob("*.pdf"))
    paths = paths[: args.docs] if args.docs else paths
    workers = [_Worker(tree) for tree in args.trees]
    try:
        turn = 0
        for _ in range(args.rounds):
            for path in paths:
                for k in range(len(workers)):
                    workers[(turn + k) % len(workers)].parse(path)
                turn += 1
    finally:
        for worker in workers:
            worker.close()
    base = workers[0].cpu_s / max(workers[0].pages, 1)
    for worker in workers:
        per_page = worker.cpu_s / max(worker.pages, 1)
        print(
            f"{worker.tree}: {per_page * 1000:.3f} ms CPU a page over {worker.pages} pages "
            f"({per_page / base:.2f}x the first)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
