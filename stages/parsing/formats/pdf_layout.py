"""A PDF page's layout for the chunker: its text blocks with their boxes, where the
outline's sections start on it, and the type of the blocks that could be headings.

The outline is read once per document from MuPDF's own tree (its entries' targets are
resolved to a page and a point there; PyMuPDF's ``get_toc`` builds the same in Python at
about 15 times the cost). Where a document has no outline, the size and weight of each
short block's first character and of the page's longest block are read from MuPDF's text
page, so the chunker can tell headings by type (a few MuPDF calls a block, on those
blocks only). Tables: :mod:`stages.parsing.formats.pdf_tables`.
"""

# mypy: disallow-untyped-calls=False

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence
from typing import Any

import pymupdf
from pymupdf import mupdf

from stages.parsing.formats.pdf_tables import Found, Table, markdown_rows
from stages.parsing.formats.unit import Block, Heading, Layout

TABLE_HEADER, TABLE_ROW, TABLE_HEADER_APART = 1, 2, 3
#: A column's block may reach this far past the page's middle (points).
_GUTTER = 6.0
#: Each column holds this many characters at least before a page counts as two columns.
_COLUMN_MIN_CHARS = 120

__all__ = ["Outline", "Target", "outline", "page_layout"]

#: An outline of more entries is read up to this many (a bomb has millions).
MAX_OUTLINE_ENTRIES = 20_000
#: A block this long or longer is never a heading: its type is not read (but the page's
#: longest block is, as the body's sample).
_HEADING_MAX_CHARS = 160
#: A target point this far below a block's top still lands on it (points).
_TARGET_SLACK = 3.0
#: Blocks at or below a target among which its title is looked for.
_TITLE_LOOKAHEAD = 3
_SPACE = re.compile(r"\s+")
_ERRORS = (RuntimeError, ValueError, pymupdf.mupdf.FzErrorBase)

#: An outline entry's target on its page: (y of the point, level, title).
Target = tuple[float, int, str]
#: Page index (0-based) → the targets on it, in outline order.
Outline = dict[int, list[Target]]


def outline(doc: pymupdf.Document) -> Outline | None:
    """The document's outline by page; None when it has none (or it cannot be read)."""
    try:
        root = mupdf.fz_load_outline(doc.this)
    except _ERRORS:
        return None
    if not root.m_internal:
        return None
    found: Outline = {}
    count = 0
    stack: list[tuple[Any, int]] = [(root.m_internal, 1)]
    while stack and count < MAX_OUTLINE_ENTRIES:
        node, level = stack.pop()
        if node.next:
            stack.append((node.next, level))
        if node.down:
            stack.append((node.down, level + 1))
        count += 1
        page = _page_of(doc, node)
        title = _SPACE.sub(" ", node.title or "").strip()[:200]
        if page >= 0 and title:
            found.setdefault(page, []).append((float(node.y), level, title))
    return found


def _page_of(doc: pymupdf.Document, node: Any) -> int:
    try:
        return int(mupdf.ll_fz_page_number_from_location(doc.this.m_internal, node.page))
    except _ERRORS:
        return -1


def page_layout(
    blocks: Sequence[tuple[Any, ...]],
    textpage: Any,
    targets: list[Target] | None,
    tables: Found | None = None,
) -> tuple[str, Layout]:
    """The page's text (text blocks joined by blank lines, as
    :func:`stages.parsing.formats.pdf_text.text_at` gives it, a table's rows one a line in
    place of its cells' blocks) and its layout. ``targets``: the outline's entries on
    this page (None: the document has no outline, so the type of short blocks is read
    instead)."""
    parts: list[str] = []
    out: list[Block] = []
    texts = [b for b in blocks if b[6] == 0]
    if tables is not None:
        texts = _outside(texts, tables)
    for b in texts:
        text = b[4].strip()
        if "\x00" in text:
            # Some fonts map glyphs to U+0000; PostgreSQL text cannot hold it.
            text = text.replace("\x00", "").strip()
        parts.append(text)
        out.append(Block(0, len(text), b[0], b[1], b[2], b[3]))
    if targets is None:
        out = _typed(out, parts, textpage)
    kept = [(b, t) for b, t in zip(out, parts, strict=True) if t]
    box = textpage.m_internal.mediabox
    kept = in_columns(kept, box.x1 - box.x0)
    if tables is not None:
        kept = _with_tables(kept, tables.tables)
    text, laid = _rejoined(kept)
    headings = None if targets is None else _headings(laid, text, targets)
    width, height = _r(box.x1 - box.x0), _r(box.y1 - box.y0)
    return text, Layout(width=width, height=height, blocks=laid, headings=headings)


