"""Ruled tables on a PDF page: found from the page's lines, read as Markdown rows.

A table here is a grid of ruling lines (horizontal and vertical rules, or cell
rectangles) that touch: its rows lie between its horizontal rules, its columns between
its vertical ones, and a cell whose rule to the left is missing is merged into the one
left of it (its text goes there; the covered cell stays empty). Each word of the page is
placed in the cell its middle falls in. Tables drawn with horizontal rules only
(booktabs) are read from the rules no grid holds (:mod:`.pdf_booktabs`).

Cost, decided per page and cheaply: the page's content streams are scanned for path
operators first (counted, about 0.1 ms a page); a page with :data:`MIN_GRID_OPS` of them,
or with :data:`MIN_PATH_OPS` where three level rules have one length, has its drawings
listed, and only a grid, or three rules of one width a header apart, among them has its
words read. PyMuPDF's own ``Page.find_tables`` was measured at 600 to 860 ms a page on
the made test tables (and at 52 ms a page averaged over the corpus pages that passed the
first gate), far over the parse stage's budget: docs/formats.md, "PDF structure".
"""

# mypy: disallow-untyped-calls=False

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import Any

import msgspec
import pymupdf

from stages.parsing.formats.pdf_booktabs import booktabs, may_have_rules, rules_of_one_width

__all__ = ["Found", "Table", "markdown_rows", "may_have_tables", "page_tables"]

#: Path operators (``re``, ``l``) a page's content must have before its drawings are read
#: (a booktabs table draws three rules); a page with fewer than :data:`MIN_GRID_OPS` is
#: read only where three of its rules have one length (:func:`may_have_rules`).
MIN_PATH_OPS = 3
MIN_GRID_OPS = 12
#: A page with more line segments than this is a plot or a drawing, not a table page.
MAX_SEGMENTS = 600
#: Rules shorter than this are ticks or bullets, not table rules (points).
_MIN_RULE = 8.0
#: A rectangle thinner than this is a rule (points).
_THIN = 2.5
#: Rules this close are the same rule; a rule ending this near another touches it.
_SNAP = 1.5
_ERRORS = (RuntimeError, ValueError, pymupdf.mupdf.FzErrorBase)

# (x0, y, x1) of a horizontal rule; (x, y0, y1) of a vertical one.
_Rule = tuple[float, float, float]


class Table(msgspec.Struct, frozen=True):
    """A ruled table: its box, and its rows (the first the header) as the boxes and
    cells' texts ('' for an empty or covered cell)."""

    box: tuple[float, float, float, float]
    rows: list[tuple[tuple[float, float, float, float], list[str]]]
    #: Its first row is set apart as a header: in bold type over a row that is not, or
    #: above a rule of its own (booktabs). A first row not set apart may be a row of a
    #: table continued from the page before (the chunker decides, :mod:`stages.text.structure`).
    header_apart: bool = False


class Found(msgspec.Struct, frozen=True):
    """A page's tables and its words (``extractWORDS``: x0, y0, x1, y1, word, block,
    line, number), from which a block running into a table is read again without the
    table's words."""

    tables: list[Table]
    words: list[tuple[Any, ...]]


def may_have_tables(doc: pymupdf.Document, number: int) -> bool:
    """Whether page ``number``'s content draws enough lines to hold a ruled table, or
    three rules of one length (its content streams scanned, not run)."""
    try:
        kind, value = doc.xref_get_key(doc.page_xref(number), "Contents")
        if kind == "xref":
            xrefs = [int(value.split()[0])]
        elif kind == "array":
            xrefs = [int(v.split()[0]) for v in value.strip("[]").split(" R") if v.strip()]
        else:
            return False
        ops = 0
        streams: list[bytes] = []
        for xref in xrefs:
            data = doc.xref_stream(xref) or b""
            # Counted, not parsed: " re" and " l" end a rectangle's and a line's operands
            # (a string holding them only makes the page read its drawings).
            ops += data.count(b" re") + data.count(b" l\n") + data.count(b" l ")
            if ops >= MIN_GRID_OPS:
                return True
            streams.append(data)
    except (*_ERRORS, IndexError):
        return False
    return ops >= MIN_PATH_OPS and may_have_rules(b"\n".join(streams))


