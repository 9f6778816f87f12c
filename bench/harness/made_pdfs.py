"""PDFs with known structure, made with PyMuPDF at test time, for the structure tests and
``bench.structure``: an outline with sections starting mid-page, headings told only by
type, running headers and footers, ruled tables (merged cells, one over two pages, one
longer than a chunk, one continued overleaf without its header), a booktabs table
(horizontal rules only) and a two-column page. Each builder returns what the PDF says, so a
test asserts against the truth, not against a parser.
"""

# mypy: disallow-untyped-calls=False

from __future__ import annotations

from pathlib import Path

import msgspec
import pymupdf

__all__ = [
    "OPENINGS",
    "MadeTable",
    "headings_by_type_pdf",
    "next_page_table_pdf",
    "outline_pdf",
    "tables_pdf",
    "two_column_pdf",
]

WIDTH, HEIGHT = 595.0, 842.0
MARGIN = 72.0
HEADER = "Tidal Almanac User Guide"

#: (level, title, paragraphs) of the made manual, in order.
SECTIONS: list[tuple[int, str, list[str]]] = [
    (1, "1 Tides", ["Tides rise and fall twice a day along most coasts of the ocean."]),
    (
        2,
        "1.1 Spring tides",
        [
            "Spring tides happen at new and full moon when sun and moon pull together.",
            "The springrange of a spring tide is the largest of the lunar month.",
        ],
    ),
    (
        2,
        "1.2 Neap tides",
        [
            "Neap tides happen at the quarter moons when the pulls partly cancel.",
            "The neaprange of a neap tide is the smallest of the lunar month.",
        ],
    ),
    (1, "2 Currents", ["Currents carry water along the coast; the ebbflow runs seaward."]),
    (
        2,
        "2.1 Rip currents",
        ["A ripcurrent flows away from the beach through a gap in the sandbar."],
    ),
]


def _header_footer(page: pymupdf.Page, number: int) -> None:
    page.insert_text((MARGIN, 40), HEADER, fontsize=9)
    page.insert_text((WIDTH / 2 - 20, HEIGHT - 30), f"Page {number}", fontsize=9)


def _manual(path: Path, *, outline: bool, heading_font: str, heading_size: float) -> None:
    """The made manual: each section on the page and at the height the layout gives it
    (two or three a page, so most start mid-page), a header and footer on every page."""
    doc = pymupdf.open()
    toc: list[list[object]] = []
    page, y = None, 0.0
    for index, (level, title, paragraphs) in enumerate(SECTIONS):
        if page is None or index in (2, 4):  # sections 1.2 and 2.1 open a new page
            page = doc.new_page(width=WIDTH, height=HEIGHT)
            _header_footer(page, doc.page_count)
            y = 110.0 if index else 90.0
        top = y
        page.insert_text(
            (MARGIN, y + heading_size), title, fontsize=heading_size, fontname=heading_font
        )
        y += heading_size + 18
        for text in paragraphs:
            page.insert_textbox(pymupdf.Rect(MARGIN, y, WIDTH - MARGIN, y + 60), text, fontsize=10)
            y += 70
        y += 40
        toc.append([level, title, doc.page_count, {"kind": 1, "to": pymupdf.Point(MARGIN, top)}])
    if outline:
        doc.set_toc(toc)
    doc.save(path)
    doc.close()


def outline_pdf(path: Path) -> Path:
    """The manual with an outline whose entries point at each heading's height."""
    _manual(path, outline=True, heading_font="helv", heading_size=10)
    return path


def headings_by_type_pdf(path: Path) -> Path:
    """The manual without an outline: headings only in larger bold type."""
    _manual(path, outline=False, heading_font="hebo", heading_size=16)
    return path


class MadeTable(msgspec.Struct, frozen=True):
    """A table drawn into a made PDF: its header and rows as the cells say them (None:
    the cell is covered by the merged cell to its left)."""

    header: list[str]
    rows: list[list[str | None]]
    pages: list[int]


