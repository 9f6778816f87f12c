"""Chunks of a PDF from its pages' layouts: sections, running headers, tables and boxes.

Pure logic for the chunk stage, beside :mod:`stages.text.chunking` (which cuts each run of
text). From the layouts the parser stored with each page:

- **Running headers and footers**: a short block near a page's top or bottom whose text
  (digits aside) recurs so on :data:`FURNITURE_MIN_PAGES` pages or more is left out of the
  chunks (the page's stored text keeps it).
- **Sections**: the outline's headings, where the document has an outline (each at the
  block its target points at, so a section starting mid-page starts there); else blocks
  set larger than the body's type (or bold, on one title-like line), a level per size.
  A chunk carries the heading path (``Part › Chapter › Section``) and never runs over a
  section's end: each section is cut on its own, a heading with no text of its own going
  with the section after it.
- **Tables**: the parser's Markdown rows (the first a header row and its rule) are packed
  between rows into chunks of at most the chunk size, each starting with the header. A
  table that opens a page (no text above it but running headers) right after a table
  that closed the page before (no text under it but running footers), with as many
  columns, continues it where its first row repeats the header (left out) or is not set
  apart as a header of its own (then it is a row); its pieces repeat the first page's
  header. A first row set apart (bold over plain rows, or above a rule of its own) that
  says something else heads another table.
- **Boxes**: each chunk keeps its blocks' rectangles, one per run of blocks of a column
  on a page: ``(page, x0, y0, x1, y1)``.
"""

from __future__ import annotations

import bisect
import hashlib
import itertools
import re
from collections import Counter
from collections.abc import Sequence
from typing import Protocol

import msgspec

from stages.text.chunking import ChunkConfig, ChunkSizes, cut, is_heading
from stages.text.tokens import CharCounter, TokenCounter

__all__ = [
    "BlockLike",
    "LayoutLike",
    "StructuredChunk",
    "furniture",
    "structured_chunks",
]

#: A block recurring on this many pages (at least) near their top or bottom is furniture.
FURNITURE_MIN_PAGES = 3
#: The share of a page's height at its top and bottom where running headers sit.
FURNITURE_BAND = 0.1
_FURNITURE_MAX_CHARS = 200
#: The share of the pages from a running header's first to its last that show it.
FURNITURE_DENSITY = 0.3
#: Blocks counted from a page's top and from its bottom as possible headers and footers.
_EDGE_BLOCKS = 2
#: Running headers sit at one height on every page, to within this many points.
_SAME_HEIGHT = 4.0
#: A heading's type is at least this much larger than the body's.
HEADING_SIZE_RATIO = 1.12
_MAX_LEVELS = 4
_PATH_JOIN = " › "
_LABEL_MAX = 300
_DIGITS = re.compile(r"\d+")
#: A numbered heading ("2.1 Rip currents") is as deep as its number.
_NUMBERED = re.compile(r"(\d+(?:\.\d+)*)\.?\s")
_SPACE = re.compile(r"\s+")
TABLE_HEADER, TABLE_ROW, TABLE_HEADER_APART = 1, 2, 3
_HEADERS = (TABLE_HEADER, TABLE_HEADER_APART)
#: A block this near a table's edge (points) is beside it, not above or under it.
_EDGE_SLACK = 1.0
#: A page's text extents where it has no text: nothing above or under anything.
_NO_TEXT = (float("-inf"), float("inf"))


class BlockLike(Protocol):
    @property
    def start(self) -> int: ...
    @property
    def end(self) -> int: ...
    @property
    def x0(self) -> float: ...
    @property
    def y0(self) -> float: ...
    @property
    def x1(self) -> float: ...
    @property
    def y1(self) -> float: ...
    @property
    def size(self) -> float: ...
    @property
    def bold(self) -> bool: ...
    @property
    def kind(self) -> int: ...


class HeadingLike(Protocol):
    @property
    def start(self) -> int: ...
    @property
    def level(self) -> int: ...
    @property
    def title(self) -> str: ...


