"""Retrieval quality: ragline's search modes against probes built from the corpus, beside
Haystack's hybrid on the same chunks and the same vectors.

``python -m bench.retrieval [--docs 15] [--per-kind 12]`` ingests the first N manuals of
:data:`MANUALS` and the made PDFs of :mod:`bench.harness.made_pdfs` (a manual with an
outline, one with tables; ``--no-made`` leaves them out) with the default settings
(local embedder, embedded index, OCR vision) into a throwaway database
(``ragline_bench_<random>`` on ``DATABASE_URL``, else the local server) and a temporary
data dir, then builds probes without a model (:mod:`bench.harness.retrieval_probes`:
outline titles, rare identifiers, verbatim sentences, words asked in a section, table
rows asked by row and column) and adds the questions of ``bench/data/paraphrased.jsonl``
(written for known pages of these manuals). Every probe is searched with ``dense``,
``keyword`` and ``hybrid`` (``stages.actions.evaluate``, as ``ragline eval`` does), and
with Haystack's hybrid (:mod:`bench.harness.retrieval_peer`; ``pip install
'haystack-ai>=2.31'``, left out with one line when absent); two keyword engines the
project did not choose are judged on the same probes, keyword side only: PostgreSQL
full-text search and qdrant-edge's BM25 text index (code tokenizer, CJK spelled out).
Prints recall@5 and MRR@10 per probe kind and mode, the floors of issue 34, and search
latency per mode (one client, query embedding included). ``--database-url URL
--data-dir DIR`` reuse a database instead (ingest skips what is in). Figures are printed,
never asserted.
"""

# mypy: disallow-untyped-calls=False

from __future__ import annotations

import contextlib
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import anyio
import msgspec
import pymupdf

from bench.args import bench_parser
from bench.database import bench_database, server_dsn
from bench.harness import retrieval_peer
from bench.harness.cli import Cli, cli_env
from bench.harness.corpus import CORPUS_DIR, corpus_ready
from bench.harness.made_pdfs import outline_pdf, tables_pdf
from bench.harness.retrieval_peer import (
    HaystackHybrid,
    PeerChunk,
    PostgresFullText,
    QdrantTextIndex,
)
from bench.harness.retrieval_probes import (
    ChunkText,
    Corpus,
    Page,
    Probe,
    identifier_probes,
    section_probes,
    table_probes,
    title_probes,
    verbatim_probes,
)
from bench.report import banner, heading, percentile, verdict
from runtime.api import BuildContext, Pool, open_pool
from stages.actions.evaluate import (
    ALL,
    Evaluation,
    Judged,
    Qrel,
    Scores,
    Target,
    by_kind,
    evaluate,
    judged,
    parse_qrels,
    resolve,
)
from stages.actions.search import Mode
from stages.db.checkpoints import chunk_vectors
from stages.db.model_switch import live
from stages.services import Services, services_for

#: Corpus manuals, one per subject (R, Octave, Asymptote, AMC, GM-Assistant, LaTeX
#: packages), each with an outline; ``--docs N`` takes the first N.
MANUALS = (
    "r-doc-pdf__R-intro.pdf",
    "r-doc-pdf__R-admin.pdf",
    "r-doc-pdf__R-data.pdf",
    "r-doc-pdf__R-FAQ.pdf",
    "octave-doc__liboctave.pdf",
    "asymptote-doc__asymptote.pdf",
    "auto-multiple-choice-doc-pdf__auto-multiple-choice.en.pdf",
    "gm-assistant-doc__userguide_en.pdf",
    "texlive-latex-recommended-doc__etoolbox.pdf",
    "texlive-latex-recommended-doc__xcolor.pdf",
    "texlive-latex-recommended-doc__listings.pdf",
    "texlive-latex-recommended-doc__microtype.pdf",
    "texlive-latex-recommended-doc__mathtools.pdf",
    "texlive-latex-recommended-doc__hyperref-generic.pdf",
    "texlive-latex-recommended-doc__fontspec.pdf",
    # Beyond the default 15:
    "texlive-latex-recommended-doc__caption.pdf",
    "texlive-latex-recommended-doc__polyglossia.pdf",
    "r-doc-pdf__R-lang.pdf",
    "auto-multiple-choice-doc-pdf__auto-multiple-choice.ja.pdf",
    "gnuplot-doc__gnuplot.pdf",
)
PARAPHRASED = Path(__file__).parent / "data" / "paraphrased.jsonl"
MODES: tuple[Mode, ...] = ("dense", "keyword", "hybrid")
KINDS = ("title", "identifier", "verbatim", "section", "table", "paraphrased")
K = 5
INGEST_TIMEOUT_S = 3 * 3600
#: The floors of issue 34 this benchmark measures.
IDENTIFIER_FLOOR = 0.97
PARAPHRASED_FLOOR = 0.75


