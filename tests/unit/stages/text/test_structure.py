"""stages.text.structure on PDFs made at test time and on real corpus manuals: sections
from the outline (starting mid-page) and from type, running headers left out of the
chunks, boxes, tables in pieces that each start with their header row."""

# mypy: disallow-untyped-calls=False

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pymupdf
import pytest

from bench.harness.made_pdfs import (
    HEADER,
    LEFT,
    OPENINGS,
    RIGHT,
    MadeTable,
    headings_by_type_pdf,
    next_page_table_pdf,
    outline_pdf,
    tables_pdf,
    two_column_pdf,
)
from stages.db.checkpoints import Page
from stages.parsing.formats.pdf import iter_pages, open_pdf
from stages.text.chunking import ChunkConfig
from stages.text.structure import StructuredChunk, furniture, structured_chunks
from tests.support.corpus import corpus_pdfs

#: Every section cut on its own, however small (the default joins a tiny one to the next).
APART = ChunkConfig(max_tokens=400, overlap_tokens=0, min_tokens_before_heading=0)


def pages_of(path: Path) -> list[Page]:
    doc = open_pdf(path, name=path.name)
    try:
        return [Page(t.page, t.text, None, t.layout) for t, _ in iter_pages(doc, layout=True)]
    finally:
        doc.close()


def chunk_with(word: str, chunks: list[StructuredChunk]) -> StructuredChunk:
    [found] = [c for c in chunks if word in c.text]
    return found


@pytest.mark.parametrize("maker", [outline_pdf, headings_by_type_pdf])
def test_each_chunk_carries_its_heading_path_and_no_chunk_spans_two_sections(
    tmp_path: Path, maker: object
) -> None:
    """Sections 1.1 and 2 start mid-page: the words of each section are in a chunk of
    that section's path alone."""
    assert callable(maker)
    chunks = structured_chunks(pages_of(maker(tmp_path / "manual.pdf")), APART)
    assert chunk_with("springrange", chunks).section == "1 Tides › 1.1 Spring tides"
    assert chunk_with("neaprange", chunks).section == "1 Tides › 1.2 Neap tides"
    assert chunk_with("ebbflow", chunks).section == "2 Currents"
    assert chunk_with("ripcurrent", chunks).section == "2 Currents › 2.1 Rip currents"
    # Section 1 ends mid-page 1 where 1.1 starts: its chunk has none of 1.1's words.
    first = chunk_with("twice a day", chunks)
    assert first.section == "1 Tides"
    assert "Spring" not in first.text
    assert [c.section for c in chunks] == [
        "1 Tides",
        "1 Tides › 1.1 Spring tides",
        "1 Tides › 1.2 Neap tides",
        "2 Currents",
        "2 Currents › 2.1 Rip currents",
    ]


def test_a_section_of_a_few_words_joins_the_next_and_says_both(tmp_path: Path) -> None:
    pages = pages_of(outline_pdf(tmp_path / "m.pdf"))
    chunks = structured_chunks(pages, ChunkConfig(max_tokens=400))
    # Section 1's one sentence is under a quarter of the chunk size: it opens 1.1's chunk,
    # whose label names the deeper path only (the parent's is a prefix of it).
    both = chunk_with("twice a day", chunks)
    assert "springrange" in both.text
    assert both.section == "1 Tides › 1.1 Spring tides"


def test_running_headers_and_footers_are_left_out_of_chunks_but_kept_in_pages(
    tmp_path: Path,
) -> None:
    pages = pages_of(outline_pdf(tmp_path / "m.pdf"))
    assert all(HEADER in p.text for p in pages)
    assert all(f"Page {p.page}" in p.text for p in pages)
    chunks = structured_chunks(pages, APART)
    text = "\n".join(c.text for c in chunks)
    assert HEADER not in text
    assert not re.search(r"Page \d", text)


def test_a_heading_repeated_in_the_body_is_not_a_running_header(tmp_path: Path) -> None:
    """Text that recurs at a page's edge only now and then (a "Syntax:" that ends a page
    here and there) is the body's: only text on most pages of its stretch is furniture."""
    doc = pymupdf.open()
    for n in range(12):
        page = doc.new_page(width=595, height=842)
        page.insert_text((72, 40), "Running title", fontsize=9)
        page.insert_textbox(pymupdf.Rect(72, 100, 520, 160), f"Body of page {n}.", fontsize=10)
        if n in (0, 5, 11):
            page.insert_text((72, 800), "Syntax:", fontsize=10)
    doc.save(tmp_path / "d.pdf")
    pages = pages_of(tmp_path / "d.pdf")
    left_out = set()
    for p, i in furniture(pages):
        layout = pages[p].layout
        assert layout is not None
        left_out.add(pages[p].text[layout.blocks[i].start : layout.blocks[i].end])
    assert left_out == {"Running title"}


