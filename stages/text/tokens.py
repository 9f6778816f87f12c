"""Token counting in the configured embedder's own units, for sizing chunks.

A chunk is useful only as far as the embedding model reads it, so the chunker sizes chunks
with the :class:`TokenCounter` that matches the embedder: :class:`TokenizerCounter` (the
local model's own tokenizer), :class:`Utf8Counter` (Cohere: UTF-8 bytes, an upper bound of
a byte-level BPE's tokens) or :class:`CharCounter` (tests, ``bench/quality.py``). Each gives
exact counts of whole texts and a :class:`Prefix` over a text, so a span's size is two
binary searches. Windows, and why: docs/architecture.md, "Chunking in tokens".
"""

from __future__ import annotations

import array
import bisect
import itertools
import operator
import re
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, cast

import numpy as np
import numpy.typing as npt

from runtime.api import ConfigurationError
from stages.text.wordpiece import AsciiWordPiece
from stages.text.wordtable import (
    SPACES,
    Chars,
    WordTable,
    blocks,
    bounds,
    distinct,
    key_chars,
    slices,
    word_keys,
)

if TYPE_CHECKING:
    import tokenizers

__all__ = [
    "COHERE_V3_WINDOW",
    "COHERE_V4_WINDOW",
    "MINILM_MAX_TOKENS",
    "MINILM_TOKENIZER",
    "CharCounter",
    "Ints",
    "Prefix",
    "TokenCounter",
    "TokenizerCounter",
    "Utf8Counter",
    "local_counter",
    "token_counter_for",
]

Ints = npt.NDArray[np.int64]
#: Characters a dense prefix (one entry per character) is built from at a time.
_DENSE_BLOCK = 1 << 20


class Prefix:
    """How many tokens start before each character of a text, stored sparsely: the
    offsets where tokens (or a word's tokens) start and their counts, O(words) memory
    rather than O(characters). ``prefix[i]`` is the count before character ``i``.

    Built a block of the text at a time (:meth:`extend`), in 32-bit entries where the
    text is short enough (every text but one of over 500 million characters): a long
    document's arrays are its largest part of the chunker's memory after the text."""

    def __init__(self, starts: Ints, counts: Ints, length: int) -> None:
        # array.array and bisect: a lookup costs a fraction of numpy's per-call overhead;
        # many lookups at once go through numpy views of the same.
        # Each character starts at most 4 tokens (a UTF-8 byte each).
        code = "i" if 4 * length < 2**31 else "q"
        self.starts = array.array(code)  # sorted, distinct
        self.before = array.array(code, [0])
        self.length = length
        self.extend(starts, counts)

    def extend(self, starts: Ints, counts: Ints) -> None:
        """Append entries: ``counts[i]`` tokens start at ``starts[i]``, each start past
        every one so far."""
        dtype = np.dtype(self.starts.typecode)
        # (array.frombytes takes a buffer of bytes: the array's own, cast, no copy.)
        self.starts.frombytes(np.ascontiguousarray(starts, dtype=dtype).data.cast("B"))
        before = np.cumsum(counts, dtype=np.int64)
        before += self.before[-1]
        self.before.frombytes(before.astype(dtype).data.cast("B"))

    @classmethod
    def dense(cls, counts: Ints) -> Prefix:
        """One entry per character (``counts[i]`` tokens start at character ``i``)."""
        prefix = cls(np.zeros(0, np.int64), np.zeros(0, np.int64), len(counts))
        for at in range(0, len(counts), _DENSE_BLOCK):
            part = counts[at : at + _DENSE_BLOCK]
            prefix.extend(np.arange(at, at + len(part), dtype=np.int64), part)
        return prefix

    def __getitem__(self, at: int) -> int:
        if at < 0:
            at += self.length + 1
        return self.before[bisect.bisect_left(self.starts, at)]

    def at(self, offsets: Sequence[int]) -> list[int]:
        """``[self[i] for i in offsets]`` (offsets >= 0), in one pass of numpy."""
        starts = np.frombuffer(self.starts, self.starts.typecode)
        before = np.frombuffer(self.before, self.before.typecode)
        # Offsets in the entries' own type: else numpy converts all of ``starts`` per call.
        sought = np.asarray(offsets, dtype=starts.dtype)
        found: list[int] = before[np.searchsorted(starts, sought)].tolist()
        return found

    def size(self, start: int, end: int) -> int:
        """Tokens starting in ``[start, end)``."""
        starts, before = self.starts, self.before
        return before[bisect.bisect_left(starts, end)] - before[bisect.bisect_left(starts, start)]

    def back(self, end: int, tokens: int) -> int:
        """The first offset from which at most ``tokens`` tokens start before ``end``."""
        group = bisect.bisect_left(self.before, self[end] - tokens)
        return self.starts[group - 1] + 1 if group > 0 else 0


