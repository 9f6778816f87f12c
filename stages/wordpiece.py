"""BERT's uncased WordPiece count of plain ASCII words, in Python.

The chunker's token counter caches word counts; a new document's words are mostly cache
misses, and for printable ASCII words (most of them) a dictionary walk over the vocabulary
costs a fraction of a trip through the ``tokenizers`` library, with the same result
(``tests/unit/test_tokens.py`` compares them on corpus words and random strings).

Two kinds of non-ASCII character are one token each whatever they are, so they count as
an ASCII punctuation mark would: Unicode punctuation (BERT splits every ``P*`` character
off as its own word, then finds it in the vocabulary or makes it one [UNK]: typographic
quotes, dashes, ``⟨ ⟩`` and CJK punctuation in the corpus), and CJK ideographs (BERT's
normalizer puts spaces around each). Words with any other non-ASCII character, control
characters or an added token (``[SEP]``..., matched in the raw text) are left to the
tokenizer.
"""

from __future__ import annotations

import json
import re
import unicodedata
from pathlib import Path

__all__ = ["PIECE_MEMO", "AsciiWordPiece"]

#: Piece counts an :class:`AsciiWordPiece` keeps (about 100 bytes each).
PIECE_MEMO = 100_000

# A lowercased ASCII word as BertPreTokenizer splits it: runs of letters and digits, and
# each punctuation mark alone (BERT counts every printable ASCII non-alphanumeric).
_ASCII_PIECES = re.compile(r"[a-z0-9]+|[!-/:-@\[-`{-~]")
# Control characters (deleted by BERT's normalizer): such words go to the tokenizer itself.
_ASCII_HARD = re.compile(r"[\x00-\x1f\x7f]")
# BERT's "Chinese character" ranges (tokenizers' is_chinese_char): one word, one token each.
_CJK = (
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F),
    (0x2B920, 0x2CEAF),
    (0xF900, 0xFAFF),
    (0x2F800, 0x2FA1F),
)


class _OneToken(dict[int, str]):
    """``str.translate`` table: a non-ASCII character that is always one token of its own
    becomes "!" (one ASCII punctuation token); any other stays as it is."""

    def __missing__(self, code: int) -> str:
        char = chr(code)
        alone = unicodedata.category(char).startswith("P") or any(
            lo <= code <= hi for lo, hi in _CJK
        )
        self[code] = "!" if alone else char
        return self[code]


class AsciiWordPiece:
    """BERT's uncased WordPiece count of a printable ASCII word, in Python: a word of
    a new document is mostly a cache miss, and a dictionary walk costs a fraction of a
    trip through the tokenizer (whose count it equals: ``tests/unit/test_tokens.py``)."""

    def __init__(
        self, vocab: set[str], prefix: str, max_chars: int, added: frozenset[str] = frozenset()
    ) -> None:
        self.whole = vocab
        self.pieces = {t[len(prefix) :] for t in vocab if t.startswith(prefix)}
        self.max_chars = max_chars
        self.added = added
        self._one_token = _OneToken()
        # Pieces recur far more than words ("word" in "word," and "(word"): their counts
        # are kept, up to PIECE_MEMO of them.
        self._memo: dict[str, int] = {}

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
        added = frozenset(str(t["content"]) for t in spec.get("added_tokens") or ())
        max_chars = int(model.get("max_input_chars_per_word", 100))
        return cls(set(model["vocab"]), prefix, max_chars, added)

    def count(self, word: str) -> int | None:
        """Tokens of ``word``; None if it is not plain printable ASCII (once punctuation
        and CJK ideographs are set aside) or holds an added token."""
        if _ASCII_HARD.search(word) or ("[" in word and any(t in word for t in self.added)):
            return None
        if not word.isascii():
            word = word.translate(self._one_token)
            if not word.isascii():
                return None
        memo = self._memo
        total = 0
        for piece in _ASCII_PIECES.findall(word.lower()):
            n = memo.get(piece)
            if n is None:
                if len(memo) >= PIECE_MEMO:
                    memo.clear()
                n = memo[piece] = self._piece(piece)
            total += n
        return total

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