def _draw_table(
    page: pymupdf.Page,
    top: float,
    header: list[str],
    rows: list[list[str | None]],
    widths: list[float],
    row_height: float = 20.0,
    header_font: str = "hebo",
) -> float:
    """Draw a ruled table from ``top``; a None cell merges into the one left of it (no
    rule between). Returns the y under its last row."""
    x_edges = [MARGIN]
    for w in widths:
        x_edges.append(x_edges[-1] + w)
    y = top
    lines: list[list[str | None]] = [list(header), *rows]
    for r, row in enumerate(lines):
        page.draw_line((x_edges[0], y), (x_edges[-1], y))
        for c, cell in enumerate(row):
            if cell is None:
                continue
            span = 1
            while c + span < len(row) and row[c + span] is None:
                span += 1
            page.draw_line((x_edges[c], y), (x_edges[c], y + row_height))
            font = header_font if r == 0 else "helv"
            page.insert_text((x_edges[c] + 4, y + 14), cell, fontsize=9, fontname=font)
            if c + span == len(row):
                page.draw_line((x_edges[-1], y), (x_edges[-1], y + row_height))
        y += row_height
    page.draw_line((x_edges[0], y), (x_edges[-1], y))
    return y


def _draw_booktabs(
    page: pymupdf.Page,
    top: float,
    header: list[str],
    rows: list[list[str]],
    widths: list[float],
    header_font: str = "hebo",
) -> float:
    """Draw a table with three rules only (above the header, under it, under the last
    row), its columns only aligned text. Returns the y under its bottom rule."""
    x_edges = [MARGIN]
    for w in widths:
        x_edges.append(x_edges[-1] + w)
    page.draw_line((x_edges[0], top), (x_edges[-1], top), width=1.0)
    y = top + 4
    for r, row in enumerate([header, *rows]):
        font = header_font if r == 0 else "helv"
        for c, cell in enumerate(row):
            page.insert_text((x_edges[c] + 6, y + 11), cell, fontsize=9, fontname=font)
        y += 15
        if r == 0:
            page.draw_line((x_edges[0], y), (x_edges[-1], y), width=0.5)
            y += 4
    y += 2
    page.draw_line((x_edges[0], y), (x_edges[-1], y), width=1.0)
    return y


#: The booktabs table of :func:`tables_pdf`.
BOOKTABS_HEADER = ["Option", "Type", "Default", "Effect"]
BOOKTABS_ROWS: list[list[str]] = [
    ["linewidth", "dimen", "0.4pt", "thickness of every frame rule"],
    ["tabsize", "integer", "8", "columns a tab character advances"],
    ["breaklines", "boolean", "false", "wrap lines longer than the frame"],
    ["numberstyle", "style", "none", "type of the line numbers"],
    ["captionpos", "letter", "t", "caption above or below the listing"],
]


def tables_pdf(path: Path, long_rows: int = 60) -> tuple[Path, dict[str, MadeTable]]:
    """Five tables: ``merged`` (a merged cell), ``spanning`` (over the foot of page 2 and
    the top of page 3, its header repeated there as printed tables do), ``long``
    (``long_rows`` rows, longer than a chunk), ``booktabs`` (page 6: horizontal rules
    only) and ``continued`` (over the foot of page 7 and the top of page 8, its header
    not repeated there), with prose around them."""
    doc = pymupdf.open()
    truth: dict[str, MadeTable] = {}
    page = doc.new_page(width=WIDTH, height=HEIGHT)
    page.insert_textbox(
        pymupdf.Rect(MARGIN, 72, WIDTH - MARGIN, 110),
        "The settings below are read at start-up; each has a default.",
        fontsize=10,
    )
    header = ["Setting", "Default", "Meaning"]
    merged: list[list[str | None]] = [
        ["timeout", "30", "seconds before a request fails"],
        ["retries", "disabled", None],
        ["colour", "blue", "the theme's accent"],
    ]
    _draw_table(page, 130, header, merged, [120, 90, 240])
    truth["merged"] = MadeTable(header, merged, [1])
    page = doc.new_page(width=WIDTH, height=HEIGHT)
    page.insert_textbox(
        pymupdf.Rect(MARGIN, 72, WIDTH - MARGIN, 110),
        "Ports used by the services follow; the list goes on overleaf.",
        fontsize=10,
    )
    ports: list[list[str | None]] = [
        [f"service{i}", str(8000 + i), f"port of service number {i}"] for i in range(30)
    ]
    columns = ["Service", "Port", "Note"]
    _draw_table(page, HEIGHT - 72 - 20 * 16, columns, ports[:15], [120, 90, 240])
    page = doc.new_page(width=WIDTH, height=HEIGHT)
    _draw_table(page, 72, columns, ports[15:], [120, 90, 240])
    truth["spanning"] = MadeTable(columns, ports, [2, 3])
    page = doc.new_page(width=WIDTH, height=HEIGHT)
    codes: list[list[str | None]] = [
        [f"E{i:03d}", f"error code {i} means the widget number {i} stalled"]
        for i in range(long_rows)
    ]
    y = _draw_table(page, 72, ["Code", "Meaning"], codes[:35], [100, 350])
    page = doc.new_page(width=WIDTH, height=HEIGHT)
    _draw_table(page, 72, ["Code", "Meaning"], codes[35:], [100, 350])
    assert y > 0
    truth["long"] = MadeTable(["Code", "Meaning"], codes, [4, 5])
    _booktabs_and_continued(doc, truth)
    doc.save(path)
    doc.close()
    return path, truth