class LayoutLike(Protocol):
    @property
    def width(self) -> float: ...
    @property
    def height(self) -> float: ...
    @property
    def blocks(self) -> Sequence[BlockLike]: ...
    @property
    def headings(self) -> Sequence[HeadingLike] | None: ...


class PageLike(Protocol):
    @property
    def page(self) -> int: ...
    @property
    def text(self) -> str: ...
    @property
    def layout(self) -> LayoutLike | None: ...


class StructuredChunk(msgspec.Struct, frozen=True, kw_only=True):
    """A chunk of a PDF: as :class:`stages.text.chunking.Chunk`, with its section label,
    its boxes (``(page, x0, y0, x1, y1)`` flat) and whether it is a table's piece."""

    text: str
    page_start: int
    page_end: int
    sha256: str
    tokens: int
    section: str | None
    boxes: list[float]
    table: bool = False


class _Item(msgspec.Struct):
    """A block as the chunker places it: its page, text and box (none: a page without a
    layout), and the section it is in."""

    page: int
    text: str
    box: tuple[float, float, float, float] | None
    path: str | None
    kind: int = 0


class _Run(msgspec.Struct):
    """Items chunked together: a section's text, or one table."""

    items: list[_Item]
    paths: list[str]
    table: bool = False
    #: A table's header printed again on the pages it continues on, by page.
    headers: dict[int, _Item] = msgspec.field(default_factory=dict)


def structured_chunks(
    pages: Sequence[PageLike],
    config: ChunkConfig | None = None,
    counter: TokenCounter | None = None,
) -> list[StructuredChunk]:
    """The chunks of a PDF's pages (in order), cut as the module says."""
    counter = counter or CharCounter()
    sizes = (config or ChunkConfig()).sizes(counter.chunk_tokens)
    runs = _merged(_runs(_items(pages, furniture(pages))), sizes, counter)
    by_run = _text_chunks(runs, sizes, counter)
    for i, run in enumerate(runs):
        if run.table:
            by_run[i] = _table_chunks(run, sizes, counter)
    return [c for i in range(len(runs)) for c in by_run.get(i, [])]


# -- running headers and footers -----------------------------------------------------------


def _key(text: str) -> str:
    return _SPACE.sub(" ", _DIGITS.sub("#", text)).strip().casefold()


def _edge_blocks(page: PageLike) -> list[int]:
    """Indexes of the page's blocks that could be a running header or footer: short, in
    the band at its top or bottom, and among the :data:`_EDGE_BLOCKS` outermost there."""
    layout = page.layout
    if layout is None or not layout.blocks:
        return []
    top, bottom = layout.height * FURNITURE_BAND, layout.height * (1 - FURNITURE_BAND)
    order = sorted(range(len(layout.blocks)), key=lambda i: layout.blocks[i].y0)
    outer = {*order[:_EDGE_BLOCKS], *order[-_EDGE_BLOCKS:]}
    return [
        i
        for i in sorted(outer)
        if (layout.blocks[i].y1 <= top or layout.blocks[i].y0 >= bottom)
        and layout.blocks[i].end - layout.blocks[i].start <= _FURNITURE_MAX_CHARS
    ]


def furniture(pages: Sequence[PageLike]) -> set[tuple[int, int]]:
    """``(page index, block index)`` of the running headers and footers: blocks at a
    page's edge whose text (digits aside) recurs at the same height on other pages, and
    densely (on :data:`FURNITURE_DENSITY` of the pages from its first to its last: a
    chapter's running head is on every other page of it; a "Syntax:" that happens to end
    a page now and then is not)."""
    if len(pages) < 2:
        return set()
    keys: list[list[tuple[int, tuple[str, int]]]] = []
    where: dict[tuple[str, int], list[int]] = {}
    for p, page in enumerate(pages):
        found = [(i, _edge_key(page, i)) for i in _edge_blocks(page)]
        keys.append(found)
        for k in {k for _, k in found if k[0]}:
            where.setdefault(k, []).append(p)
    least = min(FURNITURE_MIN_PAGES, len(pages))
    running = {
        k
        for k, on in where.items()
        if len(on) >= least and len(on) >= FURNITURE_DENSITY * (on[-1] - on[0] + 1)
    }
    return {(p, i) for p, found in enumerate(keys) for i, k in found if k in running}


