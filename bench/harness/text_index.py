"""qdrant-edge's own BM25 full-text index as a keyword side, for the benchmarks that
weigh it against ragline's sparse keywords (bench.keyword_engines, bench.retrieval)."""

from __future__ import annotations

import re

import qdrant_edge as qe

from stages.text.keywords import CJK_RUN

__all__ = ["TEXT_FIELD", "add_text_index", "spelled_cjk"]

#: The payload field the index reads.
TEXT_FIELD = "text"


def add_text_index(shard: qe.EdgeShard, tokenizer: qe.TokenizerType) -> None:
    """A lowercased BM25-scored text index over :data:`TEXT_FIELD` in ``shard``."""
    params = qe.TextIndexParams(tokenizer=tokenizer, lowercase=True, scoring=True)
    shard.update(qe.UpdateOperation.create_field_index(TEXT_FIELD, params))


def spelled_cjk(text: str) -> str:
    """``text`` with each CJK run written as its characters and their pairs, spaced (as
    ragline's keywords read them), for a tokenizer that does not segment them."""

    def spell(run: re.Match[str]) -> str:
        chars = run.group()
        pairs = [chars[i : i + 2] for i in range(len(chars) - 1)]
        return f" {' '.join([*chars, *pairs])} "

    return CJK_RUN.sub(spell, text)