MINILM_TOKENIZER = Path(__file__).parent / "data" / "all-MiniLM-L6-v2" / "tokenizer.json"
#: all-MiniLM-L6-v2 was trained on 256-token inputs (sentence-transformers' max_seq_length).
MINILM_MAX_TOKENS = 256
#: Cohere's documented maximum input of embed-v4.0 ("context length: 128,000 tokens").
COHERE_V4_WINDOW = 128_000
#: Cohere's documented maximum input of the embed v3 models (512 tokens).
COHERE_V3_WINDOW = 512


class TokenCounter(Protocol):
    """Counts text in an embedding model's tokens."""

    @property
    def name(self) -> str:
        """What is counted, for logs and status: ``all-MiniLM-L6-v2 WordPiece``."""
        ...

    @property
    def window(self) -> int:
        """How many tokens of one text the model embeds (special tokens excluded)."""
        ...

    @property
    def chunk_tokens(self) -> int:
        """The default chunk size: the window, or less where the window is far longer
        than a chunk that retrieves well."""
        ...

    def counts(self, texts: Sequence[str]) -> list[int]:
        """Exact token count of each text."""
        ...

    def exact_span(self, text: str, start: int, end: int) -> bool:
        """Whether ``prefix[end] - prefix[start]`` is exactly the count of
        ``text[start:end]`` on its own (else the chunker counts the span again)."""
        ...

    def prefix(self, parts: Sequence[str], separator: str) -> Prefix:
        """The prefix array of ``separator.join(parts)`` (length ``len(text) + 1``)."""
        ...


class CharCounter:
    """One token per character."""

    def __init__(self, window: int = 1000) -> None:
        self.name = "characters"
        self.window = self.chunk_tokens = window

    def counts(self, texts: Sequence[str]) -> list[int]:
        return [len(t) for t in texts]

    def exact_span(self, text: str, start: int, end: int) -> bool:
        return True

    def prefix(self, parts: Sequence[str], separator: str) -> Prefix:
        size = sum(map(len, parts)) + len(separator) * max(len(parts) - 1, 0)
        return Prefix.dense(np.ones(size, dtype=np.int64))


class Utf8Counter:
    """UTF-8 bytes: an upper bound of a byte-level BPE tokenizer's count. Chunks default
    to 1,000 bytes (the 1,000 characters of English they were before), far under the
    window of a hosted model."""

    def __init__(self, window: int, model: str, chunk_tokens: int = 1000) -> None:
        self.name = f"UTF-8 bytes (upper bound of {model} tokens)"
        self.window = window
        self.chunk_tokens = min(chunk_tokens, window)

    def counts(self, texts: Sequence[str]) -> list[int]:
        return [len(t.encode()) for t in texts]

    def exact_span(self, text: str, start: int, end: int) -> bool:
        return True

    def prefix(self, parts: Sequence[str], separator: str) -> Prefix:
        code = np.frombuffer(separator.join(parts).encode("utf-32-le"), dtype=np.uint32)
        size = 1 + (code >= 0x80).astype(np.int64) + (code >= 0x800) + (code >= 0x10000)
        return Prefix.dense(size)


# Python's str.split() whitespace that BERT's normalizer deletes as control characters
# (joining the text around them) instead of splitting there.
_GLUE = re.compile("[\x0b\x0c\x1c-\x1f\x85]")
_NONE = itertools.repeat(None)


