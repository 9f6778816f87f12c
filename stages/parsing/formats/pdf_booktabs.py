"""Tables drawn with horizontal rules only (booktabs: a rule above the header, one below
it, one under the last row), their columns told by the text's alignment.

Rules of one width (same left and right ends) stacked on a page are tried three at a
time, top, header and bottom: the header is at most :data:`MAX_HEADER_LINES` lines, the
body's words leave vertical gaps of :data:`MIN_GAP` points or more across all its lines
(the columns), and no header word crosses a gap. A body line whose first column is empty
continues the row above (a wrapped cell). Cost: the words are not read on a page
without three rules of one width; each rule pair's words are found by bisection on the
words sorted once by height, and a table's bottom rule is looked for downwards from its
third rule (over the next :data:`MAX_BODY_RULES`), the lowest where the body reads as
columns.
"""

from __future__ import annotations

import bisect
import itertools
from collections import Counter
from collections.abc import Sequence
from typing import Any

__all__ = [
    "MAX_HEADER_LINES",
    "MIN_GAP",
    "Box",
    "Rows",
    "booktabs",
    "may_have_rules",
    "rules_of_one_width",
]

#: A header of more lines than this is not a header (a framed code listing's body).
MAX_HEADER_LINES = 2
#: Columns are apart by at least this much empty space on every line (points); a space
#: between words is a third of the type size, a column gap (LaTeX's 2 * tabcolsep) 12 pt.
MIN_GAP = 6.0
#: Rules of one width after a header's looked at for its table's bottom rule (midrules
#: between a table's rows are rules of its width too).
MAX_BODY_RULES = 16
#: A table has at most this many columns (more: aligned numbers, not a table).
MAX_COLUMNS = 12
#: A header (one or two lines) puts its rules this far apart at most (points): rules of
#: one width further apart everywhere (a page's head and foot rules) are not a table's,
#: and the page's words are not read for them.
MAX_HEADER_GAP = 48.0
#: Rules this close are the same rule; ends this close make rules of one width.
_SNAP = 1.5

Box = tuple[float, float, float, float]
Rows = list[tuple[Box, list[str]]]
# (x0, y, x1) of a horizontal rule.
_Rule = tuple[float, float, float]
_Word = tuple[Any, ...]


def booktabs(groups: Sequence[list[_Rule]], words: Sequence[_Word]) -> list[tuple[Box, Rows]]:
    """The tables among ``groups`` (:func:`rules_of_one_width` of the rules no ruled grid
    holds) and the page's ``words`` (``extractWORDS``): each its box and its rows, the
    first the header."""
    placed = _Placed(words)
    out: list[tuple[Box, Rows]] = []
    for group in groups:
        i = 0
        while i + 2 < len(group):
            found = _table_from(group, i, placed)
            if found is None:
                i += 1
                continue
            last, table = found
            out.append(table)
            i = last + 1
    return out


def rules_of_one_width(horizontal: Sequence[_Rule]) -> list[list[_Rule]]:
    """The rules by their ends (three or more of one width), each group top to bottom,
    rules at one height (a thick rule drawn twice) once."""
    groups: list[list[_Rule]] = []
    for rule in sorted(horizontal, key=lambda r: (r[0], r[2], r[1])):
        for group in groups:
            x0, _, x1 = group[0]
            if abs(x0 - rule[0]) <= _SNAP and abs(x1 - rule[2]) <= _SNAP:
                if abs(group[-1][1] - rule[1]) > _SNAP:
                    group.append(rule)
                break
        else:
            groups.append([rule])
    ordered = [sorted(g, key=lambda r: r[1]) for g in groups if len(g) >= 3]
    return [
        g
        for g in ordered
        if any(b[1] - a[1] <= MAX_HEADER_GAP for a, b in itertools.pairwise(g[:-1]))
    ]


def may_have_rules(content: bytes) -> bool:
    """Whether a page's content (its streams joined) draws three horizontal rules of one
    length, in the coordinates they are written in: the cheap test for a page whose few
    path operators could only be a booktabs table's (its drawings are read only then).
    Each ``re`` and ``l`` operator's operands are read from the bytes before it."""
    lengths: Counter[int] = Counter()
    for op, count in ((b" re", 4), (b" l", 5)):
        at = content.find(op)
        while at >= 0:
            length = _rule_length(content[max(at - 80, 0) : at].split()[-count:], op)
            if length is not None:
                lengths[length] += 1
            at = content.find(op, at + 1)
    return any(n >= 3 for n in lengths.values())


def _rule_length(operands: list[bytes], op: bytes) -> int | None:
    """``x y w h`` of a thin rectangle or ``x y m x y`` of a level line: its length."""
    try:
        if op == b" re" and len(operands) == 4:
            w, h = float(operands[2]), float(operands[3])
            return round(abs(w)) if abs(h) * 4 < abs(w) else None
        if len(operands) == 5 and operands[2] == b"m" and operands[1] == operands[4]:
            length = round(abs(float(operands[3]) - float(operands[0])))
            return length or None
    except ValueError:
        return None
    return None