def _with_tables(kept: list[tuple[Block, str]], tables: Sequence[Table]) -> list[tuple[Block, str]]:
    """The blocks with each table's rows in place of the blocks inside it (where the
    first of them was; after the blocks above it when none was)."""
    out: list[tuple[Block, str]] = []
    placed: set[int] = set()
    for block, text in kept:
        inside = _table_of(block, tables)
        if inside is None:
            out.append((block, text))
        elif inside not in placed:
            placed.add(inside)
            out.extend(_rows(tables[inside]))
    for i, table in enumerate(tables):
        if i not in placed:
            at = sum(1 for b, _ in out if b.y1 <= table.box[1])
            out[at:at] = _rows(table)
    return out


def in_columns(kept: list[tuple[Block, str]], width: float) -> list[tuple[Block, str]]:
    """The blocks in reading order where the page is set in two columns and the content
    stream interleaves them (left, right, left...): in each band between blocks that
    span both columns, the left column top to bottom, then the right. Any other page's
    blocks stay in the content stream's order, which is nearly every producer's."""
    middle = width / 2
    sides = [_side(b, middle) for b, _ in kept]
    if not _interleaved(sides) or not _both_filled(kept, sides):
        return kept
    spanning = sorted(b.y0 for (b, _), side in zip(kept, sides, strict=True) if side == 0)

    def place(entry: tuple[tuple[Block, str], int]) -> tuple[int, int, float]:
        (b, _), side = entry
        band = bisect.bisect_left(spanning, b.y0)
        return (band, side if side else 3, b.y0)

    return [e for e, _ in sorted(zip(kept, sides, strict=True), key=place)]


def _side(b: Block, middle: float) -> int:
    """1 left column, 2 right column, 0 across the middle."""
    if b.x1 <= middle + _GUTTER:
        return 1
    if b.x0 >= middle - _GUTTER:
        return 2
    return 0


def _interleaved(sides: list[int]) -> bool:
    """Whether a left-column block follows a right-column one with no spanning block
    between (the content stream reads across the columns)."""
    seen_right = False
    for side in sides:
        if side == 0:
            seen_right = False
        elif side == 2:
            seen_right = True
        elif seen_right:
            return True
    return False


def _both_filled(kept: list[tuple[Block, str]], sides: list[int]) -> bool:
    chars = {1: 0, 2: 0}
    for (_, text), side in zip(kept, sides, strict=True):
        if side:
            chars[side] += len(text)
    return min(chars.values()) >= _COLUMN_MIN_CHARS


def _outside(texts: list[tuple[Any, ...]], found: Found) -> list[tuple[Any, ...]]:
    """The text blocks, one that runs into a table (its middle outside it) read again
    from the page's words outside the tables: no cell's words twice."""
    out: list[tuple[Any, ...]] = []
    boxes = [t.box for t in found.tables]
    for b in texts:
        inside = _table_of(Block(0, 0, b[0], b[1], b[2], b[3]), found.tables) is not None
        if inside or not any(_overlap(b, box) for box in boxes):
            out.append(b)
            continue
        out.append(_without(b, found.words, boxes))
    return out


def _overlap(b: tuple[Any, ...], box: tuple[float, float, float, float]) -> bool:
    return bool(b[0] < box[2] and b[2] > box[0] and b[1] < box[3] and b[3] > box[1])


def _without(
    b: tuple[Any, ...], words: list[tuple[Any, ...]], boxes: list[tuple[float, float, float, float]]
) -> tuple[Any, ...]:
    kept = [
        w
        for w in words
        if w[5] == b[5]
        and not any(
            x0 <= (w[0] + w[2]) / 2 <= x1 and y0 <= (w[1] + w[3]) / 2 <= y1
            for x0, y0, x1, y1 in boxes
        )
    ]
    if not kept:
        return (*b[:4], "", *b[5:])
    lines: dict[int, list[str]] = {}
    for w in kept:
        lines.setdefault(w[6], []).append(w[4])
    text = "\n".join(" ".join(line) for line in lines.values())
    x0, y0 = min(w[0] for w in kept), min(w[1] for w in kept)
    x1, y1 = max(w[2] for w in kept), max(w[3] for w in kept)
    return (x0, y0, x1, y1, text, *b[5:])


