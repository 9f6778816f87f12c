"""bench.harness.retrieval_probes' section and table probes on PDFs made at test time:
each probe's query and the pages that answer it, from the chunks ragline makes."""

from __future__ import annotations

import uuid
from pathlib import Path

from bench.harness.made_pdfs import outline_pdf, tables_pdf
from bench.harness.retrieval_probes import (
    ChunkText,
    Corpus,
    Page,
    Probe,
    section_probes,
    table_probes,
)
from bench.structure import pages_of
from stages.text.chunking import ChunkConfig
from stages.text.structure import structured_chunks

DOC = uuid.UUID(int=35)
APART = ChunkConfig(max_tokens=400, overlap_tokens=0, min_tokens_before_heading=0)


def _made(path: Path, config: ChunkConfig) -> tuple[list[ChunkText], Corpus]:
    pages = pages_of(path)
    chunks = [
        ChunkText(DOC, i, c.page_start, c.page_end, c.text, c.section, c.table)
        for i, c in enumerate(structured_chunks(pages, config))
    ]
    return chunks, Corpus(Page(DOC, p.page, p.text) for p in pages)


def test_table_rows_are_asked_by_row_and_column(tmp_path: Path) -> None:
    path, truth = tables_pdf(tmp_path / "t.pdf")
    chunks, corpus = _made(path, ChunkConfig(max_tokens=600, overlap_tokens=0))
    probes = {p.query: p for p in table_probes(chunks, corpus, per_doc=1000, seed=35)}
    assert probes["Default of timeout"] == Probe(
        query="Default of timeout", kind="table", document=DOC, pages=(1,)
    )
    assert probes["Type of tabsize"].pages == (6,)  # the booktabs table
    assert probes["Region of mirror20"].pages == (8,)  # continued overleaf, no header
    assert probes["Meaning of E042"].pages == (5,)
    rows = sum(len(t.rows) for t in truth.values())
    # Every row whose first cell names it (not the merged row's covered cell alone).
    assert len(probes) >= rows - 1


def test_a_word_is_asked_in_its_section(tmp_path: Path) -> None:
    chunks, corpus = _made(outline_pdf(tmp_path / "o.pdf"), APART)
    probes = {p.query.split(" in ", 1)[1]: p for p in section_probes(chunks, corpus, 100, 35)}
    # Rip currents' words are on its page only: nothing there needs the section named.
    assert set(probes) == {"Spring tides", "Neap tides"}
    spring = probes["Spring tides"]
    word = spring.query.split(" ")[0]
    assert spring.kind == "section" and spring.pages == (1,)
    # The word is the section's, and on another page too (alone, it names no place).
    [chunk] = [c for c in chunks if c.section and c.section.endswith("Spring tides")]
    assert word in chunk.text.casefold()
    assert len(corpus.where(word)) >= 2
