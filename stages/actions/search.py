"""Search: the query against the live vector collection (its dense vectors, its keywords,
or both fused), then the hits as PostgreSQL has them now.

The index ranks; PostgreSQL answers: a hit shows its document's current name, source URI
and collection, and only while its point is of the generation that answers search for a
document that has not failed (``documents.indexed_generation``), in one query for all
hits. A point of a deleted document or of a superseded version is dropped and counted
(``stale``), left for ``verify --repair``.

PostgreSQL also answers every filter (:class:`Filters`): the documents one allows are
read there first and the index searches only their points; the chunk filters (pages, a
section) are applied to the hits, the index asked deeper while too few pass. Nothing of
a filter lives in the index, so changing a document's metadata writes nothing there.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, get_args

import msgspec

from runtime.api import ConfigurationError, MissingInput, Pool
from stages.actions.rerank import RERANK_CANDIDATES
from stages.actions.rerank import rerank as rerank_hits
from stages.db import search as search_db
from stages.db.model_switch import Live, live
from stages.db.search import AnswerRow, DocumentFilter, HitRef
from stages.ports.collections import check_collection_name
from stages.ports.http import Answer as Answer
from stages.ports.http import Box as Box
from stages.ports.services import Services
from stages.ports.vector_index import (
    DOCUMENT_FIELD,
    GENERATION_FIELD,
    Hit,
    Keywords,
    Query,
)
from stages.text.keywords import query_vector

Mode = Literal["hybrid", "dense", "keyword"]
#: The search modes, the default first.
MODES: tuple[Mode, ...] = get_args(Mode)
#: Points asked of the index beyond the limit, for hits PostgreSQL drops.
SPARE = 10
#: With chunk filters, the index is asked this many times deeper while too few hits
#: pass, up to :data:`MAX_DEPTH` points.
DEEPER = 4
MAX_DEPTH = 4000


class Filters(msgspec.Struct, frozen=True, kw_only=True):
    """What a search may answer from (each None or empty: no filter; all must hold)."""

    #: These documents only.
    documents: tuple[uuid.UUID, ...] = ()
    #: Documents of this sync source (its URI: an absolute folder path, s3://bucket/prefix).
    source: str | None = None
    #: Documents whose path or key in their source (else their file name) starts so.
    path_prefix: str | None = None
    #: Documents of these media types (``application/pdf``, ``text/markdown``…).
    media_types: tuple[str, ...] = ()
    #: The document's date (its file's modification time, else when it was submitted)
    #: from ``since`` (inclusive) to ``until`` (exclusive).
    since: datetime | None = None
    until: datetime | None = None
    #: Documents whose metadata holds every one of these key/values.
    metadata: Mapping[str, Any] | None = None
    #: Chunks on these pages (first, last; 1-based, inclusive; any overlap).
    pages: tuple[int | None, int | None] = (None, None)
    #: Chunks of a section whose label starts with this (case-insensitive).
    section: str | None = None

    def of_documents(
        self, collection: str | None, principals: tuple[str, ...] | None = None
    ) -> DocumentFilter | None:
        """The document-level part, or None when there is none (a collection alone is
        the index's own tenant filter; the caller's principals alone are checked with the
        hits, :func:`search`)."""
        narrowed = (
            self.documents, self.source, self.path_prefix, self.media_types, self.since,
            self.until, self.metadata,
        )  # fmt: skip
        if not any(v for v in narrowed):
            return None
        return DocumentFilter(
            collection=collection, documents=self.documents, source=self.source,
            path_prefix=self.path_prefix, media_types=self.media_types, since=self.since,
            until=self.until, metadata=self.metadata, principals=principals,
        )  # fmt: skip

    @property
    def of_chunks(self) -> bool:
        return self.pages != (None, None) or self.section is not None


NO_FILTERS = Filters()


def filters_of(
    *,
    documents: Sequence[str] = (),
    source: str | None = None,
    path_prefix: str | None = None,
    media_types: Sequence[str] = (),
    since: str | None = None,
    until: str | None = None,
    metadata: Sequence[str] = (),
    pages: str | None = None,
    section: str | None = None,
) -> Filters:
    """:class:`Filters` from the words of a command line or a query string (the CLI and
    the HTTP API take the same), or one line saying which is wrong."""
    return Filters(
        documents=tuple(_document_id(d) for d in documents),
        source=source or None,
        path_prefix=path_prefix or None,
        media_types=tuple(media_types),
        since=_date("since", since),
        until=_date("until", until),
        metadata=_metadata_filter(metadata),
        pages=_pages(pages),
        section=section or None,
    )


def _metadata_filter(pairs: Sequence[str]) -> dict[str, Any] | None:
    """Every ``KEY=VALUE`` a document's metadata must hold. A key given with two values
    wants both: its values become a list, which a document's single value never contains
    (PostgreSQL's ``@>``), so such a filter matches no document rather than the last value."""
    wanted: dict[str, Any] = {}
    for key, value in map(_pair, pairs):
        held = wanted.setdefault(key, value)
        if held != value and not (isinstance(held, list) and value in held):
            wanted[key] = [*(held if isinstance(held, list) else [held]), value]
    return wanted or None


def _document_id(text: str) -> uuid.UUID:
    try:
        return uuid.UUID(text)
    except ValueError:
        raise ConfigurationError(f"document: not a document id: {text[:80]!r}") from None


def _date(name: str, text: str | None) -> datetime | None:
    """An ISO date or time; without a zone, UTC."""
    if not text:
        return None
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise ConfigurationError(
            f"{name}: not a date or time (YYYY-MM-DD or YYYY-MM-DDTHH:MM): {text[:80]!r}"
        ) from None
    try:  # in UTC, as PostgreSQL compares it (a time near year 1 may leave the range)
        return when.astimezone(UTC) if when.tzinfo else when.replace(tzinfo=UTC)
    except OverflowError:
        raise ConfigurationError(f"{name}: out of the range of dates: {text[:80]!r}") from None


def _pair(text: str) -> tuple[str, str]:
    key, equals, value = text.partition("=")
    if not equals or not key.strip():
        raise ConfigurationError(f"metadata: expected KEY=VALUE, got {text[:80]!r}")
    return key.strip(), value


def _pages(text: str | None) -> tuple[int | None, int | None]:
    """``7`` (one page), ``3-9``, ``3-`` or ``-9``."""
    if not text:
        return (None, None)
    first, dash, last = text.partition("-")
    try:
        lo = int(first) if first.strip() else None
        hi = (int(last) if last.strip() else None) if dash else lo
    except ValueError:
        lo = hi = -1
    if (lo is not None and lo < 1) or (hi is not None and hi < 1) or (lo or 0) > (hi or 1 << 30):
        raise ConfigurationError(f"pages: expected N, FIRST-LAST, FIRST- or -LAST, got {text!r}")
    return (lo, hi)


class SearchWords(msgspec.Struct, frozen=True, kw_only=True):
    """Search's filters as text, as a query string or a tool call gives them (the names of
    ``search``'s options; blanks, as an HTML form sends for an empty field, are no
    filter)."""

    document: tuple[str, ...] = ()
    source: str | None = None
    path: str | None = None
    type: tuple[str, ...] = ()
    since: str | None = None
    until: str | None = None
    meta: tuple[str, ...] = ()
    pages: str | None = None
    section: str | None = None


NO_WORDS = SearchWords()
#: ``pages`` as the doors take it: ``7``, ``3-9``, ``3-`` or ``-9``.
PAGES = "^[0-9]*(-[0-9]*)?$"
_PAGES = re.compile(PAGES)


def filters_of_words(words: SearchWords) -> Filters:
    """:class:`Filters` from the words of a request (the HTTP API's, the MCP server's),
    or one line saying which is wrong (ConfigurationError)."""
    given = msgspec.structs.asdict(words)
    if any("\x00" in v for v in _texts(given.values())):
        raise ConfigurationError("a search filter must not contain NUL characters")
    if words.pages and not _PAGES.fullmatch(words.pages):
        raise ConfigurationError(
            f"pages: expected N, FIRST-LAST, FIRST- or -LAST, got {words.pages!r}"
        )
    found = filters_of(
        documents=_filled(words.document),
        source=_source(words.source),
        path_prefix=words.path or None,
        media_types=_filled(words.type),
        since=words.since or None,
        until=words.until or None,
        metadata=_filled(words.meta),
        pages=words.pages or None,
        section=words.section or None,
    )
    for name, when in (("since", found.since), ("until", found.until)):
        if when is not None and not _in_range(when):
            raise ConfigurationError(f"{name}: out of the range of dates")
    return found


def _texts(values: Any) -> list[str]:
    out: list[str] = []
    for v in values:
        out.extend(v if isinstance(v, tuple) else [v] if isinstance(v, str) else [])
    return out


def _filled(values: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(v for v in values if v.strip())


def _source(uri: str | None) -> str | None:
    """A sync source's URI as ``sync`` keeps it: ``s3://…`` as given, a folder resolved."""
    if not uri:
        return None
    return uri if "://" in uri else str(Path(uri).resolve())


def _in_range(when: datetime) -> bool:
    """Whether ``when`` is a time PostgreSQL can take (in UTC, still a datetime)."""
    try:
        when.astimezone(UTC)
    except OverflowError:
        return False
    return True


def boxes_of(flat: list[float] | None) -> list[Box]:
    """Stored boxes (``(page, x0, y0, x1, y1)`` flat) as :class:`Box` es."""
    if not flat:
        return []
    return [
        Box(int(flat[i]), *(round(v, 1) for v in flat[i + 1 : i + 5]))
        for i in range(0, len(flat) - 4, 5)
    ]


class Answers(msgspec.Struct, kw_only=True):
    hits: list[Answer]
    mode: str
    #: The physical collection that answered (the live embedding model's).
    vector_collection: str
    #: Points the index returned that no longer count (deleted or superseded documents).
    stale: int = 0
    #: Whether a reranker ordered the hits (``RAGLINE_RERANK``; their score is then its).
    reranked: bool = False
    #: Why the hits are in fused order although a reranker is configured.
    note: str | None = None


async def search(
    pool: Pool,
    services: Services,
    text: str,
    limit: int,
    *,
    mode: Mode = "hybrid",
    collection: str | None = None,
    filters: Filters = NO_FILTERS,
    rerank: bool = True,
    principals: Sequence[str] | None = None,
) -> Answers:
    """The ``limit`` best chunks for ``text`` (of one ``collection`` when given) that
    ``filters`` allow; reordered by the reranker when one is configured and ``rerank``.
    With ``principals`` (a caller's), only documents such a caller may read: those
    without readers, and those whose readers include one of them."""
    caller = None if principals is None else tuple(principals)
    among = await _allowed(pool, filters, collection, caller)
    if among is not None and not among:  # no document passes: nothing to rank
        where = await live(pool, services)
        return Answers(hits=[], mode=mode, vector_collection=where.vector_collection)
    reranking = services.reranker is not None and rerank
    depth = 2 * max(limit, RERANK_CANDIDATES if reranking else 0) + SPARE
    while True:
        where, hits = await _ranked(pool, services, text, depth, mode, collection, among)
        refs = [_ref(h) for h in hits]
        rows = await search_db.answer_rows(pool, refs, *_chunks(filters), principals=caller)
        exhausted = len(hits) < depth or depth >= MAX_DEPTH
        trimmed = filters.of_chunks or caller is not None  # hits dropped for a filter
        if len(rows) >= limit or not trimmed or exhausted:
            break
        depth = min(depth * DEEPER, MAX_DEPTH)
    answers = [_answer(hits[row.rank - 1], row) for row in rows]
    found = Answers(
        hits=answers[:limit],
        mode=mode,
        vector_collection=where.vector_collection,
        stale=len(hits) - len(rows) if not trimmed else 0,
    )
    if reranking:
        await _rerank(pool, services, text, answers, limit, found)
    return found


async def _rerank(
    pool: Pool, services: Services, text: str, answers: list[Answer], limit: int, out: Answers
) -> None:
    """``out``'s hits ordered by the reranker, from the first :data:`RERANK_CANDIDATES`
    of ``answers`` (or the fused order, with the reason in ``out.note``)."""
    reranker, spec = services.reranker, services.rerank_provider
    assert reranker is not None and spec is not None
    candidates = answers[: max(limit, RERANK_CANDIDATES)]
    texts = [a.text for a in candidates]
    done = await rerank_hits(pool, reranker, spec, text, texts, limit)
    if done.order is None:
        out.note = done.note
        return
    out.hits = [msgspec.structs.replace(candidates[i], score=round(s, 6)) for i, s in done.order]
    out.reranked = True


async def _allowed(
    pool: Pool, filters: Filters, collection: str | None, caller: tuple[str, ...] | None
) -> tuple[str, ...] | None:
    """The documents the filters allow (ids as text), or None for any."""
    where = filters.of_documents(collection, caller)
    if where is None:
        return None
    return tuple(str(d) for d in await search_db.candidate_documents(pool, where))


def _chunks(filters: Filters) -> tuple[tuple[int | None, int | None], str | None]:
    return filters.pages, filters.section


async def _ranked(
    pool: Pool,
    services: Services,
    text: str,
    depth: int,
    mode: Mode,
    tenant: str | None,
    among: tuple[str, ...] | None = None,
) -> tuple[Live, list[Hit]]:
    """The index's ranking from the live collection. If the collection is deleted
    between reading the alias and searching it (a model switch finished), the alias is
    read again: an answer always comes whole from the one collection that was live."""
    where = await live(pool, services)
    for _ in range(3):
        query = msgspec.structs.replace(await _query(services, where, text, mode), documents=among)
        try:
            hits = await services.index.search(where.vector_collection, query, depth, tenant=tenant)
            return where, hits
        except MissingInput:
            again = await live(pool, services)
            if again == where:  # nothing indexed yet with this model, or no keyword side
                if mode != "dense" and await _has_points(services, where):
                    raise
                return where, []
            where = again
    return where, []


async def _query(services: Services, where: Live, text: str, mode: Mode) -> Query:
    vector = None
    if mode != "keyword":
        [vector] = await services.embedder_for(where.model).embed([text], "search_query")
    keywords = Keywords(*query_vector(text)) if mode != "dense" else None
    return Query(vector=vector, keywords=keywords)


async def _has_points(services: Services, where: Live) -> bool:
    try:
        return await services.index.count(where.vector_collection) > 0
    except MissingInput:
        return False


def _ref(hit: Hit) -> HitRef:
    payload = hit.payload
    return HitRef(
        document_id=uuid.UUID(str(payload[DOCUMENT_FIELD])),
        ordinal=int(payload["ordinal"]),
        generation=int(payload[GENERATION_FIELD]),
    )


def _answer(hit: Hit, row: AnswerRow) -> Answer:
    """PostgreSQL's document, and the chunk's row where it is the one the point was
    built from (else the point's own copy)."""
    own = hit.payload
    chunk = row.kind is not None
    return Answer(
        score=round(hit.score, 6),
        document_id=row.document_id,
        filename=row.filename,
        uri=row.source_uri,
        collection=row.collection,
        media_type=row.media_type,
        ordinal=row.ordinal,
        generation=row.generation,
        kind=row.kind if chunk and row.kind else str(own.get("kind", "text")),
        page_start=row.page_start if chunk and row.page_start else int(own["page_start"]),
        page_end=row.page_end if chunk and row.page_end else int(own["page_end"]),
        section=row.section if chunk else own.get("section"),
        text=row.text if chunk and row.text is not None else str(own.get("text", "")),
        metadata=row.user_metadata,
        boxes=boxes_of(row.boxes) if chunk else [],
        table=bool(row.is_table) if chunk else bool(own.get("table", False)),
    )


async def ask(
    pool: Pool,
    services: Services,
    text: str,
    limit: int,
    *,
    mode: str = MODES[0],
    collection: str | None = None,
    words: SearchWords = NO_WORDS,
    principals: Sequence[str] | None = None,
) -> Answers:
    """:func:`search` for a request whose every part is text from outside (the HTTP API,
    the web view, the MCP server): each checked first, a bad one is one line
    (ConfigurationError); MissingInput when the live collection has no keyword side."""
    if not text.strip():
        raise ConfigurationError("the query must not be empty")
    if mode not in MODES:
        raise ConfigurationError(f"mode must be one of {', '.join(MODES)}")
    tenant = None if collection is None else check_collection_name(collection)
    within = filters_of_words(words)
    return await search(
        pool,
        services,
        text,
        limit,
        mode=mode,
        collection=tenant,
        filters=within,
        principals=principals,
    )