class _Placed:
    """The page's words sorted by the height of their middles, for finding those between
    two rules by bisection."""

    def __init__(self, words: Sequence[_Word]) -> None:
        self.words = sorted(words, key=lambda w: (w[1] + w[3]) / 2)
        self.middles = [(w[1] + w[3]) / 2 for w in self.words]

    def between(self, x0: float, x1: float, y0: float, y1: float) -> list[_Word]:
        lo = bisect.bisect_right(self.middles, y0)
        hi = bisect.bisect_left(self.middles, y1)
        return [w for w in self.words[lo:hi] if x0 - _SNAP <= (w[0] + w[2]) / 2 <= x1 + _SNAP]


def _table_from(
    group: list[_Rule], top: int, placed: _Placed
) -> tuple[int, tuple[Box, Rows]] | None:
    """The table whose top rule is ``group[top]``: the next rule under its header, and
    the lowest rule after that (of the next :data:`MAX_BODY_RULES`) down to which the
    body reads as columns (a short body may not: a line or two leave gaps between words
    that more lines fill)."""
    x0, y_top, x1 = group[top]
    y_mid = group[top + 1][1]
    head = _lines(placed.between(x0, x1, y_top, y_mid))
    if not 1 <= len(head) <= MAX_HEADER_LINES:
        return None
    ends = range(top + 2, min(len(group), top + 2 + MAX_BODY_RULES))
    body = _lines(placed.between(x0, x1, y_mid, group[ends[-1]][1]))
    for last in reversed(ends):  # the lowest bottom rule first
        y_bottom = group[last][1]
        lines = [line for line in body if (line[0][1] + line[0][3]) / 2 < y_bottom]
        rows = _rows(head, lines, x0, x1) if lines else None
        if rows is not None:
            return last, ((x0, y_top, x1, y_bottom), rows)
    return None


def _lines(words: list[_Word]) -> list[list[_Word]]:
    """The words in lines, top to bottom: a word whose middle is within half a word's
    height of a line's goes on it."""
    lines: list[list[_Word]] = []
    middles: list[float] = []
    for w in sorted(words, key=lambda w: (w[1] + w[3]) / 2):
        middle, half = (w[1] + w[3]) / 2, (w[3] - w[1]) / 2
        if lines and middle - middles[-1] <= half:
            lines[-1].append(w)
        else:
            lines.append([w])
            middles.append(middle)
    return [sorted(line, key=lambda w: w[0]) for line in lines]


def _gaps(body: list[list[_Word]], x0: float, x1: float) -> list[float]:
    """The middles of the vertical strips, :data:`MIN_GAP` wide or more, that no body
    word covers (between the leftmost and rightmost word)."""
    spans = sorted((w[0], w[2]) for line in body for w in line)
    out: list[float] = []
    reach = spans[0][1]
    for left, right in spans[1:]:
        if left - reach >= MIN_GAP:
            out.append((left + reach) / 2)
        reach = max(reach, right)
    return [g for g in out if x0 < g < x1]


def _rows(head: list[list[_Word]], body: list[list[_Word]], x0: float, x1: float) -> Rows | None:
    gaps = _gaps(body, x0, x1)
    if not 1 <= len(gaps) < MAX_COLUMNS:
        return None
    if any(w[0] < g < w[2] for line in head for w in line for g in gaps):
        return None  # a header word across a column gap: prose, not a header
    edges = [x0, *gaps, x1]
    header = _row([w for line in head for w in line], edges)
    if sum(1 for c in header[1] if c) < 2:
        return None
    rows: Rows = [header]
    for line in body:
        box, cells = _row(line, edges)
        if not cells[0] and len(rows) > 1:  # a wrapped cell: the row above goes on
            (bx0, by0, bx1, _), above = rows[-1]
            merged = [f"{a} {c}".strip() for a, c in zip(above, cells, strict=True)]
            rows[-1] = ((bx0, by0, bx1, box[3]), merged)
        else:
            rows.append((box, cells))
    return rows if len(rows) >= 2 else None


def _row(words: list[_Word], edges: list[float]) -> tuple[Box, list[str]]:
    cells: list[list[_Word]] = [[] for _ in range(len(edges) - 1)]
    for w in words:
        middle = (w[0] + w[2]) / 2
        column = sum(1 for e in edges[1:-1] if e < middle)
        cells[column].append(w)
    texts = [
        " ".join(str(w[4]) for w in sorted(c, key=lambda w: (round(w[1]), w[0]))).replace(
            "|", "\\|"
        )
        for c in cells
    ]
    box = (edges[0], min(w[1] for w in words), edges[-1], max(w[3] for w in words))
    return box, texts