def _booktabs_and_continued(doc: pymupdf.Document, truth: dict[str, MadeTable]) -> None:
    page = doc.new_page(width=WIDTH, height=HEIGHT)
    page.insert_textbox(
        pymupdf.Rect(MARGIN, 72, WIDTH - MARGIN, 110),
        "The listing options are set with a key and a value, as below.",
        fontsize=10,
    )
    _draw_booktabs(page, 130, BOOKTABS_HEADER, BOOKTABS_ROWS, [90, 70, 70, 220])
    truth["booktabs"] = MadeTable(BOOKTABS_HEADER, [list(r) for r in BOOKTABS_ROWS], [6])
    page = doc.new_page(width=WIDTH, height=HEIGHT)
    page.insert_textbox(
        pymupdf.Rect(MARGIN, 72, WIDTH - MARGIN, 110),
        "The mirrors of the archive are listed by region; the list goes on overleaf.",
        fontsize=10,
    )
    mirrors: list[list[str | None]] = [
        [f"mirror{i}", f"region{i % 7}", f"host{i}.example.org"] for i in range(24)
    ]
    columns = ["Mirror", "Region", "Host"]
    _draw_table(page, HEIGHT - 72 - 20 * 13, columns, mirrors[:12], [120, 90, 240])
    page = doc.new_page(width=WIDTH, height=HEIGHT)
    _draw_headless(page, 72, mirrors[12:], [120, 90, 240])
    truth["continued"] = MadeTable(columns, mirrors, [7, 8])


def _draw_headless(
    page: pymupdf.Page, top: float, rows: list[list[str | None]], widths: list[float]
) -> float:
    """A ruled table's rows without a header row (a table continued from the page
    before)."""
    first, *rest = rows
    return _draw_table(page, top, [c or "" for c in first], rest, widths, header_font="helv")


#: How page 2 of :func:`next_page_table_pdf` opens, under its running header: with page
#: 1's table continued (its rows; its header printed again, then its rows), or with
#: another table of as many columns (after a caption, after a caption the content stream
#: draws after the table, after a paragraph, under a bold header of its own, or a booktabs
#: table under a plain header: its rule under the header tells it apart).
OPENINGS = {
    "rows": True,
    "header again": True,
    "caption": False,
    "caption drawn after": False,
    "paragraph": False,
    "own header": False,
    "booktabs": False,
}