def _edge_key(page: PageLike, index: int) -> tuple[str, int]:
    assert page.layout is not None
    b = page.layout.blocks[index]
    return _key(page.text[b.start : b.end]), round(b.y0 / _SAME_HEIGHT)


# -- sections ------------------------------------------------------------------------------


#: Per page: (start offset, level, title) of the headings starting there, in order.
_Marks = list[list[tuple[int, int, str]]]


def _marks(pages: Sequence[PageLike], skip: set[tuple[int, int]]) -> _Marks:
    """The outline's headings where the document has an outline, else the blocks whose
    type is a heading's (:func:`_type_levels`) and whose text reads as a title."""
    if any(p.layout is not None and p.layout.headings is not None for p in pages):
        return [
            [(h.start, h.level, h.title) for h in (p.layout.headings or ())] if p.layout else []
            for p in pages
        ]
    levels = _type_levels(pages, skip)
    out: _Marks = []
    for p, page in enumerate(pages):
        marks: list[tuple[int, int, str]] = []
        for i, b in enumerate(page.layout.blocks if page.layout and levels else ()):
            level = levels.get(_type_of(b))
            text = page.text[b.start : b.end]
            if level and (p, i) not in skip and is_heading(text):
                title = _title(text)
                number = _NUMBERED.match(title)
                depth = number.group(1).count(".") + 1 if number else level
                marks.append((b.start, min(depth, _MAX_LEVELS), title))
        out.append(marks)
    return out


def _type_of(b: BlockLike) -> tuple[float, bool]:
    return (round(b.size * 2) / 2, b.bold)


def _type_levels(
    pages: Sequence[PageLike], skip: set[tuple[int, int]]
) -> dict[tuple[float, bool], int]:
    """Heading types (size to the half point, bold) → level, largest first: sizes above
    the body's (its most common size, by characters, among each page's longest block),
    and bold at the body's size on title-like lines after them."""
    body: Counter[float] = Counter()
    candidates: Counter[tuple[float, bool]] = Counter()
    for p, page in enumerate(pages):
        typed = [
            b
            for i, b in enumerate(page.layout.blocks if page.layout else ())
            if b.size > 0 and (p, i) not in skip
        ]
        if not typed:
            continue
        longest = max(typed, key=lambda b: b.end - b.start)
        body[round(longest.size * 2) / 2] += longest.end - longest.start
        for b in typed:
            if b is not longest and is_heading(page.text[b.start : b.end]):
                candidates[_type_of(b)] += 1
    if not body:
        return {}
    size = body.most_common(1)[0][0]
    larger = sorted({t for t in candidates if t[0] >= size * HEADING_SIZE_RATIO}, reverse=True)
    bold = [t for t in candidates if t[1] and size <= t[0] < size * HEADING_SIZE_RATIO]
    ordered = larger + sorted(bold, reverse=True)
    return {t: min(level, _MAX_LEVELS) for level, t in enumerate(ordered, 1)}


def _title(text: str) -> str:
    return _SPACE.sub(" ", text).strip()[:120]


# -- items and runs ------------------------------------------------------------------------