class Options(msgspec.Struct, frozen=True, kw_only=True):
    docs: int = 15
    per_kind: int = 12
    seed: int = 34
    database_url: str | None = None
    data_dir: Path | None = None
    made: bool = True


class Setup(msgspec.Struct, kw_only=True):
    """What was ingested: documents by file name, their pages and chunks."""

    documents: dict[str, uuid.UUID]
    pages: list[Page]
    chunks: list[PeerChunk]


def options(argv: Sequence[str] | None) -> Options:
    parser = bench_parser("bench.retrieval", __doc__)
    parser.add_argument("--docs", type=int, default=15, help="manuals to ingest (15)")
    parser.add_argument("--per-kind", type=int, default=12, help="probes per kind per manual")
    parser.add_argument("--seed", type=int, default=34, help="the probes' sampling seed")
    parser.add_argument("--database-url", help="reuse this database (and --data-dir)")
    parser.add_argument("--data-dir", type=Path, help="the data dir of --database-url")
    parser.add_argument("--no-made", action="store_true", help="leave out the made PDFs")
    args = parser.parse_args(argv)
    if (args.database_url is None) != (args.data_dir is None):
        parser.error("give --database-url and --data-dir together")
    return Options(
        docs=max(1, min(args.docs, len(MANUALS))),
        per_kind=args.per_kind,
        seed=args.seed,
        database_url=args.database_url,
        data_dir=args.data_dir,
        made=not args.no_made,
    )


def manuals(n: int) -> list[Path]:
    if not corpus_ready():
        raise SystemExit("corpus not fetched: run tests/corpus/fetch.sh")
    return [CORPUS_DIR / "pdfs" / name for name in MANUALS[:n]]


def made(folder: Path) -> list[Path]:
    """The made PDFs (sections from an outline, tables), written into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    path, _ = tables_pdf(folder / "made-tables.pdf")
    return [outline_pdf(folder / "made-outline.pdf"), path]


def env() -> dict[str, str]:
    """A user's defaults: no provider keys, no service URLs, OCR vision."""
    return cli_env(RAGLINE_VISION="ocr")


@contextlib.asynccontextmanager
async def place(opts: Options) -> AsyncIterator[tuple[str, Path]]:
    """The database and data dir: the ones given, or throwaway ones."""
    if opts.database_url is not None and opts.data_dir is not None:
        yield opts.database_url, opts.data_dir
        return
    async with bench_database(server_dsn()) as dsn:
        with tempfile.TemporaryDirectory(prefix="ragline-bench-retrieval-") as tmp:
            yield dsn, Path(tmp) / "data"


def ingest(dsn: str, data_dir: Path, files: Sequence[Path]) -> float:
    """``python -m runtime ingest FILES`` as a user runs it; its wall seconds."""
    cli = Cli(dsn, data_dir, data_dir.parent / "logs", RAGLINE_VISION="ocr")
    started = time.perf_counter()
    result = cli.run("ingest", *map(str, files), "--json", timeout_s=INGEST_TIMEOUT_S)
    if result.code != 0:
        raise SystemExit(f"ingest failed:\n{result}")
    return time.perf_counter() - started


async def load(pool: Pool, services: Services) -> Setup:
    rows = await pool.fetch("SELECT id, filename FROM documents WHERE status = 'ready'")
    documents = {r["filename"]: r["id"] for r in rows}
    ids = list(documents.values())
    page_rows = await pool.fetch(
        "SELECT document_id, page, text FROM pages WHERE document_id = ANY($1)", ids
    )
    model = (await live(pool, services)).model
    chunks = [
        PeerChunk(
            doc, c.ordinal, c.page_start, c.page_end, c.text, c.vector or [], c.section, c.is_table
        )
        for doc in ids
        for c in await chunk_vectors(pool, doc, model)
    ]
    pages = [Page(r["document_id"], r["page"], r["text"]) for r in page_rows]
    return Setup(documents=documents, pages=pages, chunks=chunks)