def test_chunk_boxes_hold_its_words(tmp_path: Path) -> None:
    """Each chunk's boxes are on its pages and contain every word of its text (the
    words' own rectangles, as MuPDF places them)."""
    path = outline_pdf(tmp_path / "m.pdf")
    chunks = structured_chunks(pages_of(path), APART)
    doc = pymupdf.open(path)
    for chunk in chunks:
        boxes = [chunk.boxes[i : i + 5] for i in range(0, len(chunk.boxes), 5)]
        assert boxes and all(chunk.page_start <= b[0] <= chunk.page_end for b in boxes)
        for word in set(chunk.text.split()):
            places = [
                pymupdf.Rect(w[:4])
                for n in range(chunk.page_start, chunk.page_end + 1)
                for w in doc[n - 1].get_text("words")
                if w[4] == word
            ]
            # Where MuPDF puts the word's middle (its box is the font's, a little taller).
            assert any(
                pymupdf.Rect(b[1:]).contains((place.tl + place.br) / 2)
                for b in boxes
                for place in places
            ), (word, boxes)


def test_table_pieces_each_start_with_the_header_row(tmp_path: Path) -> None:
    path, truth = tables_pdf(tmp_path / "t.pdf")
    chunks = structured_chunks(pages_of(path), ChunkConfig(max_tokens=600, overlap_tokens=0))
    tables = [c for c in chunks if c.table]
    long = [c for c in tables if "| E0" in c.text]
    assert len({c.text for c in long}) >= 4  # longer than a chunk, on two pages: in pieces
    for piece in tables:
        first, rule = piece.text.split("\n")[:2]
        assert re.fullmatch(r"\|( *-+ *\|)+", rule.replace(":", "")), piece.text
        assert first.startswith("| ")
    for piece in long:
        assert piece.text.startswith("| Code | Meaning |")
        assert len(piece.text) <= 600
    # Every row of the long table is in exactly one piece, whole.
    rows = Counter(line for c in long for line in c.text.split("\n")[2:])
    for code, meaning in (r for r in truth["long"].rows):
        assert rows[f"| {code} | {meaning} |"] == 1


def test_a_merged_cell_and_its_row_stay_together(tmp_path: Path) -> None:
    path, _ = tables_pdf(tmp_path / "t.pdf")
    chunks = structured_chunks(pages_of(path), ChunkConfig(max_tokens=2000))
    merged = chunk_with("timeout", chunks)
    assert merged.table
    assert merged.text.splitlines()[0] == "| Setting | Default | Meaning |"
    assert "| timeout | 30 | seconds before a request fails |" in merged.text
    assert re.search(r"\| retries \| disabled \|", merged.text)
    # The cells are not in the text a second time as loose words.
    assert sum(c.text.count("seconds before a request fails") for c in chunks) == 1


def test_a_table_over_two_pages_is_one_table_its_header_repeated_once(tmp_path: Path) -> None:
    path, truth = tables_pdf(tmp_path / "t.pdf")
    chunks = structured_chunks(pages_of(path), ChunkConfig(max_tokens=2000))
    table = chunk_with("service3 ", chunks)
    assert table is chunk_with("service20 ", chunks)
    assert table.table and (table.page_start, table.page_end) == (2, 3)
    assert table.text.startswith("| Service | Port | Note |")
    assert table.text.count("| Service | Port | Note |") == 1
    assert len(table.text.splitlines()[2:]) == len(truth["spanning"].rows)


def test_a_table_continued_without_its_header_continues_the_first(tmp_path: Path) -> None:
    """Page 8 starts with the rows of page 7's table, no header row: its rows are rows,
    and every piece starts with page 7's header."""
    path, truth = tables_pdf(tmp_path / "t.pdf")
    chunks = structured_chunks(pages_of(path), ChunkConfig(max_tokens=300, overlap_tokens=0))
    pieces = [c for c in chunks if c.table and "| mirror" in c.text]
    assert len(pieces) >= 3
    for piece in pieces:
        assert piece.text.startswith("| Mirror | Region | Host |\n| --- | --- | --- |\n")
    rows = [line for c in pieces for line in c.text.splitlines()[2:]]
    expected = [f"| {m} | {r} | {h} |" for m, r, h in truth["continued"].rows]
    assert rows == expected
    # The rows of page 8 are cited on page 8, and boxed there only.
    last = pieces[-1]
    assert (last.page_start, last.page_end) == (8, 8)
    assert set(last.boxes[0::5]) == {8.0}


