"""A chunk's keywords as a sparse vector: the keyword side of hybrid search.

One tokenizer for documents and queries, for the embedded index and a Qdrant server
alike: words are case-folded (NFKC); an identifier is kept whole and split into its parts
(``asn1_der_decoding`` → ``asn1_der_decoding``, ``asn1``, ``der``, ``decoding``;
``XRDP_UPSTREAM_VERSION``, ``plainProcessInfo``, ``ssl.SSLContext``); Han, kana and
Hangul runs become single characters and their pairs (no spaces to split them on).
A term's index is a stable 32-bit hash of it; a document's value is BM25's saturated
term frequency, and the index applies the inverse document frequency (``Modifier.IDF``),
so the score is BM25's. A chunk's heading path (its section label) is indexed with its
text, each of its terms once more, so a question that names the section finds the
section's chunks that do not print its heading.

A chunk's vector is computed once, where the chunk is cut (:func:`stored_vector`, kept in
``chunks.keywords``), not by the index stage: with the embedded index one process writes
the shard, so what the index stage spends a point is spent serially, and the vector
depends only on the chunk's text and heading. The index stage reads it back
(:func:`from_stored`, under 1 µs a chunk against 55-160 µs to compute it, by host); a
row without one (older rows, another format) is computed there as before.
"""

from __future__ import annotations

import array
import functools
import re
import sys
import unicodedata
import zlib
from collections import Counter
from collections.abc import Iterator
from itertools import chain
from typing import TypeVar, cast

import numpy as np
import numpy.typing as npt

__all__ = [
    "AVERAGE_TERMS",
    "CJK_RUN",
    "K1",
    "STORED_FORMAT",
    "B",
    "from_stored",
    "query_vector",
    "stored_vector",
    "terms",
    "text_vector",
]

#: BM25's term-frequency saturation and length normalisation (the usual values).
K1 = 1.2
B = 0.75
#: The length normalisation's average document length, in terms: chunks are sized in the
#: embedder's tokens, so their lengths vary little (measured on the corpus: about 180).
AVERAGE_TERMS = 180.0
#: Words longer than this are not terms (base64, hashes, run-together garbage).
MAX_TERM_CHARS = 64

# A word: letters, digits, marks, underscores; joined by single dots, hyphens or
# apostrophes inside (ssl.SSLContext, utf-8, don't).
_WORD = re.compile(r"[\w]+(?:[.\-'’][\w]+)*")
_SEPARATORS = re.compile(r"[_.\-'’]+")
#: A run of Han, kana or Hangul (no spaces to split them on).
CJK_RUN = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]+")


def terms(text: str) -> Iterator[str]:
    """The terms of ``text``, in order, with repeats (a word's parts after the word)."""
    for word in _WORD.findall(_normal(text)):
        yield from _terms_of(word)


def _normal(text: str) -> str:
    return text if text.isascii() else unicodedata.normalize("NFKC", text)


def _terms_of(word: str) -> list[str]:
    if CJK_RUN.search(word):
        return list(_cjk_terms(word))
    if len(word) > MAX_TERM_CHARS:
        return []
    return list(_word_terms(word))


def _indices_of(word: str) -> tuple[int, ...]:
    """The term indices of one word as it stands in the text."""
    return tuple(term_index(term) for term in _terms_of(word))


#: :func:`_indices_of`, cached for headings and queries (chunks have their own cache).
_word_indices = functools.lru_cache(maxsize=1 << 12)(_indices_of)


def _word_terms(word: str) -> Iterator[str]:
    whole = word.casefold()
    yield whole
    pieces = [hump for piece in _SEPARATORS.split(word) for hump in _humps(piece)]
    if len(pieces) > 1:  # each part once, for the word's sake
        parts = dict.fromkeys(p.casefold() for p in pieces if len(p) > 1 or p.isdigit())
        yield from (p for p in parts if p != whole)


def _humps(piece: str) -> list[str]:
    """camelCase and UPPERCamel humps (``HTTPServer`` → ``HTTP``, ``Server``); digits
    stay with the letters before them (``asn1``, ``v2``)."""
    tail = piece[1:]
    # Most words have no capital past their first letter, or are all capitals: one hump.
    if not tail or tail.islower() or piece.isdigit() or (piece.isupper() and piece.isalpha()):
        return [piece] if piece else []
    humps: list[str] = []
    start = 0
    for i in range(1, len(piece)):
        before, here = piece[i - 1], piece[i]
        after = piece[i + 1] if i + 1 < len(piece) else ""
        hump = before.islower() or before.isdigit() or after.islower()
        if here.isupper() and before.isalnum() and hump:
            humps.append(piece[start:i])
            start = i
    humps.append(piece[start:])
    return [h for h in humps if h]


def _cjk_terms(word: str) -> Iterator[str]:
    last = 0
    for run in CJK_RUN.finditer(word):
        if run.start() > last:
            yield from _word_terms(word[last : run.start()])
        chars = run.group()
        yield from chars
        for i in range(len(chars) - 1):
            yield chars[i : i + 2]
        last = run.end()
    if last < len(word):
        yield from _word_terms(word[last:])