def probes(setup: Setup, files: Sequence[Path], opts: Options) -> list[Probe]:
    corpus = Corpus(setup.pages)
    outlines = {}
    for path in files:
        with pymupdf.open(path) as pdf:
            toc = pdf.get_toc(simple=True)
        outlines[setup.documents[path.name]] = [(str(t), int(p)) for _, t, p in toc if p >= 1]
    texts = [ChunkText(c.document_id, c.ordinal, c.page_start, c.page_end, c.text,
                       c.section, c.table)
             for c in setup.chunks]  # fmt: skip
    n, seed = opts.per_kind, opts.seed
    return [
        *title_probes(outlines, corpus, n, seed),
        *identifier_probes(corpus, n, seed),
        *verbatim_probes(texts, corpus, n, seed),
        *section_probes(texts, corpus, n, seed),
        *table_probes(texts, corpus, n, seed),
    ]


def qrels_of(found: Sequence[Probe], setup: Setup) -> list[Qrel]:
    made = [
        Qrel(query=p.query, kind=p.kind, document=p.document, pages=p.pages, where=p.kind)
        for p in found
    ]
    with PARAPHRASED.open(encoding="utf-8") as lines:
        written = parse_qrels(lines, PARAPHRASED.name)
    return made + [q for q in written if q.file in setup.documents]


async def peer_rows(
    services: Services,
    model: str,
    setup: Setup,
    qrels: Sequence[Qrel],
    targets: Sequence[Target],
) -> tuple[str, list[Judged], list[Judged]]:
    """Haystack's hybrid and BM25 on the same probes: its version and the outcomes."""
    peer = HaystackHybrid(setup.chunks)
    embedder = services.embedder_for(model)
    texts = [q.query for q in qrels]
    vectors: list[list[float]] = []
    for at in range(0, len(texts), 64):
        vectors += await embedder.embed(texts[at : at + 64], "search_query")
    hybrid, bm25 = [], []
    for qrel, target, vector in zip(qrels, targets, vectors, strict=True):
        started = time.perf_counter()
        hits = peer.search(qrel.query, vector, 10)
        ms = (time.perf_counter() - started) * 1000
        hybrid.append(judged(qrel.query, qrel.kind, hits, target, ms))
        bm25.append(judged(qrel.query, qrel.kind, peer.keyword(qrel.query, 10), target, 0.0))
    return peer.version, hybrid, bm25


async def full_text_rows(
    pool: Pool, qrels: Sequence[Qrel], targets: Sequence[Target]
) -> list[Judged]:
    """PostgreSQL full-text search (keyword side only) on the same probes."""
    async with pool.acquire() as conn:
        fts = PostgresFullText(conn)
        await fts.build()
        rows = []
        for qrel, target in zip(qrels, targets, strict=True):
            started = time.perf_counter()
            hits = await fts.search(qrel.query, 10)
            ms = (time.perf_counter() - started) * 1000
            rows.append(judged(qrel.query, qrel.kind, hits, target, ms))
        return rows


def text_index_rows(setup: Setup, qrels: Sequence[Qrel], targets: Sequence[Target]) -> list[Judged]:
    """qdrant-edge's BM25 text index (keyword side only) on the same probes."""
    with tempfile.TemporaryDirectory(prefix="ragline-bench-text-") as tmp:
        index = QdrantTextIndex(setup.chunks, str(Path(tmp) / "shard"))
        try:
            rows = []
            for qrel, target in zip(qrels, targets, strict=True):
                started = time.perf_counter()
                hits = index.search(qrel.query, 10)
                ms = (time.perf_counter() - started) * 1000
                rows.append(judged(qrel.query, qrel.kind, hits, target, ms))
            return rows
        finally:
            index.close()


async def measure(dsn: str, data_dir: Path, files: Sequence[Path], opts: Options) -> None:
    services = services_for(BuildContext(data_dir=data_dir, env=env()))
    async with services.lifespan(), open_pool(dsn) as pool:
        setup = await load(pool, services)
        missing = [p.name for p in files if p.name not in setup.documents]
        if missing:
            raise SystemExit(f"not ready after ingest: {', '.join(missing)}")
        qrels = qrels_of(probes(setup, files, opts), setup)
        print(
            f"{len(setup.documents)} documents, {len(setup.pages)} pages, "
            f"{len(setup.chunks)} chunks; {len(qrels)} probes",
            flush=True,
        )
        found = await evaluate(pool, services, qrels, k=K, modes=MODES)
        columns: dict[str, dict[str, Scores]] = {m: found.modes[m].kinds for m in MODES}
        latency: dict[str, list[float]] = {m: [j.ms for j in found.modes[m].queries] for m in MODES}
        targets = await resolve(pool, qrels, None)
        if retrieval_peer.load() is not None:
            model = (await live(pool, services)).model
            version, hybrid, bm25 = await peer_rows(services, model, setup, qrels, targets)
            columns[f"haystack {version} hybrid"] = by_kind(hybrid, K)
            columns["haystack BM25"] = by_kind(bm25, K)
            latency["haystack hybrid (no embedding)"] = [j.ms for j in hybrid]
        columns["postgres FTS"] = by_kind(await full_text_rows(pool, qrels, targets), K)
        columns["qdrant text (code)"] = by_kind(text_index_rows(setup, qrels, targets), K)
    report(found, columns, latency)


