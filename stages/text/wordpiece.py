"""BERT's uncased WordPiece count of plain words, without the rest of the tokenizer.

The token counter's cache misses of a block of pages are counted together: BERT's
normalizer and pre-tokenizer are done in numpy (each punctuation character and each CJK
ideograph one token), and only runs of ASCII letters and digits, lowercased, go to the
WordPiece model, through a memo: the same counts as the whole tokenizer
(``tests/unit/stages/text/test_tokens.py``). Words with any other character (accents,
Cyrillic, kana, symbols, control characters) or an added token are left to the tokenizer.
The rules in full: docs/architecture.md, "Chunking CPU".
"""

from __future__ import annotations

import functools
import itertools
import json
import operator
import re
import unicodedata
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    import tokenizers

__all__ = ["PIECE_MEMO", "AsciiWordPiece", "key_bytes"]

#: Piece counts an :class:`AsciiWordPiece` keeps (about 100 bytes each).
PIECE_MEMO = 100_000

# What a character is to the count: left to the tokenizer, the separator between words,
# part of a run of ASCII letters and digits, or one token on its own.
_HARD, _GAP, _ALNUM, _ONE = 0, 1, 2, 3
_RUNS = re.compile(r"[A-Za-z0-9]+")
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

Classes = npt.NDArray[np.uint8]
Ints = npt.NDArray[np.int64]
# A key's bytes and a space (stages.text.wordtable.MAX_CHARS + 1).
_KEY_ROW = 17


def _class_of(code: int) -> int:
    char = chr(code)
    if char.isascii():
        if char.isalnum():
            return _ALNUM
        # Control characters (deleted by BERT's normalizer) go to the tokenizer.
        return _GAP if char == " " else _ONE if 0x21 <= code <= 0x7E else _HARD
    one = unicodedata.category(char).startswith("P") or any(lo <= code <= hi for lo, hi in _CJK)
    return _ONE if one else _HARD


@functools.cache
def _bmp_classes() -> Classes:
    """The class of every character of the Basic Multilingual Plane (built once, 64 KiB):
    :func:`_class_of`, with the ideograph ranges filled in by slices."""
    categories = map(unicodedata.category, map(chr, range(0x10000)))
    one = np.fromiter((c[0] == "P" for c in categories), bool, 0x10000)
    for lo, hi in _CJK:
        one[lo : hi + 1] = True  # past the BMP: nothing
    classes = np.where(one, _ONE, _HARD).astype(np.uint8)
    classes[:0x80] = list(map(_class_of, range(0x80)))
    return classes


@functools.cache
def key_bytes() -> npt.NDArray[np.uint8]:
    """For each character of the BMP, the printable ASCII character it counts as in a
    word (itself, or "!" for one that is always one token of its own), or 0 for any other
    (``stages.text.wordtable``'s keys)."""
    table = np.where(_bmp_classes() == _ONE, ord("!"), 0).astype(np.uint8)
    table[0x21:0x7F] = np.arange(0x21, 0x7F)
    return table


def _classes(text: str) -> Classes:
    if text.isascii():
        return _bmp_classes()[np.frombuffer(text.encode(), np.uint8)]
    code = np.frombuffer(text.encode("utf-32-le"), np.uint32)
    classes = _bmp_classes()[np.minimum(code, 0xFFFF)]
    wide = np.flatnonzero(code > 0xFFFF)
    if len(wide):
        distinct, which = np.unique(code[wide], return_inverse=True)
        found = np.fromiter(map(_class_of, distinct.tolist()), np.uint8, len(distinct))
        classes[wide] = found[which]
    return classes


