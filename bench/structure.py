"""Structure benchmark: how well a PDF's chunks keep its tables and say where they sit.

    python -m bench.structure [--docs N] [--pages P]

On PDFs made at run time (:mod:`bench.harness.made_pdfs`: ruled tables with a merged
cell, one over two pages, one longer than a chunk) and on the corpus's first ``--docs``
manuals (their first ``--pages`` pages each, when fetched), it prints:

1. **Header share**: of the table chunks, the share that start with their table's
   header row and its rule (floor: 100%).
2. **Grounding precision**: of a chunk's words that MuPDF places on its pages, the share
   whose middle lies inside one of the chunk's boxes (floor: 0.95), over the made PDFs
   and the corpus sample.
3. **Table cells**: cell-level precision, recall and F1 of the made tables' cells
   against what they say, for ragline, PyMuPDF's ``find_tables``, pymupdf4llm (its
   Markdown tables; the whole page's Markdown is timed, as a user gets it) and
   pdfplumber (the last two when installed: ``pip install -e '.[bench]'``), with each
   one's CPU ms a table page (each run once on the file before it is timed: imports and
   models loaded). A row is matched to the truth's row by its first cell, a
   cell by its column; texts compared without spaces (``find_tables`` drops them).

Exits 1 when a floor is missed.
"""

# mypy: disallow-untyped-calls=False

from __future__ import annotations

import re
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pymupdf

from bench.args import bench_parser
from bench.harness.corpus import CORPUS_DIR, corpus_ready
from bench.harness.made_pdfs import MadeTable, outline_pdf, tables_pdf, two_column_pdf
from stages.db.checkpoints import Page
from stages.parsing.formats.pdf import iter_pages, open_pdf
from stages.text.chunking import ChunkConfig
from stages.text.structure import StructuredChunk, structured_chunks

HEADER_FLOOR = 1.0
GROUNDING_FLOOR = 0.95
#: Chunk size of the made tables' run: the long table (60 rows) takes several pieces.
TABLE_CHUNK = ChunkConfig(max_tokens=600, overlap_tokens=0)
_SPACE = re.compile(r"\s+")

Rows = list[list[str]]


def pages_of(path: Path, first: int = 0) -> list[Page]:
    doc = open_pdf(path, name=path.name)
    try:
        out = []
        for text, _ in iter_pages(doc, layout=True):
            out.append(Page(text.page, text.text, None, text.layout))
            if first and len(out) >= first:
                break
        return out
    finally:
        doc.close()


def header_share(chunks: list[StructuredChunk], truth: dict[str, MadeTable]) -> tuple[int, int]:
    """(table chunks starting with their header row and rule, table chunks)."""
    headers = {_row(t.header) for t in truth.values()}
    pieces = [c for c in chunks if c.table]
    good = 0
    for piece in pieces:
        lines = piece.text.split("\n")
        good += len(lines) > 1 and lines[0] in headers and set(lines[1]) <= set("|- ")
    return good, len(pieces)


def _row(cells: Sequence[str | None]) -> str:
    return "| " + " | ".join(c or "" for c in cells) + " |"


def grounding(path: Path, chunks: list[StructuredChunk]) -> tuple[int, int]:
    """(words inside the chunk's boxes, words of the chunk MuPDF places on its pages)."""
    doc = pymupdf.open(path)
    words: dict[int, dict[str, list[tuple[float, float]]]] = {}
    inside = placed = 0
    for chunk in chunks:
        boxes = [chunk.boxes[i : i + 5] for i in range(0, len(chunk.boxes), 5)]
        for word in chunk.text.split():
            where = [
                (page, xy)
                for page in range(chunk.page_start, chunk.page_end + 1)
                for xy in _words(doc, page, words).get(word, [])
            ]
            if not where:
                continue  # a Markdown rule, or a word MuPDF splits otherwise
            placed += 1
            inside += any(
                b[0] == page and b[1] <= x <= b[3] and b[2] <= y <= b[4]
                for page, (x, y) in where
                for b in boxes
            )
    doc.close()
    return inside, placed


def _words(
    doc: pymupdf.Document, page: int, cache: dict[int, dict[str, list[tuple[float, float]]]]
) -> dict[str, list[tuple[float, float]]]:
    if page not in cache:
        found: dict[str, list[tuple[float, float]]] = {}
        for w in doc[page - 1].get_text("words"):
            found.setdefault(w[4], []).append(((w[0] + w[2]) / 2, (w[1] + w[3]) / 2))
        cache[page] = found
    return cache[page]


# -- table cells -----------------------------------------------------------------------------


def _norm(text: str | None) -> str:
    return _SPACE.sub("", text or "")


def cell_scores(predicted: Rows, truth: Rows) -> tuple[int, int, int]:
    """(cells right, cells predicted, cells true), non-empty ones only; a row printed
    twice (a header repeated on a table's next page) counts once."""
    predicted, truth = _distinct(predicted), _distinct(truth)
    by_key = {_norm(r[0]): [_norm(c) for c in r] for r in truth if r}
    right = sum(
        1
        for row in predicted
        if row and _norm(row[0]) in by_key
        for i, cell in enumerate(row)
        if _norm(cell)
        and i < len(by_key[_norm(row[0])])
        and by_key[_norm(row[0])][i] == _norm(cell)
    )
    made = sum(1 for row in predicted for c in row if _norm(c))
    true = sum(1 for row in truth for c in row if _norm(c))
    return right, made, true


def _distinct(rows: Rows) -> Rows:
    return [list(r) for r in dict.fromkeys(tuple(_norm(c) for c in r) for r in rows)]