def _items(pages: Sequence[PageLike], skip: set[tuple[int, int]]) -> list[_Item]:
    """Every block but furniture, in order, with the section path it is in."""
    marks = _marks(pages, skip)
    stack: list[str] = []
    out: list[_Item] = []
    for p, page in enumerate(pages):
        page_marks = sorted(marks[p], key=lambda m: m[0])
        layout = page.layout
        if layout is None:
            if page.text.strip():
                out.append(_Item(page.page, page.text.strip(), None, _path(stack)))
            continue
        m = 0
        for i, b in enumerate(layout.blocks):
            while m < len(page_marks) and page_marks[m][0] <= b.start:
                _, level, title = page_marks[m]
                stack = [*stack[: level - 1], title]
                m += 1
            if (p, i) in skip:
                continue
            box = (b.x0, b.y0, b.x1, b.y1)
            out.append(_Item(page.page, page.text[b.start : b.end], box, _path(stack), b.kind))
        for _, level, title in page_marks[m:]:  # headings after the page's last block
            stack = [*stack[: level - 1], title]
    return out


def _path(stack: list[str]) -> str | None:
    return _PATH_JOIN.join(stack) if stack else None


def _runs(items: list[_Item]) -> list[_Run]:
    """Items grouped: consecutive text of one section, or one table (from its header
    row); a section whose only text is its heading joins the next section's run."""
    runs: list[_Run] = []
    extents = _text_extents(items)
    for item in items:
        last = runs[-1] if runs else None
        if last is not None and _continues(last, item, extents):
            first = _first_line(item)
            if first != _first_line(last.items[0]):  # not the header repeated
                last.items.append(_Item(item.page, first, item.box, item.path, TABLE_ROW))
            else:
                last.headers[item.page] = item
            last.paths.extend(p for p in _paths(item) if p not in last.paths)
            continue
        if last is None or _starts_run(last, item):
            runs.append(_Run([item], _paths(item), table=item.kind != 0))
            continue
        last.items.append(item)
        last.paths.extend(p for p in _paths(item) if p not in last.paths)
    return runs


def _text_extents(items: list[_Item]) -> dict[int, tuple[float, float]]:
    """Per page: the lowest top and the highest foot of its text blocks (running headers
    and footers are not items), for telling whether text stands above or under a
    table."""
    out: dict[int, tuple[float, float]] = {}
    for item in items:
        if item.kind == 0 and item.box is not None:
            lowest_top, highest_foot = out.get(item.page, _NO_TEXT)
            out[item.page] = (max(lowest_top, item.box[1]), min(highest_foot, item.box[3]))
    return out


def _continues(last: _Run, item: _Item, extents: dict[int, tuple[float, float]]) -> bool:
    """Whether ``item``, a table's first row, continues the table ``last`` from the page
    before: as many columns, no text under the one nor above the other (running headers
    and footers aside), and a first row that repeats the header or is not set apart as a
    header of its own."""
    if not (
        item.kind in _HEADERS
        and last.table
        and last.items[0].kind in _HEADERS
        and last.items[-1].page + 1 == item.page
        and _columns(last.items[0].text) == _columns(item.text)
    ):
        return False
    if not _ends_page(last.items[-1], extents) or not _opens_page(item, extents):
        return False
    return item.kind != TABLE_HEADER_APART or _first_line(item) == _first_line(last.items[0])


def _ends_page(row: _Item, extents: dict[int, tuple[float, float]]) -> bool:
    """Whether no text block starts under ``row`` on its page."""
    lowest_top = extents.get(row.page, _NO_TEXT)[0]
    return row.box is None or lowest_top < row.box[3] - _EDGE_SLACK


def _opens_page(row: _Item, extents: dict[int, tuple[float, float]]) -> bool:
    """Whether no text block ends above ``row`` on its page."""
    highest_foot = extents.get(row.page, _NO_TEXT)[1]
    return row.box is None or highest_foot > row.box[1] + _EDGE_SLACK


def _first_line(item: _Item) -> str:
    return item.text.split("\n")[0]


def _columns(row: str) -> int:
    return len(row.split("\n")[0].strip().strip("|").split(" | "))


def _starts_run(last: _Run, item: _Item) -> bool:
    if item.kind in _HEADERS:
        return True
    if item.kind == TABLE_ROW:
        return not last.table
    if last.table:
        return True
    return last.paths[-1:] != _paths(item) and not _bare_heading(last)


