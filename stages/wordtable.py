"""Token counts of short printable-ASCII words in numpy, for counting a block of pages
without a Python string per word.

Most words of most pages are printable ASCII and at most 16 characters long. Such a word
is its own key: its bytes, zero-padded to 16 (two 64-bit integers; no printable character
is a zero byte, so two words share a key only if they are equal, and no count comes from
a hash that merely matched). :class:`WordTable` keeps their counts in an open-addressing
hash table of numpy arrays and looks a whole block's words up at once; words it does not
hold are counted by the caller (exactly, as any other word) and added.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence

import numpy as np
import numpy.typing as npt

from stages.wordpiece import key_bytes

__all__ = [
    "BLOCK_CHARS",
    "MAX_CHARS",
    "SPACES",
    "WordTable",
    "blocks",
    "bounds",
    "codes",
    "distinct",
    "slices",
    "word_keys",
]

#: Longest word a :class:`WordTable` holds (two 64-bit integers of bytes).
MAX_CHARS = 16
# Row n: the bytes of a key that a word of n characters fills.
_LENGTH_MASKS = (
    np.where(np.arange(MAX_CHARS) < np.arange(MAX_CHARS + 1)[:, None], 0xFF, 0)
    .astype(np.uint8)
    .view(np.uint64)
)
_MIX = (np.uint64(0x9E3779B97F4A7C15), np.uint64(0xC2B2AE3D27D4EB4F))

Codes = npt.NDArray[np.uint8] | npt.NDArray[np.uint32]
Ints = npt.NDArray[np.int64]
Keys = npt.NDArray[np.uint64]

# Whitespace for both str.split() and BERT once _GLUE is ruled out (Rust's White_Space).
SPACES = frozenset(
    "\t\n\r \xa0\u1680\u2028\u2029\u202f\u205f\u3000" + "".join(map(chr, range(0x2000, 0x200B)))
)
# Indexed by code point, clipped to its last entry (False: not a space).
_SPACE_TABLE = np.zeros(0x3002, dtype=bool)
_SPACE_TABLE[[ord(c) for c in SPACES]] = True


#: Pages are counted in blocks of whole pages of about this many characters: numpy's cost
#: per call is spread over many words, and only one block's words (Python strings) are
#: alive at a time.
BLOCK_CHARS = 1 << 16


def blocks(parts: Sequence[str], separator: str) -> Iterator[tuple[int, str]]:
    """``separator.join(parts)`` in blocks of whole parts, each with its offset."""
    at, chars = 0, 0
    group: list[str] = []
    for part in parts:
        group.append(part)
        chars += len(part) + len(separator)
        if chars >= BLOCK_CHARS:
            yield at, separator.join(group)
            at, chars, group = at + chars, 0, []
    if group:
        yield at, separator.join(group)


def codes(text: str) -> Codes:
    """The text's code points: one byte each where it is ASCII."""
    if text.isascii():
        return np.frombuffer(text.encode(), np.uint8)
    return np.frombuffer(text.encode("utf-32-le"), np.uint32)


def bounds(codes: Codes) -> tuple[Ints, Ints]:
    """Where each whitespace-separated word starts and ends (the words BERT sees: the
    whitespace of str.split() that BERT deletes joins the text around it)."""
    wide = codes.dtype != np.uint8
    space = _SPACE_TABLE[np.minimum(codes, len(_SPACE_TABLE) - 1) if wide else codes]
    first = ~space
    first[1:] &= space[:-1]
    last = ~space
    last[:-1] &= space[1:]
    return np.flatnonzero(first), np.flatnonzero(last) + 1


def slices(text: str, starts: Ints, ends: Ints) -> list[str]:
    return [text[s:e] for s, e in zip(starts.tolist(), ends.tolist(), strict=True)]


@functools.cache
def _key_table() -> npt.NDArray[np.uint8]:
    """:func:`stages.wordpiece.key_bytes`, with whitespace as " " (never in a word)."""
    table = key_bytes().copy()
    table[[ord(c) for c in SPACES]] = ord(" ")
    return table