def truth_rows(truth: dict[str, MadeTable]) -> Rows:
    rows: Rows = []
    for t in truth.values():
        rows.append(list(t.header))
        rows += [[c or "" for c in r] for r in t.rows]
    return rows


def ragline_rows(path: Path) -> Rows:
    rows: Rows = []
    for page in pages_of(path):
        assert page.layout is not None
        for b in page.layout.blocks:
            if b.kind:
                line = page.text[b.start : b.end].split("\n")[0]
                rows.append([c.strip() for c in line.strip().strip("|").split(" | ")])
    return rows


def find_tables_rows(path: Path) -> Rows:
    rows: Rows = []
    with pymupdf.open(path) as doc:
        for number in range(doc.page_count):
            for table in doc[number].find_tables().tables:
                rows += [[c or "" for c in r] for r in table.extract()]
    return rows


def pymupdf4llm_rows(path: Path) -> Rows | None:
    """The rows of the Markdown tables pymupdf4llm writes for the file."""
    try:
        import pymupdf4llm  # type: ignore[import-untyped, import-not-found, unused-ignore]
    except ImportError:
        return None
    markdown = str(pymupdf4llm.to_markdown(str(path), show_progress=False))
    rows: Rows = []
    for line in markdown.splitlines():
        line = line.strip()
        if not line.startswith("|") or set(line) <= set("|-: "):
            continue
        cells = line.strip("|").split("|")
        # Its bold (a header's cells) is Markdown emphasis, not the cell's text.
        rows.append([c.replace("<br>", " ").replace("**", "").strip() for c in cells])
    return rows


def pdfplumber_rows(path: Path) -> Rows | None:
    try:
        import pdfplumber  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        return None
    rows: Rows = []
    with pdfplumber.open(path) as pdf:
        for page in pdf.pages:
            for table in page.extract_tables():
                rows += [[c or "" for c in r] for r in table]
    return rows


def _timed(read: Callable[[Path], Rows | None], path: Path) -> tuple[Rows | None, float]:
    start = time.process_time()
    rows = read(path)
    return rows, time.process_time() - start


def _f1(right: int, made: int, true: int) -> str:
    p = right / made if made else 0.0
    r = right / true if true else 0.0
    f = 2 * p * r / (p + r) if p + r else 0.0
    return f"precision {p:.3f}, recall {r:.3f}, F1 {f:.3f}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = bench_parser("bench.structure", __doc__)
    parser.add_argument("--docs", type=int, default=8, help="corpus manuals (0: none)")
    parser.add_argument("--pages", type=int, default=40, help="first pages of each")
    args = parser.parse_args(argv)
    ok = True
    with tempfile.TemporaryDirectory(prefix="ragline-structure-") as tmp:
        made, truth = tables_pdf(Path(tmp) / "tables.pdf")
        chunks = structured_chunks(pages_of(made), TABLE_CHUNK)
        good, pieces = header_share(chunks, truth)
        share = good / pieces if pieces else 0.0
        ok &= share >= HEADER_FLOOR
        print(f"header share: {good} of {pieces} table pieces ({share:.1%}; floor 100%)")
        sources = [made, outline_pdf(Path(tmp) / "o.pdf"), two_column_pdf(Path(tmp) / "c.pdf")]
        inside = placed = 0
        for path in sources:
            i, p = grounding(path, structured_chunks(pages_of(path), TABLE_CHUNK))
            inside, placed = inside + i, placed + p
        print(f"grounding, made PDFs: {inside / placed:.4f} of {placed} words")
        inside, placed = _corpus_grounding(args.docs, args.pages, inside, placed)
        precision = inside / placed if placed else 0.0
        ok &= precision >= GROUNDING_FLOOR
        print(f"grounding precision: {precision:.4f} of {placed} words (floor {GROUNDING_FLOOR})")
        _cells(made, truth)
    return 0 if ok else 1


def _corpus_grounding(docs: int, pages: int, inside: int, placed: int) -> tuple[int, int]:
    if not docs or not corpus_ready():
        print("grounding, corpus: skipped (tests/corpus/fetch.sh not run, or --docs 0)")
        return inside, placed
    paths = sorted((CORPUS_DIR / "pdfs").glob("*.pdf"))
    step = max(len(paths) // docs, 1)
    sample_in = sample_placed = 0
    for path in paths[::step][:docs]:
        i, p = grounding(path, structured_chunks(pages_of(path, pages)))
        sample_in, sample_placed = sample_in + i, sample_placed + p
    share = sample_in / sample_placed if sample_placed else 0.0
    sample = f"{docs} manuals, {pages} pages each"
    print(f"grounding, corpus ({sample}): {share:.4f} of {sample_placed} words")
    return inside + sample_in, placed + sample_placed


def _cells(made: Path, truth: dict[str, MadeTable]) -> None:
    expected = truth_rows(truth)
    table_pages = len({p for t in truth.values() for p in t.pages})
    for name, read in (
        ("ragline", ragline_rows),
        ("pymupdf find_tables", find_tables_rows),
        ("pymupdf4llm", pymupdf4llm_rows),
        ("pdfplumber", pdfplumber_rows),
    ):
        read(made)  # warm: imports, models
        rows, cpu_s = _timed(read, made)
        if rows is None:
            print(f"table cells, {name}: not installed")
            continue
        scores = _f1(*cell_scores(rows, expected))
        print(f"table cells, {name}: {scores}; {cpu_s * 1000 / table_pages:.1f} ms CPU a page")


if __name__ == "__main__":
    sys.exit(main())