class AsciiWordPiece:
    """BERT's uncased WordPiece count of words made of printable ASCII, punctuation and
    CJK ideographs, in Python: a word of a new document is mostly a cache miss, and a
    dictionary walk costs a fraction of a trip through the tokenizer (whose count it
    equals: ``tests/unit/stages/text/test_tokens.py``)."""

    def __init__(self, piece: Callable[[str], int], added: frozenset[str] = frozenset()) -> None:
        self._piece = piece
        self.added = added
        # Runs recur far more than words ("word" in "word," and "(word"): their counts
        # are kept, up to PIECE_MEMO of them.
        self._memo: dict[str, int] = {}

    @classmethod
    def of(cls, path: Path, tokenizer: tokenizers.Tokenizer) -> AsciiWordPiece | None:
        """For an uncased BERT WordPiece ``tokenizer.json`` (and the tokenizer loaded from
        it, whose WordPiece model counts each run), else None."""
        spec = json.loads(path.read_text())
        normalizer, model = spec.get("normalizer") or {}, spec.get("model") or {}
        if not (
            normalizer.get("type") == "BertNormalizer"
            and normalizer.get("lowercase") is True
            and normalizer.get("handle_chinese_chars", True) is True
            and model.get("type") == "WordPiece"
        ):
            return None
        added = frozenset(str(t["content"]) for t in spec.get("added_tokens") or ())
        wordpiece = tokenizer.model
        return cls(lambda run: len(wordpiece.tokenize(run)), added)

    def counts(self, words: Sequence[str]) -> list[int | None]:
        """Tokens of each word (words hold no whitespace); None for a word left to the
        tokenizer (see the module's docstring)."""
        if not words:
            return []
        text = " ".join(words)
        classes = _classes(text)
        lengths = np.fromiter(map(len, words), np.int64, len(words))
        starts = np.zeros(len(words), np.int64)
        np.cumsum(lengths[:-1] + 1, out=starts[1:])
        hard = np.add.reduceat(self._added(text, classes == _HARD), starts)
        tokens = np.add.reduceat((classes == _ONE).astype(np.int64), starts)
        runs = _RUNS.findall(text)
        if runs:
            alnum = classes == _ALNUM
            alnum[1:] &= ~alnum[:-1]  # where each run starts
            owner = np.searchsorted(starts, np.flatnonzero(alnum), side="right") - 1
            # ASCII only, so lowering keeps each run's length.
            per_run = self._run_counts(" ".join(runs).lower().split(" "))
            tokens += np.bincount(owner, weights=per_run, minlength=len(words)).astype(np.int64)
        out: list[int | None] = tokens.tolist()
        for i in np.flatnonzero(hard).tolist():
            out[i] = None
        return out

    def key_counts(self, keys: npt.NDArray[np.uint64]) -> tuple[Ints, npt.NDArray[np.bool_]]:
        """Tokens of the word of each key (``stages.text.wordtable``: a word as printable ASCII,
        two little-endian integers of zero-padded bytes), and which hold an added token
        (their counts are left to the tokenizer)."""
        rows = np.full((len(keys), _KEY_ROW), ord(" "), np.uint8)
        rows[:, : _KEY_ROW - 1] = keys.astype("<u8").view(np.uint8).reshape(len(keys), -1)
        rows[rows == 0] = ord(" ")
        text = rows.tobytes().decode("ascii")  # one word a row, a space after each
        classes = _bmp_classes()[rows.ravel()]
        tokens = (classes == _ONE).reshape(len(keys), -1).sum(axis=1)
        runs = _RUNS.findall(text.lower())
        if runs:
            alnum = classes == _ALNUM
            alnum[1:] &= ~alnum[:-1]  # where each run starts
            owner = np.flatnonzero(alnum) // _KEY_ROW
            per_run = self._run_counts(runs)
            tokens += np.bincount(owner, weights=per_run, minlength=len(keys)).astype(np.int64)
        hard = np.zeros(len(keys), bool)
        hard[np.flatnonzero(self._added(text, np.zeros(len(text), bool))) // _KEY_ROW] = True
        return tokens, hard

    def _added(self, text: str, hard: npt.NDArray[np.bool_]) -> npt.NDArray[np.bool_]:
        """``hard`` with every added token in ``text`` marked too."""
        if "[" in text:
            for token in self.added:
                for found in re.finditer(re.escape(token), text):
                    hard[found.start() : found.end()] = True
        return hard

    def _run_counts(self, runs: list[str]) -> npt.NDArray[np.float64]:
        memo = self._memo
        missing = set(itertools.compress(runs, map(operator.not_, map(memo.__contains__, runs))))
        if missing:
            if len(memo) + len(missing) > PIECE_MEMO:
                memo.clear()
                missing = set(runs)
            memo.update(zip(missing, map(self._piece, missing), strict=True))
        return np.fromiter(map(memo.__getitem__, runs), np.float64, len(runs))