def word_keys(codes: Codes, starts: Ints, ends: Ints) -> tuple[npt.NDArray[np.bool_], Keys]:
    """Which words (``codes[starts[i]:ends[i]]``) have a key and, for those, their keys
    (one row of two integers each). A key is the word's bytes as printable ASCII, where a
    character that is always one token of its own (Unicode punctuation, CJK ideographs)
    counts as "!": words with equal keys have equal counts. Words with other characters
    or more than MAX_CHARS have none."""
    table = _key_table()
    wide = codes.dtype != np.uint8
    chars = table[np.minimum(codes, 0xFFFF)] if wide else table[codes]  # 0xFFFF: 0
    lengths = ends - starts
    if not len(starts):
        return np.zeros(0, bool), np.zeros((0, 2), np.uint64)
    # From a word's start to the next one's: the word, then whitespace.
    keyed = (np.add.reduceat(chars == 0, starts) == 0) & (lengths <= MAX_CHARS)
    padded = np.zeros(len(codes) + MAX_CHARS, np.uint8)
    padded[: len(codes)] = chars
    rows = np.lib.stride_tricks.sliding_window_view(padded, MAX_CHARS)[starts[keyed]]
    keys = rows.view(np.uint64).reshape(len(rows), 2)
    return keyed, keys & _LENGTH_MASKS[lengths[keyed]]


def distinct(keys: Keys) -> tuple[Keys, Ints, Ints]:
    """The distinct keys, where each first is, and which of them each key is."""
    order = np.lexsort((keys[:, 1], keys[:, 0]))
    ordered = keys[order]
    new = np.ones(len(keys), bool)
    new[1:] = (ordered[1:, 0] != ordered[:-1, 0]) | (ordered[1:, 1] != ordered[:-1, 1])
    which = np.empty(len(keys), np.int64)
    which[order] = np.cumsum(new) - 1
    first = order[new]
    return keys[first], first, which


class WordTable:
    """Counts by key; ``slots`` (a power of two) rows of 24 bytes (the key and its count
    side by side: one cache line a probe), emptied when it is half full (its words are
    counted again as they come)."""

    def __init__(self, slots: int) -> None:
        if slots & (slots - 1):
            raise ValueError(f"slots must be a power of two, got {slots}")
        self._mask = np.uint64(slots - 1)
        self._shift = np.uint64(64 - (slots.bit_length() - 1))
        # Key (two columns), count (0: an empty slot; every word has a token).
        self._rows = np.zeros((slots, 3), np.uint64)
        self._used = 0

    def lookup(self, keys: Keys) -> Ints:
        """The count of each key; 0 where the table does not hold it."""
        out = np.zeros(len(keys), np.int64)
        slot = self._slot(keys)
        todo = np.arange(len(keys))
        while len(todo):
            held, sought = self._rows[slot[todo]], keys[todo]
            taken = held[:, 2] > 0
            hit = (held[:, 0] == sought[:, 0]) & (held[:, 1] == sought[:, 1]) & taken
            out[todo[hit]] = held[hit, 2]
            # Linear probing: a slot held by another key sends the search on.
            todo = todo[taken & ~hit]
            slot[todo] = (slot[todo] + 1) & self._mask
        return out

    def add(self, keys: Keys, counts: Ints) -> None:
        """Hold distinct ``keys`` that it does not hold yet (as many as fit)."""
        room = len(self._rows) // 2
        if self._used + len(keys) > room:
            self._rows.fill(0)
            self._used = 0
            keys, counts = keys[:room], counts[:room]
        slot = self._slot(keys)
        todo = np.arange(len(keys))
        while len(todo):
            free = np.flatnonzero(self._rows[slot[todo], 2] == 0)
            claim = todo[free]
            where = slot[claim]
            # Of the keys that reach one free slot together, one is written last: it
            # takes the slot, and the others probe on.
            self._rows[where, :2] = keys[claim]
            held, wanted = self._rows[where], keys[claim]
            won = (held[:, 0] == wanted[:, 0]) & (held[:, 1] == wanted[:, 1])
            self._rows[where[won], 2] = counts[claim[won]]
            on = np.ones(len(todo), bool)
            on[free[won]] = False
            todo = todo[on]
            slot[todo] = (slot[todo] + 1) & self._mask
        self._used += len(keys)

    def _slot(self, keys: Keys) -> Keys:
        # The high bits of a product depend on every bit of the key (Fibonacci hashing).
        mixed = (keys[:, 0] ^ keys[:, 1] * _MIX[1]) * _MIX[0]
        return mixed >> self._shift