def _after_common(before: str, path: str) -> str:
    """``path`` without the headings it shares with ``before`` ("A › B › C" after
    "A › B › X": "C")."""
    a, b = before.split(_PATH_JOIN), path.split(_PATH_JOIN)
    n = 0
    while n < min(len(a), len(b)) - 1 and a[n] == b[n]:
        n += 1
    return _PATH_JOIN.join(b[n:])


def _paths(item: _Item) -> list[str]:
    return [item.path] if item.path else []


def _bare_heading(run: _Run) -> bool:
    return len(run.items) == 1 and is_heading(run.items[0].text)


def _label(paths: list[str]) -> str | None:
    """The run's section label: its paths, each once, without one that a later one
    continues ("A" before "A › B")."""
    unique = list(dict.fromkeys(paths))
    kept = [
        p
        for i, p in enumerate(unique)
        if not any(q.startswith(p + _PATH_JOIN) for q in unique[i + 1 :])
    ]
    if not kept:
        return None
    label = " | ".join([kept[0], *(_after_common(a, b) for a, b in itertools.pairwise(kept))])
    return label if len(label) <= _LABEL_MAX else label[: _LABEL_MAX - 1] + "…"


# -- text runs -----------------------------------------------------------------------------


def _merged(runs: list[_Run], sizes: ChunkSizes, counter: TokenCounter) -> list[_Run]:
    """The runs, a section's run of fewer tokens than ``min_tokens_before_heading``
    joined with the text run after it (as the text chunker lets a chunk grow through a
    heading while it is that small): no chunk of a few words only."""
    least = sizes.min_tokens_before_heading
    maybe = [
        i
        for i, r in enumerate(runs)
        if not r.table and sum(len(it.text) for it in r.items) <= 8 * least
    ]
    texts = ["\n\n".join(it.text for it in runs[i].items) for i in maybe]
    counts = counter.counts(texts) if texts else []
    small = {i for i, n in zip(maybe, counts, strict=True) if n < least}
    out: list[_Run] = []
    open_small = False
    for i, run in enumerate(runs):
        if out and open_small and not run.table:
            out[-1].items.extend(run.items)
            out[-1].paths.extend(p for p in run.paths if p not in out[-1].paths)
            open_small = i in small
            continue
        out.append(run)
        open_small = i in small
    return out


def _text_chunks(
    runs: list[_Run], sizes: ChunkSizes, counter: TokenCounter
) -> dict[int, list[StructuredChunk]]:
    """The text runs' chunks by run: all cut at once by :func:`stages.text.chunking.cut`
    (one token count of the document), a part per page of a run and a hard break at
    each run's start; each chunk with the boxes of the blocks it overlaps."""
    parts, spans, owner, breaks = _parts(runs)
    labels = [_label(r.paths) for r in runs]
    out: dict[int, list[StructuredChunk]] = {}
    for window in cut(parts, sizes, counter, breaks):
        local = spans[window.first : window.first + len(window.offsets)]
        for start, end, tokens in window.spans:
            part = window.first + bisect.bisect_right(window.offsets, start) - 1
            touched = _blocks_in(window.offsets, local, start, end)
            pages = [it.page for it in touched] or [parts[part][0]]
            text = window.text[start:end]
            run = owner[part]
            label = _label([i.path for i in touched if i.path]) if touched else labels[run]
            chunk = _made(text, min(pages), max(pages), tokens, label, touched)
            out.setdefault(run, []).append(chunk)
    return out


