"""The keyword side's cost to the index, by engine: ragline's sparse vectors against
qdrant-edge's own BM25 full-text index (docs/retrieval.md, "the index-cost question").

``python -m bench.keyword_engines [--docs 40] [--rounds 2]`` ingests corpus PDFs once
(bench.ingest's ragline run: the real parse and chunk, a zero-cost embedder) into a
throwaway database (``ragline_bench_<random>`` on ``DATABASE_URL``, else the local
server), then indexes every ready document again into fresh embedded shards as the index
stage does (:func:`bench.index_parts.measure_index_parts`, this process's CPU), one engine
after another, in rounds whose order turns:

- ``dense``: no keyword side;
- ``sparse``: ragline's (:mod:`stages.text.keywords`: identifiers whole and split, CJK
  characters and their pairs, BM25 weights; the shard applies IDF);
- ``text/word``, ``text/code``, ``text/multilingual``: qdrant-edge's full-text index with
  BM25 scoring over each point's text (stored as a field of its own), tokenized in Rust
  by the shard at upsert.

Prints each engine's best CPU per point over the rounds and its ratio to dense only
(issue 34's floor: ≤ 1.5×), its keyword search's p50 / p99 over the same queries at that
size, and which of a fixed set of probes each engine's tokenizer finds (an identifier
whole and by its parts, camelCase parts, CJK, Cyrillic, Arabic): what the cost buys.
Figures are printed, never asserted.
"""

from __future__ import annotations

import random
import tempfile
import time
from collections.abc import Callable, Sequence
from importlib.metadata import version
from pathlib import Path

import anyio
import msgspec
import qdrant_edge as qe

from bench.args import bench_parser
from bench.database import bench_database, pool_of, server_dsn
from bench.harness.text_index import TEXT_FIELD, add_text_index
from bench.index_parts import IndexParts, measure_index_parts
from bench.ingest import corpus_files, ragline_run
from bench.report import banner, heading, percentile, row
from stages.ports.vector_index import KEYWORDS_VECTOR
from stages.text.keywords import query_vector, text_vector

#: The engines, by name: measure_index_parts' options for each.
ENGINES: dict[str, dict[str, object]] = {
    "dense": {"keywords": False},
    "sparse": {"keywords": True},
    "text/word": {"keywords": False, "text_index": qe.TokenizerType.Word},
    "text/code": {"keywords": False, "text_index": qe.TokenizerType.Code},
    "text/multilingual": {"keywords": False, "text_index": qe.TokenizerType.Multilingual},
}

#: Texts the probes look for, and probes with the text each should find (by position).
PROBE_TEXTS = (
    "call asn1_der_decoding here",
    "the XRDP_UPSTREAM_VERSION constant",
    "getHTTPResponseCode returns the status",
    "an ssl.SSLContext object",
    "中文分词测试的文本",
    "Привет мир сервер",
    "الخادم يعمل الآن",
)
PROBES = (
    ("asn1_der_decoding", 0),
    ("decoding", 0),
    ("XRDP_UPSTREAM_VERSION", 1),
    ("upstream", 1),
    ("getHTTPResponseCode", 2),
    ("response code", 2),
    ("SSLContext", 3),
    ("分词", 4),
    ("сервер", 5),
    ("الخادم", 6),
)

#: Keyword searches timed per engine, and words per query.
QUERIES = 200
QUERY_WORDS = 3


class Options(msgspec.Struct, frozen=True, kw_only=True):
    server_dsn: str
    docs: int = 40
    rounds: int = 2


Search = Callable[[qe.EdgeShard, str], list[qe.ScoredPoint]]


def sparse_search(shard: qe.EdgeShard, text: str) -> list[qe.ScoredPoint]:
    indices, values = query_vector(text)
    words = qe.SparseVector(indices=indices, values=values)
    query = qe.Query.Nearest(words, using=KEYWORDS_VECTOR)
    return shard.query(qe.QueryRequest(query=query, limit=10, with_payload=False))


def text_search(shard: qe.EdgeShard, text: str) -> list[qe.ScoredPoint]:
    query = qe.TextQuery(TEXT_FIELD, text)
    return shard.query(qe.QueryRequest(query=query, limit=10, with_payload=False))


def search_of(engine: str) -> Search | None:
    if engine == "dense":
        return None
    return sparse_search if engine == "sparse" else text_search


def shard_dir(data_dir: Path, turn: int | str, engine: str) -> Path:
    """Where an engine's shard of a round (or of the probes) is kept."""
    return data_dir / f"{turn}-{engine.replace('/', '-')}"


async def index_rounds(dsn: str, data_dir: Path, rounds: int) -> dict[str, list[IndexParts]]:
    """Every engine's index parts per round, the engines' order turning each round; the
    last round's shards are kept at ``data_dir/<round>-<engine>``."""
    spent: dict[str, list[IndexParts]] = {engine: [] for engine in ENGINES}
    names = list(ENGINES)
    for turn in range(rounds):
        order = names[turn % len(names) :] + names[: turn % len(names)]
        for engine in order:
            shard = shard_dir(data_dir, turn, engine)
            parts = await measure_index_parts(dsn, shard, **ENGINES[engine])  # type: ignore[arg-type]
            spent[engine].append(parts)
            print(
                f"  round {turn + 1} {engine}: {parts.us(parts.total_s):.1f} µs a point", flush=True
            )
    return spent


