"""stages.pipeline.chunk.section_label: a chunk names each section it spans, once."""

from __future__ import annotations

from stages.pipeline.chunk import section_label


def test_a_chunk_names_each_section_it_spans_once() -> None:
    sections = {1: "A", 2: "A", 3: "A › B"}
    assert section_label(sections, 1, 3) == "A | A › B"
    assert section_label(sections, 3, 3) == "A › B"
    assert section_label({}, 1, 9) is None
