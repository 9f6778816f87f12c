"""eval's metrics and qrels reading, against figures computed by hand."""

from __future__ import annotations

import math
import uuid

import pytest

from stages.actions.evaluate import (
    ALL,
    Judged,
    QrelsError,
    Target,
    by_kind,
    first_rank,
    is_relevant,
    judge,
    ndcg,
    parse_qrels,
    recall_at,
    reciprocal_rank,
)
from stages.actions.search import Answer

DOC = uuid.UUID(int=1)
OTHER = uuid.UUID(int=2)


def hit(document: uuid.UUID, start: int, end: int) -> Answer:
    return Answer(
        score=1.0,
        document_id=document,
        filename="manual.pdf",
        collection="default",
        media_type="application/pdf",
        ordinal=0,
        generation=1,
        kind="text",
        page_start=start,
        page_end=end,
        text="",
    )


def test_a_hit_is_relevant_when_of_the_document_and_overlapping_the_pages() -> None:
    pages = Target(documents=frozenset({DOC}), pages=(7, 12))
    anywhere = Target(documents=frozenset({DOC}))
    assert is_relevant(hit(DOC, 6, 7), pages)
    assert is_relevant(hit(DOC, 12, 12), pages)
    assert is_relevant(hit(DOC, 5, 20), pages)  # spans both
    assert not is_relevant(hit(DOC, 8, 11), pages)  # between them
    assert not is_relevant(hit(OTHER, 7, 7), pages)
    assert is_relevant(hit(DOC, 300, 301), anywhere)
    assert not is_relevant(hit(OTHER, 1, 1), anywhere)
    assert judge([hit(OTHER, 7, 7), hit(DOC, 1, 2), hit(DOC, 7, 8)], pages) == [
        False,
        False,
        True,
    ]


def test_recall_mrr_and_ndcg_by_hand() -> None:
    flags = [False, True, False, True] + [False] * 6
    assert first_rank(flags) == 2
    assert recall_at(flags, 1) == 0.0
    assert recall_at(flags, 2) == 1.0
    assert reciprocal_rank(flags) == 0.5
    # Relevant at ranks 2 and 4; three relevant chunks exist: DCG = 1/log2(3) + 1/log2(5),
    # IDCG = 1 + 1/log2(3) + 1/2.
    dcg = 1 / math.log2(3) + 1 / math.log2(5)
    assert ndcg(flags, 3) == pytest.approx(dcg / (1 + 1 / math.log2(3) + 0.5))
    assert ndcg(flags, 1) == pytest.approx(dcg / (1 + 1 / math.log2(3)))  # found 2: ideal ≥ 2
    assert ndcg([True] + [False] * 9, 1) == 1.0
    # Past the cut counts for nothing.
    late = [False] * 10 + [True]
    assert reciprocal_rank(late) == 0.0 and ndcg(late, 1) == 0.0 and recall_at(late, 10) == 0.0
    assert reciprocal_rank([]) == 0.0 and ndcg([], 1) == 0.0


def judged(kind: str, flags: list[bool], relevant: int = 1) -> Judged:
    return Judged(
        query="q", kind=kind, rank=first_rank(flags), flags=flags, relevant=relevant, ms=1.0
    )


def test_figures_per_kind_and_overall() -> None:
    rows = [
        judged("identifier", [True, False]),  # rr 1, recall@1 1, ndcg 1
        judged("identifier", [False, False, True]),  # rr 1/3, recall@1 0, ndcg 1/log2(4)=0.5
        judged("title", [False] * 10),  # all 0
    ]
    out = by_kind(rows, k=1)
    assert list(out) == ["identifier", "title", ALL]
    ident = out["identifier"]
    assert (ident.queries, ident.recall_at_k, ident.mrr_at_10, ident.ndcg_at_10) == (
        2,
        0.5,
        round((1 + 1 / 3) / 2, 4),
        0.75,
    )
    assert out["title"].recall_at_k == 0.0 and out["title"].mrr_at_10 == 0.0
    every = out[ALL]
    assert every.queries == 3
    assert every.mrr_at_10 == round((1 + 1 / 3) / 3, 4)
    assert every.ndcg_at_10 == 0.5
    assert by_kind([], k=5)[ALL].queries == 0


def test_qrels_lines_are_read_and_bad_ones_named_by_line() -> None:
    good = [
        '{"query": "asn1_der_decoding", "kind": "identifier", "file": "a.pdf", "pages": [3]}',
        "",
        f'{{"query": "how to", "document": "{DOC}"}}',
    ]
    first, second = parse_qrels(good, "qrels.jsonl")
    assert (first.query, first.kind, first.file, first.pages) == (
        "asn1_der_decoding",
        "identifier",
        "a.pdf",
        (3,),
    )
    assert (second.kind, second.document, second.pages, second.where) == (
        "query",
        DOC,
        (),
        "qrels.jsonl line 3",
    )
    bad = {
        '{"file": "a.pdf"}': "missing query",
        '{"query": " ", "file": "a.pdf"}': "query must be a non-empty string",
        '{"query": "x"}': "give file or document (one of them)",
        '{"query": "x", "file": "a.pdf", "document": "b"}': "give file or document",
        '{"query": "x", "document": "nope"}': "document is not a document id: 'nope'",
        '{"query": "x", "file": "a.pdf", "pages": [0]}': "pages must be a list of page numbers",
        '{"query": "x", "file": "a.pdf", "pages": 3}': "pages must be a list of page numbers",
        '{"query": "x", "file": "a.pdf", "page": [3]}': "unknown field 'page'",
        '{"query": "x", "file": "a.pdf", "kind": 3}': "kind must be a non-empty string",
        '["query"]': "not a JSON object",
        "{not json": "not a JSON object",
    }
    for line, problem in bad.items():
        with pytest.raises(QrelsError) as caught:
            parse_qrels([good[0], line], "qrels.jsonl")
        assert str(caught.value).startswith(f"eval: qrels.jsonl line 2: {problem}"), line
    with pytest.raises(QrelsError, match=r"^eval: empty\.jsonl has no queries$"):
        parse_qrels(["", "  "], "empty.jsonl")