def term_index(term: str) -> int:
    """A term's index in the sparse vector (stable across processes and versions)."""
    return zlib.crc32(term.encode("utf-8"))


def text_vector(text: str, heading: str | None = None) -> tuple[list[int], list[float]]:
    """A chunk's sparse vector: each term's BM25 term-frequency weight. ``heading``: the
    chunk's heading path (``2 Currents › 2.1 Rip currents``), each of whose terms counts
    once more, as a heading printed in the chunk would (the chunk's length is its text's).
    Indices in first-seen order: the index does not need them sorted."""
    counts, norm = _counts(text, heading)
    return list(counts), [_bm25_tf(float(n), norm) for n in counts.values()]


Tf = TypeVar("Tf", float, "npt.NDArray[np.float64]")


def _bm25_tf(tf: Tf, norm: float) -> Tf:
    """BM25's saturated term frequency (``norm``: its length normalisation, from
    :func:`_counts`), of one count or of an array of them."""
    return tf * (K1 + 1) / (tf + norm)


def _counts(text: str, heading: str | None) -> tuple[Counter[int], float]:
    """Each term index's count in ``text`` (and once more in ``heading``), and BM25's
    length normalisation for the text.

    This runs once per chunk on the throughput path: the words are found by one regex
    pass (C), each word's term indices come from a per-process cache keyed by the word
    as it stands (a corpus's words repeat: a chunk has ~85, a few of them new), and the
    counting is ``Counter``'s C loop.
    """
    words = _WORD.findall(_normal(text))
    cached = list(map(_WORDS.get, words))
    found = _learned(words) if None in cached else cast("list[tuple[int, ...]]", cached)
    counts = Counter(chain.from_iterable(found))
    length = counts.total()
    if heading:
        counts.update(_heading_terms(heading))
    return counts, K1 * (1 - B + B * length / AVERAGE_TERMS)


@functools.lru_cache(maxsize=1 << 10)
def _heading_terms(heading: str) -> tuple[int, ...]:
    """The distinct term indices of a heading path (cached: a section's chunks share it)."""
    return tuple(_distinct_indices(heading))


def _distinct_indices(text: str) -> dict[int, None]:
    """Each term index of ``text`` once, in first-seen order."""
    return dict.fromkeys(i for word in _WORD.findall(_normal(text)) for i in _word_indices(word))


#: Term indices of each word seen in chunks: the words seen since the cache last turned
#: over, and those seen in the turn before.
_WORDS: dict[str, tuple[int, ...]] = {}
_OLDER_WORDS: dict[str, tuple[int, ...]] = {}
#: Words a turn holds: memory stays bounded on a long run (a worker's peak RSS stays
#: under 300 MB), and a word still in use is carried over from the turn before, not
#: split and hashed again.
MAX_CACHED_WORDS = 1 << 15


def _learned(words: list[str]) -> list[tuple[int, ...]]:
    """The term indices of each of ``words``, those the cache lacked added to it (only
    the missing ones are looked at in Python)."""
    global _WORDS, _OLDER_WORDS
    missing = set(words).difference(_WORDS)
    if len(_WORDS) + len(missing) > MAX_CACHED_WORDS:
        _WORDS, _OLDER_WORDS = {}, _WORDS
        missing = set(words)
    older = _OLDER_WORDS.get
    for word in missing:
        ids = older(word)
        _WORDS[word] = _indices_of(word) if ids is None else ids
    return list(map(_WORDS.__getitem__, words))


#: The stored form's version, its first byte: bump it whenever the terms or their weights
#: change, and every stored vector of another version is computed again at index time.
STORED_FORMAT = 1


def stored_vector(text: str, heading: str | None = None) -> bytes:
    """:func:`text_vector` as ``chunks.keywords`` keeps it: :data:`STORED_FORMAT`, then the
    indices as little-endian uint32, then the weights as little-endian float32, by index
    (the shard sorts a vector that is not: ~1.4 µs of its upsert a point, here once)."""
    counts, norm = _counts(text, heading)
    size = len(counts)
    indices = np.fromiter(counts, dtype="<u4", count=size)
    order = indices.argsort()
    tfs = np.fromiter(counts.values(), dtype=np.float64, count=size)[order]
    weights = _bm25_tf(tfs, norm).astype("<f4")
    return bytes((STORED_FORMAT,)) + indices[order].tobytes() + weights.tobytes()


def from_stored(data: bytes | None) -> tuple[array.array[int], array.array[float]] | None:
    """A stored vector's indices and weights (arrays: qdrant-edge reads them as they are),
    or None when there is none or it is of another :data:`STORED_FORMAT`."""
    if not data or data[0] != STORED_FORMAT or (len(data) - 1) % 8:
        return None
    split = 1 + (len(data) - 1) // 2
    indices, values = array.array("I"), array.array("f")
    indices.frombytes(data[1:split])
    values.frombytes(data[split:])
    if sys.byteorder == "big":
        indices.byteswap()
        values.byteswap()
    return indices, values


def query_vector(text: str) -> tuple[list[int], list[float]]:
    """A query's sparse vector: each distinct term once (the index weighs it by IDF)."""
    indices = sorted(_distinct_indices(text))
    return indices, [1.0] * len(indices)