def page_tables(page: pymupdf.Page, textpage: Any) -> Found | None:
    """The ruled tables on ``page`` (``textpage``: its MuPDF text page, for the words);
    None where it has none."""
    horizontal, vertical = _rules(page)
    if len(horizontal) < 3:
        return None
    groups = _grids(horizontal, vertical) if vertical else [(horizontal, [])]
    grids = [g for g in groups if len(g[0]) >= 3 and len(g[1]) >= 3]
    # The horizontal rules no vertical one touches, by width: a booktabs table's.
    loose = rules_of_one_width([h for g in groups if not g[1] for h in g[0]])
    if not grids and not loose:
        return None
    words = pymupdf.extra.extractWORDS(textpage, None)
    tables = [t for g in grids if (t := _table(g, words)) is not None]
    if tables:
        tables = _weighed(tables, textpage)
    tables += [Table(box, rows, header_apart=True) for box, rows in booktabs(loose, words)]
    tables.sort(key=lambda t: t.box[1])
    return Found(tables, words) if tables else None


def _rules(page: pymupdf.Page) -> tuple[list[_Rule], list[_Rule]]:
    horizontal: list[_Rule] = []
    vertical: list[_Rule] = []
    count = 0
    for path in page.get_cdrawings():
        for item in path["items"]:
            count += 1
            if count > MAX_SEGMENTS:
                return [], []
            if item[0] == "l":
                (ax, ay), (bx, by) = item[1], item[2]
                _add_line(horizontal, vertical, ax, ay, bx, by)
            elif item[0] == "re":
                _add_rect(horizontal, vertical, *item[1], stroked="s" in path["type"])
    return horizontal, vertical


def _add_line(
    horizontal: list[_Rule], vertical: list[_Rule], ax: float, ay: float, bx: float, by: float
) -> None:
    if abs(ay - by) < 1 and abs(ax - bx) >= _MIN_RULE:
        horizontal.append((min(ax, bx), (ay + by) / 2, max(ax, bx)))
    elif abs(ax - bx) < 1 and abs(ay - by) >= _MIN_RULE:
        vertical.append(((ax + bx) / 2, min(ay, by), max(ay, by)))


def _add_rect(
    horizontal: list[_Rule],
    vertical: list[_Rule],
    x0: float,
    y0: float,
    x1: float,
    y1: float,
    *,
    stroked: bool,
) -> None:
    width, height = x1 - x0, y1 - y0
    if height < _THIN and width >= _MIN_RULE:
        horizontal.append((x0, (y0 + y1) / 2, x1))
    elif width < _THIN and height >= _MIN_RULE:
        vertical.append(((x0 + x1) / 2, y0, y1))
    elif stroked and width >= _MIN_RULE and height >= _MIN_RULE:
        # A cell's outline (a filled one is a swatch or a background, not a rule).
        horizontal += [(x0, y0, x1), (x0, y1, x1)]
        vertical += [(x0, y0, y1), (x1, y0, y1)]


def _touch(h: _Rule, v: _Rule) -> bool:
    return h[0] - _SNAP <= v[0] <= h[2] + _SNAP and v[1] - _SNAP <= h[1] <= v[2] + _SNAP


