"""``ragline eval QRELS`` as a user runs it: two real corpus manuals ingested on the
embedded defaults (local embedder, embedded index), a qrels file written by hand, and the
figures checked against what ``search`` itself returns for each query and mode."""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from bench.harness.cli import Cli
from bench.harness.db import Databases, sql
from runtime.cli.common import EXIT_OK, EXIT_USAGE
from tests.support.corpus import corpus_pdfs

GUIDE = "gm-assistant-doc__userguide_en.pdf"
PDFPAGES = "texlive-latex-recommended-doc__pdfpages.pdf"
MODES = ("dense", "keyword", "hybrid")
K = 3

#: (query, kind, file, pages): read off the manuals' pages.
QRELS = [
    ("ViviCoder", "identifier", GUIDE, [11]),
    ("threadname", "identifier", PDFPAGES, [6]),
    ("choose who takes part in a fight and in what order they act", "paraphrased", GUIDE, [10]),
    ("arrange several logical pages on each sheet of paper", "paraphrased", PDFPAGES, [3]),
]


class Setup(msgspec.Struct, kw_only=True):
    cli: Cli
    ids: dict[str, str]


@pytest.fixture(scope="module")
def ingested(databases: Databases, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    found = {p.name: p for p in corpus_pdfs()}
    if not {GUIDE, PDFPAGES} <= found.keys():
        pytest.skip(f"corpus lacks {GUIDE} or {PDFPAGES}: run tests/corpus/fetch.sh")
    name = databases.clone()
    tmp = tmp_path_factory.mktemp("eval")
    cli = Cli(databases.dsn(name), tmp / "data", tmp / "logs")
    try:
        result = cli.run("ingest", str(found[GUIDE]), str(found[PDFPAGES]), "--json")
        assert result.code == EXIT_OK, result
        ids = {row["filename"]: row["document_id"] for row in result.json()["ready"]}
        assert set(ids) == {GUIDE, PDFPAGES}, result
        yield Setup(cli=cli, ids=ids)
    finally:
        databases.drop(name)


def write_qrels(path: Path, lines: list[Any]) -> Path:
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return path


def qrel_lines(ids: dict[str, str]) -> list[dict[str, Any]]:
    lines: list[dict[str, Any]] = [
        {"query": q, "kind": kind, "file": file, "pages": pages} for q, kind, file, pages in QRELS
    ]
    # By id, anywhere in the document, the default kind.
    lines.append({"query": "insert pages of an external PDF document", "document": ids[PDFPAGES]})
    return lines


def relevant_chunks(cli: Cli, document: str, pages: list[int]) -> int:
    """Chunks of the document overlapping ``pages`` (all of them without pages)."""
    rows = sql(
        cli.dsn,
        "SELECT page_start, page_end FROM chunks WHERE document_id = $1",
        uuid.UUID(document),
    )
    return sum(1 for r in rows if not pages or any(r[0] <= p <= r[1] for p in pages))


def by_hand(
    hits: list[dict[str, Any]], document: str, pages: list[int], relevant: int
) -> dict[str, Any]:
    """Rank of the first relevant hit, recall@K, reciprocal rank and nDCG@10 of one query."""
    flags = [
        h["document_id"] == document
        and (not pages or any(h["page_start"] <= p <= h["page_end"] for p in pages))
        for h in hits[:10]
    ]
    rank = flags.index(True) + 1 if True in flags else None
    dcg = sum(1 / math.log2(i + 2) for i, f in enumerate(flags) if f)
    ideal = sum(1 / math.log2(i + 2) for i in range(min(10, max(relevant, sum(flags)))))
    return {
        "rank": rank,
        "recall": 1.0 if rank is not None and rank <= K else 0.0,
        "rr": 1 / rank if rank else 0.0,
        "ndcg": dcg / ideal if ideal else 0.0,
    }


def mean(values: list[float]) -> float:
    return round(sum(values) / len(values), 4)


def test_eval_figures_are_what_search_gives(ingested: Setup, tmp_path: Path) -> None:
    cli, ids = ingested.cli, ingested.ids
    lines = qrel_lines(ids)
    qrels = write_qrels(tmp_path / "qrels.jsonl", lines)
    searches = [
        ("search", line["query"], "--json", "-k", "10", "--mode", mode)
        for mode in MODES
        for line in lines
    ]
    evaluated, *searched = cli.run_all(
        ("eval", str(qrels), "--mode", "all", "-k", str(K), "--json"), *searches
    )
    assert evaluated.code == EXIT_OK, evaluated
    report = evaluated.json()
    assert report["k"] == K and list(report["modes"]) == list(MODES)

    for m, mode in enumerate(MODES):
        expected = []
        for i, line in enumerate(lines):
            result = searched[m * len(lines) + i]
            assert result.code == EXIT_OK, result
            document = line.get("document") or ids[line["file"]]
            pages = line.get("pages", [])
            relevant = relevant_chunks(cli, document, pages)
            expected.append(by_hand(result.json(), document, pages, relevant))
        got = report["modes"][mode]
        assert [q["rank"] for q in got["queries"]] == [e["rank"] for e in expected], mode
        kinds = [line.get("kind", "query") for line in lines]
        for kind in ["identifier", "paraphrased", "query", "all"]:
            picked = [e for e, k in zip(expected, kinds, strict=True) if kind in (k, "all")]
            figures = got["kinds"][kind]
            assert figures == {
                "queries": len(picked),
                "recall_at_k": mean([e["recall"] for e in picked]),
                "mrr_at_10": mean([e["rr"] for e in picked]),
                "ndcg_at_10": mean([e["ndcg"] for e in picked]),
            }, (mode, kind)
    # Not vacuous: the keyword side puts a pasted identifier's page first.
    keyword = report["modes"]["keyword"]["queries"]
    assert keyword[0]["rank"] == 1 and keyword[1]["rank"] == 1, keyword


def test_eval_prints_a_table_and_one_line_errors(ingested: Setup, tmp_path: Path) -> None:
    cli, ids = ingested.cli, ingested.ids
    good = write_qrels(tmp_path / "qrels.jsonl", qrel_lines(ids))
    bad = write_qrels(tmp_path / "bad.jsonl", [qrel_lines(ids)[0], {"file": GUIDE}])
    unknown = write_qrels(tmp_path / "unknown.jsonl", [{"query": "x", "file": "nope.pdf"}])
    missing_id = "00000000-0000-0000-0000-00000000002a"
    gone = write_qrels(tmp_path / "gone.jsonl", [{"query": "x", "document": missing_id}])
    table, bad_line, no_file, no_doc, other = cli.run_all(
        ("eval", str(good)),
        ("eval", str(bad)),
        ("eval", str(unknown)),
        ("eval", str(gone)),
        ("eval", str(good), "--collection", "other"),
    )
    assert table.code == EXIT_OK, table
    header, *rows = table.out_lines
    assert header.split() == ["mode", "kind", "queries", "recall@5", "MRR@10", "nDCG@10"]
    assert [r.split()[:3] for r in rows] == [
        ["hybrid", "identifier", "2"],
        ["hybrid", "paraphrased", "2"],
        ["hybrid", "query", "1"],
        ["hybrid", "all", "5"],
    ]
    for result, line in [
        (bad_line, "ragline: eval: bad.jsonl line 2: missing query"),
        (no_file, "ragline: eval: unknown.jsonl line 1: no ready document named 'nope.pdf'"),
        (no_doc, f"ragline: eval: gone.jsonl line 1: no ready document {missing_id}"),
        (
            other,
            f"ragline: eval: qrels.jsonl line 1: no ready document named '{GUIDE}' "
            "in collection other",
        ),
    ]:
        assert result.code == EXIT_USAGE, result
        assert result.err_lines == [line], result