def markdown(table: MadeTable) -> list[str]:
    rule = "| " + " | ".join("---" for _ in table.header) + " |"
    rows = [f"| {' | '.join(c or '' for c in r)} |" for r in table.rows]
    return [f"| {' | '.join(table.header)} |", rule, *rows]


@pytest.mark.parametrize("opening", [o for o, continued in OPENINGS.items() if not continued])
def test_another_table_opening_the_next_page_is_not_a_continuation(
    tmp_path: Path, opening: str
) -> None:
    """Page 1's table ends at its foot; page 2 opens (under its running header) with a
    caption or a paragraph and a table of as many columns, or with a table under a bold
    header of its own: two tables, each under its own header, each on its page."""
    path, truth = next_page_table_pdf(tmp_path / "t.pdf", opening)
    chunks = structured_chunks(pages_of(path), ChunkConfig(max_tokens=2000))
    tables = [c for c in chunks if c.table]
    assert [c.text.splitlines() for c in tables] == [
        markdown(truth["first"]),
        markdown(truth["second"]),
    ]
    assert [(c.page_start, c.page_end) for c in tables] == [(1, 1), (2, 2)]
    assert {c.boxes[0] for c in tables[1:]} == {2.0}


@pytest.mark.parametrize("opening", [o for o, continued in OPENINGS.items() if continued])
def test_a_table_continued_under_the_running_header_is_one_table(
    tmp_path: Path, opening: str
) -> None:
    """Page 2 opens, under its running header, with page 1's table's rows (its header
    printed again, or not): one table, its header once."""
    path, truth = next_page_table_pdf(tmp_path / "t.pdf", opening)
    chunks = structured_chunks(pages_of(path), ChunkConfig(max_tokens=2000))
    [table] = [c for c in chunks if c.table]
    assert table.text.splitlines() == markdown(truth["first"])
    assert (table.page_start, table.page_end) == (1, 2)
    assert not any(HEADER in c.text for c in chunks)


def test_a_booktabs_table_is_read_as_rows(tmp_path: Path) -> None:
    """Page 6's table has three horizontal rules and no vertical one: its columns are
    the aligned text's."""
    path, truth = tables_pdf(tmp_path / "t.pdf")
    chunks = structured_chunks(pages_of(path), ChunkConfig(max_tokens=2000))
    table = chunk_with("linewidth", chunks)
    assert table.table and table.page_start == 6
    lines = table.text.splitlines()
    assert lines[:2] == ["| Option | Type | Default | Effect |", "| --- | --- | --- | --- |"]
    assert lines[2:] == [f"| {' | '.join(c or '' for c in r)} |" for r in truth["booktabs"].rows]
    # The cells are not in the text a second time as loose words.
    assert sum(c.text.count("columns a tab character advances") for c in chunks) == 1
    prose = chunk_with("listing options are set", chunks)
    assert not prose.table and "tabsize" not in prose.text


def test_two_columns_are_read_one_after_the_other(tmp_path: Path) -> None:
    pages = pages_of(two_column_pdf(tmp_path / "c.pdf"))
    [chunk] = structured_chunks(pages, ChunkConfig(max_tokens=2000))
    order = [chunk.text.index(" ".join(p.split()[:3])) for p in [*LEFT, *RIGHT]]
    assert order == sorted(order)
    # Two rectangles: a column each.
    assert len(chunk.boxes) == 10


@pytest.fixture(scope="module")
def r_exts() -> list[Page]:
    [path] = [p for p in corpus_pdfs(100) if p.name == "r-doc-pdf__R-exts.pdf"]
    return pages_of(path)


def test_a_real_manual_has_its_outline_as_sections(r_exts: list[Page]) -> None:
    chunks = structured_chunks(r_exts)
    described = chunk_with("The DESCRIPTION file contains basic information", chunks)
    assert described.section == ("1 Creating R packages › Package structure › The DESCRIPTION file")
    assert sum(c.section is not None for c in chunks) >= 0.95 * len(chunks)
    assert len({c.section for c in chunks}) > 150


def test_a_real_manual_s_running_heads_are_left_out(r_exts: list[Page]) -> None:
    """R-exts prints "Chapter N: title" and the page number at the top of every page."""
    heads = [p for p in r_exts if re.search(r"^Chapter \d+: ", p.text, re.M)]
    assert len(heads) > 150
    chunks = structured_chunks(r_exts)
    left = [c for c in chunks if re.search(r"^Chapter \d+: [A-Z][^\n]*$", c.text, re.M)]
    assert len(left) <= 5, [c.text[:80] for c in left]