def report(
    found: Evaluation, columns: dict[str, dict[str, Scores]], latency: dict[str, list[float]]
) -> None:
    heading(f"recall@{K} / MRR@10 per probe kind")
    kinds = [k for k in KINDS if k in columns["hybrid"]] + [ALL]
    names = [*MODES, "hybrid+rerank", *(c for c in columns if c not in MODES)]
    print(f"{'kind':<12} {'n':>4}  " + "  ".join(f"{name:>24}" for name in names))
    for kind in kinds:
        cells = [_cell(columns.get(name, {}).get(kind)) for name in names]
        n = columns["hybrid"][kind].queries
        print(f"{kind:<12} {n:>4}  " + "  ".join(f"{c:>24}" for c in cells))
    print("hybrid+rerank: not built (no reranker in the benchmark's environment)")
    floors(columns)
    heading("search latency, one client (ms, query embedding included)")
    for mode, values in latency.items():
        if values:
            print(
                f"{mode:<32} p50 {percentile(values, 50):7.1f}  p99 {percentile(values, 99):7.1f}"
            )


def _cell(s: Scores | None) -> str:
    return "-" if s is None else f"{s.recall_at_k:.3f} / {s.mrr_at_10:.3f}"


def floors(columns: dict[str, dict[str, Scores]]) -> None:
    heading("floors (issue 34)")
    hybrid, dense, keyword = columns["hybrid"], columns["dense"], columns["keyword"]
    peer = next((v for c, v in columns.items() if c.endswith(" hybrid")), None)
    ident = hybrid.get("identifier")
    if ident is not None:
        ok = ident.recall_at_k >= IDENTIFIER_FLOOR
        print(f"hybrid recall@{K} on identifiers {ident.recall_at_k:.3f} ≥ 0.97: {verdict(ok)}")
    for kind in [k for k in KINDS if k in hybrid]:
        best = max(dense[kind].recall_at_k, keyword[kind].recall_at_k)
        h = hybrid[kind]
        print(
            f"{kind}: hybrid recall@{K} {h.recall_at_k:.3f} ≥ best single mode {best:.3f}: "
            f"{verdict(h.recall_at_k >= best)}"
        )
        if peer is not None and kind in peer:
            p = peer[kind]
            ok = h.recall_at_k >= p.recall_at_k and h.mrr_at_10 >= p.mrr_at_10
            print(
                f"{kind}: hybrid {h.recall_at_k:.3f} / {h.mrr_at_10:.3f} ≥ Haystack "
                f"{p.recall_at_k:.3f} / {p.mrr_at_10:.3f} (recall / MRR): {verdict(ok)}"
            )
    para = hybrid.get("paraphrased")
    if para is not None:
        ok = para.recall_at_k >= PARAPHRASED_FLOOR
        print(f"paraphrased: hybrid recall@{K} {para.recall_at_k:.3f} ≥ 0.75: {verdict(ok)}")


async def run(opts: Options) -> None:
    files = manuals(opts.docs)
    await banner(server_dsn(), "bench.retrieval", f"{len(files)} manuals")
    if retrieval_peer.load() is None:
        print(
            f"haystack: not installed (pip install '{retrieval_peer.REQUIREMENT}'): no peer column"
        )
    async with place(opts) as (dsn, data_dir):
        made_dir = tempfile.TemporaryDirectory(prefix="ragline-bench-made-")
        if opts.made:
            files = [*files, *made(Path(made_dir.name))]
        started = time.perf_counter()
        await anyio.to_thread.run_sync(ingest, dsn, data_dir, files)
        print(f"ingest: {time.perf_counter() - started:.0f} s", flush=True)
        await measure(dsn, data_dir, files, opts)
        made_dir.cleanup()


def main(argv: Sequence[str] | None = None) -> None:
    anyio.run(run, options(argv))


if __name__ == "__main__":
    main()
