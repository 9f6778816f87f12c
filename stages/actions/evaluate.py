"""Evaluate: how well search finds what a set of judged queries (qrels) expects.

A qrels file is JSONL, one query a line: ``{"query": ..., "kind": ..., "file": ... or
"document": ..., "pages": [...]}``. A hit is relevant when it is of that document and,
where pages are given, its page range overlaps them. Each query is searched in each mode
asked for; the figures per query kind and overall are recall@k (the share of queries with
a relevant hit in the top k), MRR@10 and nDCG@10 (binary gains, the ideal ranking being
every relevant chunk the document has first). Figures: docs/retrieval.md.
"""

from __future__ import annotations

import json
import math
import time
import uuid
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

import msgspec

from runtime.api import ConfigurationError, DocumentRepository, DocumentStatus, Pool
from stages.actions.search import Mode, search
from stages.db import checkpoints
from stages.ports.services import Services

#: The cut of MRR and nDCG (and the fewest hits asked of search).
DEPTH = 10
#: The kind of a qrels line that names none.
DEFAULT_KIND = "query"
#: The overall row's kind.
ALL = "all"
_FIELDS = frozenset({"query", "kind", "file", "document", "pages"})


class QrelsError(ConfigurationError):
    """A qrels file that cannot be read as judged queries (one line, exit 2)."""


class Qrel(msgspec.Struct, frozen=True, kw_only=True):
    """One judged query: the document expected (by file name or id) and its pages."""

    query: str
    kind: str = DEFAULT_KIND
    file: str | None = None
    document: uuid.UUID | None = None
    #: Pages that hold the answer (empty: anywhere in the document).
    pages: tuple[int, ...] = ()
    #: Where it was read ("qrels.jsonl line 3"), for errors.
    where: str = ""


class Target(msgspec.Struct, frozen=True, kw_only=True):
    """A qrel resolved: the documents that answer it, the pages, and how many of their
    chunks are relevant (nDCG's ideal ranking)."""

    documents: frozenset[uuid.UUID]
    pages: tuple[int, ...] = ()
    relevant: int = 1


class Span(Protocol):
    """What relevance reads of a hit."""

    @property
    def document_id(self) -> uuid.UUID: ...
    @property
    def page_start(self) -> int: ...
    @property
    def page_end(self) -> int: ...


class Judged(msgspec.Struct, kw_only=True):
    """One query's outcome in one mode: which of its hits were relevant, best first."""

    query: str
    kind: str
    #: The rank of the first relevant hit (None: none in the hits searched).
    rank: int | None
    flags: list[bool]
    relevant: int
    #: The search's wall time, query embedding included.
    ms: float


class Scores(msgspec.Struct, kw_only=True):
    queries: int
    recall_at_k: float
    mrr_at_10: float
    ndcg_at_10: float


class ModeResult(msgspec.Struct, kw_only=True):
    #: Per query kind, in the order first seen, then ``all``.
    kinds: dict[str, Scores]
    queries: list[Judged]


class Evaluation(msgspec.Struct, kw_only=True):
    k: int
    collection: str | None
    modes: dict[str, ModeResult]


# -- qrels ---------------------------------------------------------------------------------


def parse_qrels(lines: Iterable[str], name: str) -> list[Qrel]:
    """The qrels of a JSONL file's ``lines`` (blank lines skipped); :class:`QrelsError`
    names the file and line of the first bad one."""
    qrels = []
    for number, line in enumerate(lines, 1):
        if line.strip():
            qrels.append(_qrel(line, f"{name} line {number}"))
    if not qrels:
        raise QrelsError(f"eval: {name} has no queries")
    return qrels


def _qrel(line: str, where: str) -> Qrel:
    try:
        body = json.loads(line)
    except ValueError:
        body = None
    if not isinstance(body, dict):
        raise QrelsError(f"eval: {where}: not a JSON object")
    problem = _problem(body)
    if problem:
        raise QrelsError(f"eval: {where}: {problem}")
    document = body.get("document")
    return Qrel(
        query=body["query"],
        kind=body.get("kind", DEFAULT_KIND),
        file=body.get("file"),
        document=None if document is None else uuid.UUID(document),
        pages=tuple(body.get("pages", ())),
        where=where,
    )


def _problem(body: dict[str, Any]) -> str | None:
    """What is wrong with a qrels line, or None."""
    unknown = sorted(set(body) - _FIELDS)
    if unknown:
        return f"unknown field {unknown[0]!r} (fields: query, kind, file, document, pages)"
    if not isinstance(body.get("query"), str) or not body["query"].strip():
        return "missing query" if "query" not in body else "query must be a non-empty string"
    kind = body.get("kind", DEFAULT_KIND)
    if not isinstance(kind, str) or not kind.strip():
        return "kind must be a non-empty string"
    if ("file" in body) == ("document" in body):
        return "give file or document (one of them)"
    if "file" in body and (not isinstance(body["file"], str) or not body["file"]):
        return "file must be a file name"
    if "document" in body and not _is_uuid(body["document"]):
        return f"document is not a document id: {body['document']!r}"
    pages = body.get("pages", [])
    if not isinstance(pages, list) or not all(type(p) is int and p >= 1 for p in pages):
        return "pages must be a list of page numbers (1 or more)"
    return None


def _is_uuid(value: Any) -> bool:
    try:
        uuid.UUID(str(value))
    except ValueError:
        return False
    return isinstance(value, str)


# -- metrics (pure) ------------------------------------------------------------------------


def is_relevant(hit: Span, target: Target) -> bool:
    """Of an expected document and, where pages are given, overlapping one of them."""
    if hit.document_id not in target.documents:
        return False
    return not target.pages or any(hit.page_start <= p <= hit.page_end for p in target.pages)