def _grids(horizontal: list[_Rule], vertical: list[_Rule]) -> list[tuple[list[_Rule], list[_Rule]]]:
    """The rules in groups that touch each other (union-find over crossings)."""
    parent = list(range(len(horizontal) + len(vertical)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, h in enumerate(horizontal):
        for j, v in enumerate(vertical):
            if _touch(h, v):
                parent[root(i)] = root(len(horizontal) + j)
    groups: dict[int, tuple[list[_Rule], list[_Rule]]] = {}
    for i, h in enumerate(horizontal):
        groups.setdefault(root(i), ([], []))[0].append(h)
    for j, v in enumerate(vertical):
        groups.setdefault(root(len(horizontal) + j), ([], []))[1].append(v)
    return list(groups.values())


def _levels(values: Sequence[float]) -> list[float]:
    out: list[float] = []
    for value in sorted(values):
        if not out or value - out[-1] > _SNAP:
            out.append(value)
    return out


def _table(grid: tuple[list[_Rule], list[_Rule]], words: list[tuple[Any, ...]]) -> Table | None:
    horizontal, vertical = grid
    ys, xs = _levels([h[1] for h in horizontal]), _levels([v[0] for v in vertical])
    if len(ys) < 3 or len(xs) < 3:  # two rows and two columns at least
        return None
    cells: list[list[list[tuple[float, float, str]]]] = [
        [[] for _ in range(len(xs) - 1)] for _ in range(len(ys) - 1)
    ]
    ruled = _ruled(vertical, xs, ys)
    for w in words:
        cx, cy = (w[0] + w[2]) / 2, (w[1] + w[3]) / 2
        if not (ys[0] <= cy < ys[-1] and xs[0] <= cx < xs[-1]):
            continue
        r = bisect.bisect_right(ys, cy) - 1
        c = bisect.bisect_right(xs, cx) - 1
        while c > 0 and (r, c) not in ruled:  # a merged cell: its text goes left
            c -= 1
        cells[r][c].append((round(w[1]), w[0], w[4]))
    rows = [
        ((xs[0], ys[r], xs[-1], ys[r + 1]), [_cell_text(cell) for cell in row])
        for r, row in enumerate(cells)
    ]
    rows = [row for row in rows if any(row[1])]
    if len(rows) < 2:
        return None
    return Table((xs[0], ys[0], xs[-1], ys[-1]), rows)


def _ruled(vertical: list[_Rule], xs: list[float], ys: list[float]) -> set[tuple[int, int]]:
    """(row, column) of the cells that have a rule on their left."""
    middles = [(ys[r] + ys[r + 1]) / 2 for r in range(len(ys) - 1)]
    out: set[tuple[int, int]] = set()
    for x, y0, y1 in vertical:
        c = bisect.bisect_left(xs, x - _SNAP)
        if c >= len(xs) or abs(xs[c] - x) > _SNAP:
            continue
        first = bisect.bisect_left(middles, y0 - _SNAP)
        last = bisect.bisect_right(middles, y1 + _SNAP)
        out.update((r, c) for r in range(first, last))
    return out


def _weighed(tables: list[Table], textpage: Any) -> list[Table]:
    """The tables, each marked where its first row's lines all start in bold type and
    its second row's do not (each line's first character read from MuPDF's text page)."""
    # (box, table, row) of each table's first two rows.
    rows = [(t.rows[r][0], i, r) for i, t in enumerate(tables) for r in (0, 1)]
    bold: list[list[list[bool]]] = [[[], []] for _ in tables]
    for block in textpage:
        if block.m_internal.type != 0:
            continue
        for line in block:
            box = line.m_internal.bbox
            x, y = (box.x0 + box.x1) / 2, (box.y0 + box.y1) / 2
            at = [(i, r) for (x0, y0, x1, y1), i, r in rows if x0 <= x < x1 and y0 <= y < y1]
            if at:
                weight = _starts_bold(line)
                for i, r in at:
                    bold[i][r].append(weight)
    return [
        msgspec.structs.replace(t, header_apart=bool(head) and all(head) and not all(second))
        for t, (head, second) in zip(tables, bold, strict=True)
    ]


def _starts_bold(line: Any) -> bool:
    for char in line:
        font = char.m_internal.font
        name = pymupdf.mupdf.ll_fz_font_name(font).lower()
        return bool(pymupdf.mupdf.ll_fz_font_is_bold(font)) or "bold" in name
    return False


def _cell_text(words: list[tuple[float, float, str]]) -> str:
    text = " ".join(w for _, _, w in sorted(words))
    return text.replace("|", "\\|")


def markdown_rows(table: Table) -> list[str]:
    """The table's rows as Markdown lines, the header row followed by its rule."""
    lines = ["| " + " | ".join(cells) + " |" for _, cells in table.rows]
    rule = "| " + " | ".join("---" for _ in table.rows[0][1]) + " |"
    return [f"{lines[0]}\n{rule}", *lines[1:]]