class TokenizerCounter:
    """A Hugging Face ``tokenizer.json``, without truncation, padding or special tokens.

    For a BERT tokenizer (BertNormalizer, BertPreTokenizer: words never span whitespace)
    a text's count is the sum of its whitespace-separated words' counts, so counts come
    from per-process caches of word counts, a block of pages at a time: short words from
    a :class:`~stages.text.wordtable.WordTable` (uncased WordPiece; room for ``cache_words``
    keys or more), any other from a dict of at most ``cache_words`` words. The misses of a block
    are counted together, by :class:`AsciiWordPiece` where it can and by the tokenizer
    itself for the rest: on the corpus a small fraction of the CPU of tokenizing every
    page, and the same numbers. Any other tokenizer is run on the whole text.
    """

    def __init__(self, path: Path | str, max_tokens: int, name: str, cache_words: int = 200_000):
        import tokenizers

        if not Path(path).is_file():
            raise ConfigurationError(f"tokenizer file missing: {path}")
        tok: tokenizers.Tokenizer = tokenizers.Tokenizer.from_file(str(path))
        tok.no_truncation()
        tok.no_padding()
        self._tok = tok
        self.name = name
        window = max_tokens - tok.num_special_tokens_to_add(is_pair=False)
        self.window = self.chunk_tokens = window
        if self.window <= 0:
            raise ConfigurationError(f"{name}: window of {max_tokens} leaves no room for text")
        self._by_word = (
            type(tok.normalizer).__name__ == "BertNormalizer"
            and type(tok.pre_tokenizer).__name__ == "BertPreTokenizer"
        )
        self._cache: dict[str, int] = {}
        self._cache_words = cache_words
        # Twice as many slots as words: the table empties itself when half full.
        self._table = WordTable(1 << (2 * cache_words - 1).bit_length())
        self._ascii = AsciiWordPiece.of(Path(path), tok) if self._by_word else None
        # The chunk stage runs several jobs' chunking in threads at once.
        self._lock = threading.Lock()

    def counts(self, texts: Sequence[str]) -> list[int]:
        if not self._by_word:
            encodings = self._tok.encode_batch_fast(list(texts), add_special_tokens=False)
            return [len(e) for e in encodings]
        return [sum(self._word_counts(_words(t))) for t in texts]

    def exact_span(self, text: str, start: int, end: int) -> bool:
        """Whether a span's share of :meth:`prefix` is its own count: for a BERT
        tokenizer, when whitespace (or the text's edge) is on both sides."""
        return (
            self._by_word
            and (start == 0 or text[start - 1] in SPACES)
            and (end == len(text) or text[end] in SPACES)
        )

    def prefix(self, parts: Sequence[str], separator: str) -> Prefix:
        """(For a BERT tokenizer, ``separator`` must be whitespace: it ends a word.)"""
        length = sum(map(len, parts)) + len(separator) * max(len(parts) - 1, 0)
        if not self._by_word:
            return self._offsets_prefix(separator.join(parts))
        empty = np.zeros(0, np.int64)
        prefix = Prefix(empty, empty, length)
        for at, block in blocks(parts, separator):
            chars = key_chars(block)
            first, last = bounds(chars)
            with self._lock:
                counts = self._block_counts(block, chars, first, last)
            first += at
            prefix.extend(first, counts)
        return prefix

    def _block_counts(self, block: str, chars: Chars, starts: Ints, ends: Ints) -> Ints:
        """Tokens of each word ``block[starts[i]:ends[i]]``: short printable-ASCII words
        from the word table, the rest (sliced out) from the cache of words."""
        counts = np.zeros(len(starts), np.int64)
        keyed, keys = word_keys(chars, starts, ends)
        if self._ascii is None:  # keys assume uncased BERT WordPiece (AsciiWordPiece.of)
            keyed[:] = False
            keys = keys[:0]
        found = self._table.lookup(keys)
        missing = np.flatnonzero(found == 0)
        if len(missing):
            new, first, which = distinct(keys[missing])
            assert self._ascii is not None  # keys are made for it only
            new_counts, hard = self._ascii.key_counts(new)
            if hard.any():
                at = np.flatnonzero(keyed)[missing[first[hard]]]
                words = slices(block, starts[at], ends[at])
                counted = self._tokenize_words(words)
                new_counts[hard] = [counted[w] for w in words]
            self._table.add(new, new_counts)
            found[missing] = new_counts[which]
        counts[keyed] = found
        rest = np.flatnonzero(~keyed)
        if len(rest):
            rest_words = slices(block, starts[rest], ends[rest])
            counts[rest] = cast("list[int]", self._word_counts_locked(rest_words))
        return counts

    def _word_counts(self, words: list[str]) -> list[int]:
        with self._lock:
            # Every None was filled in.
            return cast("list[int]", self._word_counts_locked(words))

    def _word_counts_locked(self, words: list[str]) -> list[int | None]:
        cache = self._cache
        found = list(map(cache.get, words))
        if None not in found:
            return found
        # Positions of the misses, found at C speed (most of a block's words are hits).
        misses = list(itertools.compress(range(len(found)), map(operator.is_, found, _NONE)))
        counted = self._count_words(list({words[i] for i in misses}))
        excess = len(cache) + len(counted) - self._cache_words
        if excess > 0:
            # The oldest quarter (dicts keep insertion order) plus room for these words.
            for word in list(itertools.islice(cache, excess + self._cache_words // 4)):
                del cache[word]
        cache.update(counted)
        for i in misses:
            found[i] = counted[words[i]]
        return found

    def _count_words(self, words: list[str]) -> dict[str, int]:
        """Tokens of each word: by :class:`AsciiWordPiece` where it can, the rest from one
        run of the tokenizer over them all."""
        if self._ascii is None:
            return self._tokenize_words(words)
        found = self._ascii.counts(words)
        counted = {w: n for w, n in zip(words, found, strict=True) if n is not None}
        if len(counted) < len(words):
            counted.update(self._tokenize_words([w for w in words if w not in counted]))
        return counted

    def _tokenize_words(self, words: list[str]) -> dict[str, int]:
        encoding = self._tok.encode(" ".join(words), add_special_tokens=False)
        firsts = np.fromiter((o[0] for o in encoding.offsets), np.int64, len(encoding))
        lengths = np.fromiter(map(len, words), np.int64, len(words))
        word_starts = np.concatenate(([0], np.cumsum(lengths + 1)[:-1]))
        owner = np.searchsorted(word_starts, firsts, side="right") - 1
        per_word = np.bincount(owner, minlength=len(words))
        return dict(zip(words, per_word.tolist(), strict=True))

    def _offsets_prefix(self, text: str) -> Prefix:
        encoding = self._tok.encode(text, add_special_tokens=False)
        firsts = np.fromiter((o[0] for o in encoding.offsets), np.int64, len(encoding))
        starts, counts = np.unique(firsts, return_counts=True)
        return Prefix(starts, counts.astype(np.int64), len(text))


def _words(text: str) -> list[str]:
    """The whitespace-separated words of ``text``, as BERT's pre-tokenizer sees them."""
    if not _GLUE.search(text):
        return text.split()
    # str.split() would cut at these; BERT deletes them and joins what is around them.
    return slices(text, *bounds(key_chars(text)))


def cohere_window(model: str) -> int:
    return (
        COHERE_V3_WINDOW
        if model.startswith(("embed-english", "embed-multilingual"))
        else (COHERE_V4_WINDOW)
    )


def local_counter() -> TokenizerCounter:
    return TokenizerCounter(MINILM_TOKENIZER, MINILM_MAX_TOKENS, "all-MiniLM-L6-v2 WordPiece")


def token_counter_for(kind: str, model: str | None) -> TokenCounter:
    """The counter of embedder ``kind`` (``local`` or ``cohere``) and Cohere ``model``,
    without loading the model (:attr:`stages.services.Services.token_counter`)."""
    if kind == "cohere":
        name = model or "embed-v4.0"
        return Utf8Counter(cohere_window(name), f"cohere/{name}")
    return local_counter()