async def query_texts(dsn: str) -> list[str]:
    """Queries of a few words drawn from the chunks (the same for every engine)."""
    async with pool_of(dsn, 1) as pool:
        texts = [r["text"] for r in await pool.fetch("SELECT text FROM chunks")]
    rng = random.Random(7)
    queries: list[str] = []
    while len(queries) < QUERIES:
        words = [w for w in rng.choice(texts).split() if w.isalpha() and len(w) > 3]
        if len(words) >= QUERY_WORDS:
            queries.append(" ".join(rng.sample(words, QUERY_WORDS)))
    return queries


def search_ms(shard_dir: Path, search: Search, queries: Sequence[str]) -> list[float]:
    shard = qe.EdgeShard.load(str(shard_dir))
    try:
        for text in queries[:10]:  # pages in, caches warm
            search(shard, text)
        took = []
        for text in queries:
            at = time.perf_counter()
            search(shard, text)
            took.append((time.perf_counter() - at) * 1e3)
        return took
    finally:
        shard.close()


def probes_found(engine: str, work: Path) -> int:
    """How many of :data:`PROBES` the engine's keyword search answers with their text
    first, in a small shard of :data:`PROBE_TEXTS`."""
    options = ENGINES[engine]
    path = shard_dir(work, "probes", engine)
    vectors = qe.EdgeVectorParams(size=2, distance=qe.Distance.Cosine)
    sparse = {KEYWORDS_VECTOR: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)}
    keywords = bool(options["keywords"])
    config = qe.EdgeConfig(vectors=vectors, sparse_vectors=sparse if keywords else None)
    qe.EdgeShard.create(str(path), config).close()
    shard = qe.EdgeShard.load(str(path))
    try:
        tokenizer = options.get("text_index")
        if isinstance(tokenizer, qe.TokenizerType):
            add_text_index(shard, tokenizer)
        points = []
        for i, text in enumerate(PROBE_TEXTS):
            point: dict[str, object] = {"": [1.0, 0.5]}
            if keywords:
                indices, values = text_vector(text)
                point[KEYWORDS_VECTOR] = qe.SparseVector(indices=indices, values=values)
            points.append(qe.Point(i, point, {TEXT_FIELD: text}))  # type: ignore[arg-type]
        shard.update(qe.UpdateOperation.upsert_points(points))
        search = search_of(engine)
        assert search is not None
        return sum(
            1 for probe, want in PROBES if [p.id for p in search(shard, probe)][:1] == [want]
        )
    finally:
        shard.close()


def report(
    spent: dict[str, list[IndexParts]], latency: dict[str, list[float]], found: dict[str, int]
) -> None:
    heading("The keyword side's cost to the index stage, and what it finds")
    dense = min(p.total_s / max(p.points, 1) for p in spent["dense"])
    widths = (18, 10, 9, 22, 9, 9, 8)
    row(
        "engine",
        "µs/point",
        "× dense",
        "rounds (µs/point)",
        "p50 ms",
        "p99 ms",
        "probes",
        widths=widths,
    )
    for engine, runs in spent.items():
        best = min(p.total_s / max(p.points, 1) for p in runs)
        each = " / ".join(f"{p.us(p.total_s):.0f}" for p in runs)
        took = latency.get(engine)
        p50 = f"{percentile(took, 50):.2f}" if took else "-"
        p99 = f"{percentile(took, 99):.2f}" if took else "-"
        probes = f"{found[engine]}/{len(PROBES)}" if engine in found else "-"
        row(
            engine,
            f"{best * 1e6:.1f}",
            f"{best / dense:.2f}",
            each,
            p50,
            p99,
            probes,
            widths=widths,
        )
    print(
        f"({spent['dense'][0].points} points; issue 34's floor: the index cost with a "
        "keyword side ≤ 1.5× dense only)"
    )


async def main(opts: Options) -> None:
    await banner(
        opts.server_dsn,
        "ragline keyword engines benchmark",
        f"qdrant-edge {version('qdrant-edge-py')}",
    )
    files = corpus_files(opts.docs)
    with tempfile.TemporaryDirectory(prefix="ragline-bench-") as tmp:
        data_dir = Path(tmp)
        async with bench_database(opts.server_dsn) as dsn:
            heading(f"{len(files)} corpus PDFs ingested once, then indexed again per engine")
            await ragline_run(dsn, data_dir, files)
            spent = await index_rounds(dsn, data_dir, opts.rounds)
            queries = await query_texts(dsn)
        latency: dict[str, list[float]] = {}
        found: dict[str, int] = {}
        for engine in ENGINES:
            search = search_of(engine)
            if search is None:
                continue
            shard = shard_dir(data_dir, opts.rounds - 1, engine)
            latency[engine] = search_ms(shard, search, queries)
            found[engine] = probes_found(engine, data_dir)
        report(spent, latency, found)


def parse_args(argv: Sequence[str] | None = None) -> Options:
    parser = bench_parser("bench.keyword_engines", __doc__)
    parser.add_argument("--docs", type=int, default=40, help="corpus documents (40)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of every engine (2)")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.docs < 1:
        parser.error("--docs and --rounds must be at least 1")
    return Options(server_dsn=server_dsn(), docs=args.docs, rounds=args.rounds)


if __name__ == "__main__":
    anyio.run(main, parse_args())