def _parts(
    runs: list[_Run],
) -> tuple[list[tuple[int, str]], list[list[tuple[int, int, _Item]]], list[int], list[int]]:
    """A part per page of each text run (its items' texts joined by blank lines); each
    part's items with their offsets in it; the run each part is of; the parts that
    start a run."""
    parts: list[tuple[int, str]] = []
    spans: list[list[tuple[int, int, _Item]]] = []
    owner: list[int] = []
    breaks: list[int] = []
    for r, run in enumerate(runs):
        if run.table:
            continue
        breaks.append(len(parts))
        texts: list[str] = []
        for item in run.items:
            if not texts or parts[-1][0] != item.page:
                if texts:
                    parts[-1] = (parts[-1][0], "\n\n".join(texts))
                parts.append((item.page, ""))
                spans.append([])
                owner.append(r)
                texts, at = [], 0
            spans[-1].append((at, at + len(item.text), item))
            texts.append(item.text)
            at += len(item.text) + 2
        parts[-1] = (parts[-1][0], "\n\n".join(texts))
    return parts, spans, owner, breaks


def _blocks_in(
    offsets: list[int],
    spans: list[list[tuple[int, int, _Item]]],
    start: int,
    end: int,
) -> list[_Item]:
    """The items whose text overlaps ``[start, end)`` of the window's joined text."""
    out: list[_Item] = []
    part = max(bisect.bisect_right(offsets, start) - 1, 0)
    while part < len(offsets) and offsets[part] < end:
        at = offsets[part]
        for s, e, item in spans[part]:
            if at + s < end and at + e > start:
                out.append(item)
        part += 1
    return out


def _made(
    text: str,
    first: int,
    last: int,
    tokens: int,
    label: str | None,
    items: list[_Item],
    table: bool = False,
) -> StructuredChunk:
    return StructuredChunk(
        text=text,
        page_start=first,
        page_end=last,
        sha256=hashlib.sha256(text.encode()).hexdigest(),
        tokens=tokens,
        section=label,
        boxes=merged_boxes(items),
        table=table,
    )


def merged_boxes(items: Sequence[_Item]) -> list[float]:
    """The items' boxes, flat ``(page, x0, y0, x1, y1)``: consecutive ones of a page
    whose spans across overlap (a column) merged into one rectangle."""
    out: list[list[float]] = []
    for item in items:
        if item.box is None:
            continue
        x0, y0, x1, y1 = item.box
        last = out[-1] if out else None
        if last and last[0] == item.page and x0 < last[3] and x1 > last[1]:
            last[1:] = [min(last[1], x0), min(last[2], y0), max(last[3], x1), max(last[4], y1)]
        else:
            out.append([float(item.page), x0, y0, x1, y1])
    return [v for box in out for v in box]


# -- tables --------------------------------------------------------------------------------


def _table_chunks(run: _Run, sizes: ChunkSizes, counter: TokenCounter) -> list[StructuredChunk]:
    """The table in pieces of whole rows, each starting with the header row (and its
    rule), each at most the chunk size where a row fits with the header."""
    items = run.items
    header = items[0] if items[0].kind in _HEADERS else None
    rows = items[1:] if header else items
    head = [header] if header else []
    counts = counter.counts([header.text if header else "", *(r.text for r in rows)])
    head_tokens, row_tokens = counts[0], counts[1:]
    label = _label(run.paths)
    pieces: list[list[_Item]] = [[]]
    size = head_tokens
    for row, n in zip(rows, row_tokens, strict=True):
        if pieces[-1] and size + n + 1 > sizes.max_tokens:
            pieces.append([])
            size = head_tokens
        pieces[-1].append(row)
        size += n + 1
    out: list[StructuredChunk] = []
    for piece in pieces:
        if not piece and not head:
            continue
        text = "\n".join(i.text for i in [*head, *piece])
        [tokens] = counter.counts([text])
        placed = _placed(run, head, piece)
        pages = [i.page for i in placed]
        out.append(_made(text, min(pages), max(pages), tokens, label, placed, True))
    return out


def _placed(run: _Run, head: list[_Item], piece: list[_Item]) -> list[_Item]:
    """The items whose pages and boxes a table's piece cites: its header and rows; on a
    page the table continues on, its rows and the header printed there, if it is."""
    if not piece or not head or head[0].page == piece[0].page:
        return [*head, *piece]
    again = run.headers.get(piece[0].page)
    return [again, *piece] if again else piece