def judge(hits: Sequence[Span], target: Target) -> list[bool]:
    return [is_relevant(h, target) for h in hits]


def first_rank(flags: Sequence[bool]) -> int | None:
    return next((i for i, f in enumerate(flags, 1) if f), None)


def recall_at(flags: Sequence[bool], k: int) -> float:
    """1 when a relevant hit is in the top ``k``: a query expects one answer (a page or a
    document), so recall is whether it was found."""
    return 1.0 if any(flags[:k]) else 0.0


def reciprocal_rank(flags: Sequence[bool], k: int = DEPTH) -> float:
    rank = first_rank(flags[:k])
    return 0.0 if rank is None else 1.0 / rank


def ndcg(flags: Sequence[bool], relevant: int, k: int = DEPTH) -> float:
    """Binary-gain nDCG@k; the ideal ranking has ``relevant`` relevant hits first (at
    least as many as were found: a count taken before a re-chunk cannot be short)."""
    gains = sum(1.0 / math.log2(i + 1) for i, f in enumerate(flags[:k], 1) if f)
    ideal_hits = min(k, max(relevant, sum(flags[:k])))
    ideal = sum(1.0 / math.log2(i + 1) for i in range(1, ideal_hits + 1))
    return gains / ideal if ideal else 0.0


def scores(judged: Sequence[Judged], k: int) -> Scores:
    """The means over ``judged`` (all zero for none)."""
    n = len(judged)

    def mean(values: Iterable[float]) -> float:
        return round(sum(values) / n, 4) if n else 0.0

    return Scores(
        queries=n,
        recall_at_k=mean(recall_at(j.flags, k) for j in judged),
        mrr_at_10=mean(reciprocal_rank(j.flags) for j in judged),
        ndcg_at_10=mean(ndcg(j.flags, j.relevant) for j in judged),
    )


def by_kind(judged: Sequence[Judged], k: int) -> dict[str, Scores]:
    """:func:`scores` per kind (in the order first seen), then over all as ``all``."""
    kinds = list(dict.fromkeys(j.kind for j in judged))
    out = {kind: scores([j for j in judged if j.kind == kind], k) for kind in kinds}
    out[ALL] = scores(judged, k)
    return out


def judged(query: str, kind: str, hits: Sequence[Span], target: Target, ms: float) -> Judged:
    flags = judge(hits, target)
    return Judged(
        query=query, kind=kind, rank=first_rank(flags), flags=flags, relevant=target.relevant, ms=ms
    )


# -- the use case --------------------------------------------------------------------------


async def resolve(pool: Pool, qrels: Sequence[Qrel], collection: str | None) -> list[Target]:
    """Each qrel's documents (ready ones, of ``collection`` when given) and its count of
    relevant chunks; :class:`QrelsError` for a file or id that names no ready document."""
    ready = await _ready_documents(pool, collection)
    by_name: dict[str, set[uuid.UUID]] = {}
    for doc_id, filename in ready.items():
        by_name.setdefault(filename, set()).add(doc_id)
    spans: dict[uuid.UUID, list[tuple[int, int]]] = {}
    targets = []
    for qrel in qrels:
        documents = _documents_of(qrel, ready, by_name, collection)
        for doc in documents - spans.keys():
            spans[doc] = [(c.page_start, c.page_end) for c in await checkpoints.chunks(pool, doc)]
        loose = Target(documents=frozenset(documents), pages=qrel.pages)
        relevant = sum(
            is_relevant(_Hit(doc, start, end), loose)
            for doc in documents
            for start, end in spans[doc]
        )
        targets.append(msgspec.structs.replace(loose, relevant=max(relevant, 1)))
    return targets


def _documents_of(
    qrel: Qrel,
    ready: dict[uuid.UUID, str],
    by_name: dict[str, set[uuid.UUID]],
    collection: str | None,
) -> set[uuid.UUID]:
    scope = "" if collection is None else f" in collection {collection}"
    if qrel.document is not None:
        if qrel.document not in ready:
            raise QrelsError(f"eval: {qrel.where}: no ready document {qrel.document}{scope}")
        return {qrel.document}
    found = by_name.get(qrel.file or "")
    if not found:
        raise QrelsError(f"eval: {qrel.where}: no ready document named {qrel.file!r}{scope}")
    return found


async def _ready_documents(pool: Pool, collection: str | None) -> dict[uuid.UUID, str]:
    """Ready documents' names by id (of one collection, or all)."""
    repo = DocumentRepository(pool)
    count = (await repo.count_by_status()).get(DocumentStatus.READY.value, 0)
    docs = await repo.list(DocumentStatus.READY.value, count) if count else []
    return {d.id: d.filename for d in docs if collection is None or d.collection == collection}


class _Hit(msgspec.Struct, frozen=True):
    document_id: uuid.UUID
    page_start: int
    page_end: int


async def evaluate(
    pool: Pool,
    services: Services,
    qrels: Sequence[Qrel],
    *,
    k: int = 5,
    modes: Sequence[Mode] = ("hybrid",),
    collection: str | None = None,
) -> Evaluation:
    """Search every qrel's query in each mode and score the hits against it."""
    targets = await resolve(pool, qrels, collection)
    results: dict[str, ModeResult] = {}
    for mode in modes:
        rows = []
        for qrel, target in zip(qrels, targets, strict=True):
            started = time.perf_counter()
            found = await search(
                pool, services, qrel.query, max(k, DEPTH), mode=mode, collection=collection
            )
            ms = (time.perf_counter() - started) * 1000
            rows.append(judged(qrel.query, qrel.kind, found.hits, target, round(ms, 3)))
        results[mode] = ModeResult(kinds=by_kind(rows, k), queries=rows)
    return Evaluation(k=k, collection=collection, modes=results)
