"""Token counts of short words in numpy, for counting a block of pages without a Python
string per word.

A short word (printable ASCII, typographic punctuation, CJK ideographs; at most 16
characters) is keyed by its bytes, zero-padded into two 64-bit integers, each always
one-token character as "!": equal keys mean equal counts, never a mere hash match (why:
docs/architecture.md, "Chunking CPU"). :class:`WordTable` keeps the counts in an
open-addressing numpy hash table and looks a block's words up at once; the caller counts
the keys it lacks (``AsciiWordPiece.key_counts``). Other words go through a dict.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence

import numpy as np
import numpy.typing as npt

from stages.text.wordpiece import key_bytes

__all__ = [
    "BLOCK_CHARS",
    "MAX_CHARS",
    "SPACES",
    "WordTable",
    "blocks",
    "bounds",
    "distinct",
    "key_chars",
    "slices",
    "word_keys",
]

#: Longest word a :class:`WordTable` holds (two 64-bit integers of bytes).
MAX_CHARS = 16
_MIX = (np.uint64(0x9E3779B97F4A7C15), np.uint64(0xC2B2AE3D27D4EB4F))
# For a word of n characters, the bits of its first 8 bytes and of the next 8 that it fills.
_LOW_MASKS = np.array([(1 << 8 * min(n, 8)) - 1 for n in range(MAX_CHARS + 1)], np.uint64)
_HIGH_MASKS = np.array([(1 << 8 * max(n - 8, 0)) - 1 for n in range(MAX_CHARS + 1)], np.uint64)

Chars = npt.NDArray[np.uint8]
Ints = npt.NDArray[np.int64]
Keys = npt.NDArray[np.uint64]

# Whitespace for both str.split() and BERT (Rust's White_Space), less what BERT deletes
# (stages.text.tokens._GLUE).
SPACES = frozenset(
    "\t\n\r \xa0\u1680\u2028\u2029\u202f\u205f\u3000" + "".join(map(chr, range(0x2000, 0x200B)))
)


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


def key_chars(text: str) -> Chars:
    """Each character of ``text`` as it stands in a key (:func:`word_keys`): printable
    ASCII as itself, a character that is always one token of its own as "!", whitespace
    as " ", any other as 0."""
    table = _key_table()
    if text.isascii():
        return table[np.frombuffer(text.encode(), np.uint8)]
    code = np.frombuffer(text.encode("utf-32-le"), np.uint32)
    return table[np.minimum(code, 0xFFFF)]  # U+FFFF (and past the BMP): 0


def bounds(chars: Chars) -> tuple[Ints, Ints]:
    """Where each whitespace-separated word starts and ends (the words BERT sees: the
    whitespace of str.split() that BERT deletes joins the text around it)."""
    space = chars == ord(" ")
    first = ~space
    first[1:] &= space[:-1]
    last = ~space
    last[:-1] &= space[1:]
    return np.flatnonzero(first), np.flatnonzero(last) + 1


def slices(text: str, starts: Ints, ends: Ints) -> list[str]:
    return [text[s:e] for s, e in zip(starts.tolist(), ends.tolist(), strict=True)]


@functools.cache
def _key_table() -> Chars:
    """:func:`stages.text.wordpiece.key_bytes`, with whitespace as " " (never in a word)."""
    table = key_bytes().copy()
    table[[ord(c) for c in SPACES]] = ord(" ")
    return table


def word_keys(chars: Chars, starts: Ints, ends: Ints) -> tuple[npt.NDArray[np.bool_], Keys]:
    """Which words (``chars[starts[i]:ends[i]]``, :func:`key_chars`) have a key and, for
    those, their keys (one row of two integers each). A key is the word's bytes as
    printable ASCII, where a character that is always one token of its own (Unicode
    punctuation, CJK ideographs) counts as "!": words with equal keys have equal counts.
    Words with other characters or more than MAX_CHARS have none."""
    lengths = ends - starts
    # Characters without a byte are few: count those in each word by binary search.
    unkeyed = np.flatnonzero(chars == 0)
    inside = np.searchsorted(unkeyed, ends) - np.searchsorted(unkeyed, starts)
    keyed = (inside == 0) & (lengths <= MAX_CHARS)
    padded = np.zeros(len(chars) + MAX_CHARS, np.uint8)
    padded[: len(chars)] = chars
    # The 8 bytes from each offset on, as a little-endian integer (unaligned reads).
    eights = np.ndarray((len(chars) + 8,), "<u8", padded, strides=(1,))
    first, size = starts[keyed], lengths[keyed]
    keys = np.empty((len(first), 2), np.uint64)
    keys[:, 0] = eights[first] & _LOW_MASKS[size]
    keys[:, 1] = eights[first + 8] & _HIGH_MASKS[size]
    return keyed, keys


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
        slot = self._slot(keys)
        held = self._rows[slot]
        taken = held[:, 2] > 0
        hit = (held[:, 0] == keys[:, 0]) & (held[:, 1] == keys[:, 1]) & taken
        out = np.where(hit, held[:, 2], 0).astype(np.int64)
        # Linear probing: a slot held by another key sends the search on.
        todo = np.flatnonzero(taken & ~hit)
        while len(todo):
            slot[todo] = (slot[todo] + 1) & self._mask
            held, sought = self._rows[slot[todo]], keys[todo]
            taken = held[:, 2] > 0
            hit = (held[:, 0] == sought[:, 0]) & (held[:, 1] == sought[:, 1]) & taken
            out[todo[hit]] = held[hit, 2]
            todo = todo[taken & ~hit]
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
        mixed: Keys = (keys[:, 0] ^ keys[:, 1] * _MIX[1]) * _MIX[0]
        return mixed >> self._shift
