"""BERT's uncased WordPiece count of plain ASCII words, in Python.

The chunker's token counter caches word counts; a new document's words are mostly cache
misses, and for printable ASCII words (most of them) a dictionary walk over the vocabulary
costs a fraction of a trip through the ``tokenizers`` library, with the same result
(``tests/unit/test_tokens.py`` compares them on corpus words and random strings). Words
with other characters, control characters or "[" (added tokens such as [SEP] are matched
in the raw text) are left to the tokenizer.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

__all__ = ["AsciiWordPiece"]

# A lowercased ASCII word as BertPreTokenizer splits it: runs of letters and digits, and
# each punctuation mark alone (BERT counts every printable ASCII non-alphanumeric).
_ASCII_PIECES = re.compile(r"[a-z0-9]+|[!-/:-@\[-`{-~]")
# Control characters (deleted by BERT's normalizer), and "[" (added tokens like [SEP] are
# matched in the raw text): such words go to the tokenizer itself.
_ASCII_HARD = re.compile(r"[\x00-\x1f\x7f\[]")


class AsciiWordPiece:
    """BERT's uncased WordPiece count of a printable ASCII word, in Python: a word of
    a new document is mostly a cache miss, and a dictionary walk costs a fraction of a
    trip through the tokenizer (whose count it equals: ``tests/unit/test_tokens.py``)."""

    def __init__(self, vocab: set[str], prefix: str, max_chars: int) -> None:
        self.whole = vocab
        self.pieces = {t[len(prefix) :] for t in vocab if t.startswith(prefix)}
        self.max_chars = max_chars

    @classmethod
    def of(cls, path: Path) -> AsciiWordPiece | None:
        """For an uncased BERT WordPiece ``tokenizer.json``, else None."""
        spec = json.loads(path.read_text())
        normalizer, model = spec.get("normalizer") or {}, spec.get("model") or {}
        if not (
            normalizer.get("type") == "BertNormalizer"
            and normalizer.get("lowercase") is True
            and model.get("type") == "WordPiece"
        ):
            return None
        prefix = model.get("continuing_subword_prefix", "##")
        return cls(set(model["vocab"]), prefix, int(model.get("max_input_chars_per_word", 100)))

    def count(self, word: str) -> int | None:
        """Tokens of ``word``; None if it is not plain printable ASCII."""
        if not word.isascii() or _ASCII_HARD.search(word):
            return None
        return sum(map(self._piece, _ASCII_PIECES.findall(word.lower())))

    def _piece(self, piece: str) -> int:
        """Greedy longest match first; a piece that cannot be matched is one [UNK]."""
        if piece in self.whole or len(piece) > self.max_chars:
            return 1
        tokens, start, end = 0, 0, len(piece)
        while start < end:
            vocab = self.whole if start == 0 else self.pieces
            stop = end
            while stop > start and piece[start:stop] not in vocab:
                stop -= 1
            if stop == start:
                return 1
            tokens += 1
            start = stop
        return tokens
