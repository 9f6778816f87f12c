"""bench.keyword_engines' probes: what each keyword engine's tokenizer finds, in a shard."""

from __future__ import annotations

from pathlib import Path

from bench.keyword_engines import PROBES, probes_found


def test_ragline_keywords_answer_every_probe_first(tmp_path: Path) -> None:
    assert probes_found("sparse", tmp_path) == len(PROBES)


def test_qdrants_code_tokenizer_misses_cjk_and_its_word_tokenizer_camel_case(
    tmp_path: Path,
) -> None:
    """The figures docs/retrieval.md quotes: 9 of 10 (no CJK) and 8 of 10."""
    assert probes_found("text/code", tmp_path) == len(PROBES) - 1
    assert probes_found("text/word", tmp_path) == len(PROBES) - 2