def next_page_table_pdf(path: Path, opening: str) -> tuple[Path, dict[str, MadeTable]]:
    """Three pages with running headers and footers: page 1's ruled table (bold header)
    ends at its foot; page 2 opens as :data:`OPENINGS` says; page 3 is prose. Returns
    the tables as printed: ``first`` (with its continuation, where page 2 continues it)
    and ``second``."""
    doc = pymupdf.open()
    for _ in range(3):
        doc.new_page(width=WIDTH, height=HEIGHT)
    pages = [doc[i] for i in range(3)]  # loaded once all exist (new_page drops them)
    for number, page in enumerate(pages, 1):
        _header_footer(page, number)
    pages[0].insert_textbox(
        pymupdf.Rect(MARGIN, 72, WIDTH - MARGIN, 110),
        "The mirrors of the archive are listed by region below.",
        fontsize=10,
    )
    columns, widths = ["Mirror", "Region", "Host"], [120.0, 90.0, 240.0]
    mirrors: list[list[str | None]] = [
        [f"mirror{i}", f"region{i % 7}", f"host{i}.example.org"] for i in range(20)
    ]
    _draw_table(pages[0], HEIGHT - 72 - 20 * 13, columns, mirrors[:12], widths)
    truth = {"first": MadeTable(columns, mirrors[:12], [1])}
    if OPENINGS[opening]:
        if opening == "rows":
            _draw_headless(pages[1], 72, mirrors[12:], widths)
        else:
            _draw_table(pages[1], 72, columns, mirrors[12:], widths)
        truth["first"] = MadeTable(columns, mirrors, [1, 2])
    else:
        truth["second"] = _other_table(pages[1], opening, widths)
    pages[2].insert_textbox(
        pymupdf.Rect(MARGIN, 72, WIDTH - MARGIN, 110),
        "Each mirror copies the archive every six hours.",
        fontsize=10,
    )
    doc.save(path)
    doc.close()
    return path, truth


def _other_table(page: pymupdf.Page, opening: str, widths: list[float]) -> MadeTable:
    """Another table of three columns atop ``page``, opening it as ``opening`` says (its
    header plain but under ``own header``: only the text above it, or a booktabs table's
    rule under its header, tells it apart)."""
    header = ["Package", "Licence", "Maintainer"]
    rows: list[list[str | None]] = [
        [f"package{i}", f"licence{i % 3}", f"maintainer{i}"] for i in range(6)
    ]
    words = {
        "caption": "Table 2: Packages and their licences.",
        "caption drawn after": "Table 2: Packages and their licences.",
        "paragraph": "The packages shipped with the archive are listed with their licences.",
    }
    text = words.get(opening, "")
    above = pymupdf.Rect(MARGIN, 72, WIDTH - MARGIN, 110)
    if text and opening != "caption drawn after":
        page.insert_textbox(above, text, fontsize=10)
    font = "hebo" if opening == "own header" else "helv"
    if opening == "booktabs":
        plain = [[c or "" for c in row] for row in rows]
        _draw_booktabs(page, 72, header, plain, widths, header_font=font)
    else:
        _draw_table(page, 130 if text else 72, header, rows, widths, header_font=font)
    if opening == "caption drawn after":
        page.insert_textbox(above, text, fontsize=10)
    return MadeTable(header, rows, [2])


LEFT = [
    "Leftcolumn begins the story of the harbour and its old stone pier.",
    "Leftcolumn goes on with the fishing boats that moored along it.",
    "Leftcolumn ends with the storm that broke the pier in two.",
]
RIGHT = [
    "Rightcolumn begins the story of the lighthouse on the cliff.",
    "Rightcolumn goes on with the keepers who tended its lamp.",
    "Rightcolumn ends with the lamp made electric and the keepers gone.",
]


def two_column_pdf(path: Path) -> Path:
    """One page in two columns, written row by row across them (left, right, left...),
    so the content stream's order interleaves the columns: reading order must not."""
    doc = pymupdf.open()
    page = doc.new_page(width=WIDTH, height=HEIGHT)
    col = (WIDTH - 2 * MARGIN - 20) / 2
    for i, (left, right) in enumerate(zip(LEFT, RIGHT, strict=True)):
        y = 100 + i * 120
        page.insert_textbox(pymupdf.Rect(MARGIN, y, MARGIN + col, y + 80), left, fontsize=10)
        x = MARGIN + col + 20
        page.insert_textbox(pymupdf.Rect(x, y, x + col, y + 80), right, fontsize=10)
    doc.save(path)
    doc.close()
    return path