def _table_of(block: Block, tables: Sequence[Table]) -> int | None:
    cx, cy = (block.x0 + block.x1) / 2, (block.y0 + block.y1) / 2
    for i, t in enumerate(tables):
        x0, y0, x1, y1 = t.box
        if x0 <= cx <= x1 and y0 <= cy <= y1:
            return i
    return None


def _rows(table: Table) -> list[tuple[Block, str]]:
    lines = markdown_rows(table)
    out: list[tuple[Block, str]] = []
    header = TABLE_HEADER_APART if table.header_apart else TABLE_HEADER
    for i, ((box, _), line) in enumerate(zip(table.rows, lines, strict=True)):
        x0, y0, x1, y1 = box
        out.append((Block(0, 0, x0, y0, x1, y1, kind=header if i == 0 else TABLE_ROW), line))
    return out


def _r(value: float) -> float:
    return round(float(value), 1)


def _rejoined(kept: list[tuple[Block, str]]) -> tuple[str, list[Block]]:
    """The blocks with text and their offsets in the page's text: blocks apart by a
    blank line, a table's rows by a line break."""
    out: list[Block] = []
    texts: list[str] = []
    at = 0
    for block, text in kept:
        if out:
            join = "\n" if block.kind == TABLE_ROW and out[-1].kind else "\n\n"
            texts.append(join)
            at += len(join)
        out.append(Block(at, at + len(text), *_box(block), block.size, block.bold, block.kind))
        texts.append(text)
        at += len(text)
    return "".join(texts), out


def _box(b: Block) -> tuple[float, float, float, float]:
    return b.x0, b.y0, b.x1, b.y1


def _typed(out: list[Block], parts: list[str], textpage: Any) -> list[Block]:
    """The blocks with the size and weight of their first character, for those short
    enough to be headings and for the page's longest (the body's sample)."""
    if not out:
        return out
    longest = max(range(len(parts)), key=lambda i: len(parts[i]))
    wanted = {i for i, t in enumerate(parts) if 0 < len(t) < _HEADING_MAX_CHARS} | {longest}
    typed = list(out)
    index = 0
    for block in textpage:
        inner = block.m_internal
        if inner.type != 0:
            continue
        if index in wanted and index < len(typed):
            size, bold = _first_char(block)
            typed[index] = Block(*_span(typed[index]), *_box(typed[index]), size, bold)
        index += 1
    return typed


def _span(b: Block) -> tuple[int, int]:
    return b.start, b.end


def _first_char(block: Any) -> tuple[float, bool]:
    for line in block:
        for char in line:
            inner = char.m_internal
            font = inner.font
            bold = bool(mupdf.ll_fz_font_is_bold(font)) or "bold" in (
                mupdf.ll_fz_font_name(font).lower()
            )
            return round(float(inner.size), 1), bold
    return 0.0, False


def _headings(blocks: list[Block], text: str, targets: list[Target]) -> list[Heading]:
    """Where each outline target's section starts: at the block among the first few at or
    below its point whose text holds its title, else the first of them (the page's end
    when none is below it: the section starts with the next page)."""
    found: list[Heading] = []
    for y, level, title in targets:
        y = y if y == y else 0.0  # NaN: a target without a point, the page's top
        below = [b for b in blocks if b.y0 >= y - _TARGET_SLACK]
        below.sort(key=lambda b: b.y0)
        start = len(text)
        if below:
            start = below[0].start
            key = _folded(title)[:40]
            for b in below[:_TITLE_LOOKAHEAD]:
                if key and key in _folded(text[b.start : b.end]):
                    start = b.start
                    break
        found.append(Heading(start, level, title))
    found.sort(key=lambda h: h.start)
    return found


def _folded(text: str) -> str:
    return _SPACE.sub(" ", text).strip().casefold()
