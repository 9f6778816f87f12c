"""Tables drawn with horizontal rules only, on pages made at test time: read where the
text under the rules stands in columns, left alone where it is prose or code."""

# mypy: disallow-untyped-calls=False

from __future__ import annotations

from pathlib import Path

import pymupdf

from bench.harness.made_pdfs import BOOKTABS_HEADER, BOOKTABS_ROWS, MARGIN, tables_pdf
from stages.parsing.formats.pdf_booktabs import may_have_rules
from stages.parsing.formats.pdf_tables import may_have_tables, page_tables


def _found(page: pymupdf.Page) -> list[list[list[str]]]:
    found = page_tables(page, page.get_textpage())
    return [] if found is None else [[cells for _, cells in t.rows] for t in found.tables]


def test_three_rules_and_aligned_columns_make_a_table(tmp_path: Path) -> None:
    path, _ = tables_pdf(tmp_path / "t.pdf")
    with pymupdf.open(path) as doc:
        assert may_have_tables(doc, 5)
        [rows] = _found(doc[5])
    assert rows == [BOOKTABS_HEADER, *BOOKTABS_ROWS]


def _ruled_page(doc: pymupdf.Document, lines_between: list[list[str]]) -> pymupdf.Page:
    """Three rules of one width, with ``lines_between[i]`` written between rule i and
    rule i + 1."""
    page = doc.new_page()
    y = 100.0
    for block in lines_between:
        page.draw_line((MARGIN, y), (MARGIN + 400, y))
        for line in block:
            y += 14
            page.insert_text((MARGIN + 4, y), line, fontsize=10)
        y += 8
    page.draw_line((MARGIN, y), (MARGIN + 400, y))
    return page


def test_prose_between_rules_is_not_a_table() -> None:
    prose = "The quick brown fox jumps over the lazy dog while the cat watches it."
    with pymupdf.open() as doc:
        page = _ruled_page(doc, [["Note"], [prose, prose.upper(), prose[::-1]]])
        assert _found(page) == []


def test_a_framed_code_listing_is_not_a_table() -> None:
    code = ["def read(path):", "    with open(path) as f:", "        return f.read()"]
    with pymupdf.open() as doc:
        page = _ruled_page(doc, [code, ["Then call it."]])
        assert _found(page) == []


def test_a_page_without_rules_is_decided_without_reading_its_drawings() -> None:
    with pymupdf.open() as doc:
        page = doc.new_page()
        page.insert_text((MARGIN, 100), "Only text here.", fontsize=10)
        page.draw_line((MARGIN, 120), (MARGIN + 300, 120))
        assert not may_have_tables(doc, 0)


def test_three_level_rules_of_one_length_pass_the_gate() -> None:
    """pdfTeX draws booktabs rules as lines after a translation (``0 0 m 345.2 0 l``);
    others as thin rectangles. Rules of different lengths, or a box's sides, do not."""
    rules = b"q .797 w 111.5 -75.2 m 387.5 -75.2 l S Q BT (x) Tj ET q .4 w 111.5 -93.5 m "
    rules += b"387.5 -93.5 l S Q q 0 0 m 276 0 l S Q"
    assert may_have_rules(rules)
    assert may_have_rules(b"72 700 300 0.4 re f 72 680 300 .4 re f 72 600 300 0.8 re f")
    assert not may_have_rules(b"72 700 300 0.4 re f 72 680 200 .4 re f 72 600 100 0.8 re f")
    box = b"72 700 m 372 700 l 372 600 l 72 600 l h S 72 700 50 50 re S 0 0 m 0 9 l S"
    assert not may_have_rules(box)
