"""Structure-aware chunking of page texts, sized in the embedder's tokens, with exact page
provenance.

Pure logic for the chunk stage. The pages are joined into one text with a blank line
between pages, and every decision is made on character offsets into that text, so each
chunk is a verbatim slice and its page span follows from where it starts and ends. Sizes
are measured with a :class:`~stages.tokens.TokenCounter` (the configured embedder's
tokenizer): one pass over the pages gives a :class:`~stages.tokens.Prefix` (where words
start, how many tokens each has), so any span's token count is two binary searches.

1. Paragraphs are the runs of text between blank lines (the parse stage writes one per
   PDF text block). A paragraph longer than a chunk can hold is split further at line,
   then sentence, then word boundaries (a single word longer than a chunk, with
   semchunk at exact counts).
2. Paragraphs are packed greedily into chunks of at most ``max_tokens`` tokens.
3. A heading-like paragraph starts a new chunk unless the current one is still small, and
   a chunk never ends on a heading (the heading moves to the next chunk with its body).
4. A chunk that follows a size break starts up to ``overlap_tokens`` before the previous
   one ended, snapped to a line, sentence or word start; one that follows a heading break
   starts at the heading, without overlap.
5. Every chunk is then counted exactly on its own (a span's tokens can differ from its
   share of the whole text's where a cut falls inside a word); one that is over is split
   again, so no chunk is longer than ``max_tokens`` and, by default (``max_tokens`` = the
   model's window), the model reads every token. ``Chunk.tokens`` is that exact count.
"""

from __future__ import annotations

import bisect
import hashlib
import re
from collections.abc import Callable, Iterable

import msgspec
from semchunk.semchunk import chunk as semchunk_chunk

from runtime.api import ConfigurationError
from stages.tokens import CharCounter, Prefix, TokenCounter

__all__ = ["Chunk", "ChunkConfig", "ChunkSizes", "chunk_pages", "is_heading"]

_PAGE_JOIN = "\n\n"
_PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n")
_SECTION_NUMBER = re.compile(
    r"(?:\d+(?:\.\d+)*\.?|[IVXLC]+\.|[A-Z]\.(?:\d+\.?)*|(?:chapter|section|part|appendix)\s+\S+)",
    re.IGNORECASE,
)
# Table-of-contents lines look like headings but end in dot leaders and a page number.
_DOT_LEADER = re.compile(r"(?:\.\s?){2,}\s*\d+\s*$|\.{4,}")
_HEADING_MAX_CHARS = 80
_HEADING_MAX_WORDS = 12
MIN_CHUNK_TOKENS = 16


class ChunkSizes(msgspec.Struct, frozen=True):
    """Chunk sizes in tokens, resolved against a model's window."""

    max_tokens: int
    overlap_tokens: int
    min_tokens_before_heading: int


class ChunkConfig(msgspec.Struct, frozen=True, kw_only=True):
    """How to cut text into chunks, in the embedder's tokens. None derives a size from the
    counter's default chunk size (the model's window for the local model): ``max_tokens``
    that size, the overlap 15% of it, and a chunk grows through a heading while it is
    under 25% of it."""

    max_tokens: int | None = None
    overlap_tokens: int | None = None
    #: Below this size a chunk keeps growing through a heading instead of breaking.
    min_tokens_before_heading: int | None = None

    def __post_init__(self) -> None:
        if self.max_tokens is not None and self.max_tokens < MIN_CHUNK_TOKENS:
            raise ConfigurationError(
                f"chunk size must be at least {MIN_CHUNK_TOKENS} tokens, got {self.max_tokens}"
            )
        if self.overlap_tokens is not None and self.overlap_tokens < 0:
            raise ConfigurationError(f"chunk overlap must be >= 0, got {self.overlap_tokens}")
        if self.min_tokens_before_heading is not None and self.min_tokens_before_heading < 0:
            raise ConfigurationError("min_tokens_before_heading must be >= 0")

    def sizes(self, default: int) -> ChunkSizes:
        """Concrete sizes; ``default`` is the chunk size when ``max_tokens`` is None."""
        size = self.max_tokens if self.max_tokens is not None else default
        overlap = self.overlap_tokens if self.overlap_tokens is not None else size * 3 // 20
        heading = self.min_tokens_before_heading
        heading = heading if heading is not None else size // 4
        if size < MIN_CHUNK_TOKENS:
            raise ConfigurationError(f"chunk size must be at least {MIN_CHUNK_TOKENS}, got {size}")
        if overlap > size // 2:
            raise ConfigurationError(
                f"chunk overlap must be at most half the chunk size ({size}), got {overlap}"
            )
        if heading > size:
            raise ConfigurationError("min_tokens_before_heading must not exceed the chunk size")
        return ChunkSizes(size, overlap, heading)


class Chunk(msgspec.Struct, frozen=True):
    """A piece of a document's text; ``page_start``/``page_end`` are 1-based, inclusive;
    ``tokens`` is its exact length in the counter's tokens."""

    ordinal: int
    text: str
    page_start: int
    page_end: int
    sha256: str
    tokens: int


class _Atom(msgspec.Struct, frozen=True):
    """A paragraph (or a piece of a long one) as a span of the joined text."""

    start: int
    end: int
    heading: bool


class _Text:
    """The joined text and its token prefix array."""

    def __init__(self, text: str, prefix: Prefix, counter: TokenCounter) -> None:
        self.text = text
        self.prefix = prefix
        self.counter = counter

    def size(self, start: int, end: int) -> int:
        """Tokens starting in ``text[start:end]``."""
        return self.prefix.size(start, end)

    def back(self, end: int, tokens: int) -> int:
        """The first offset from which at most ``tokens`` tokens remain before ``end``."""
        return self.prefix.back(end, tokens)

    def exact(self, start: int, end: int) -> bool:
        return self.counter.exact_span(self.text, start, end)

    def count(self, piece: str) -> int:
        return self.counter.counts([piece])[0]


def chunk_pages(
    pages: Iterable[tuple[int, str]],
    config: ChunkConfig | None = None,
    counter: TokenCounter | None = None,
) -> list[Chunk]:
    """Cut ``(page number, text)`` pairs, in reading order, into chunks.

    Sizes are in ``counter``'s tokens (default: characters, with a 1,000 window). The
    result depends only on the input, ``config`` and the counter: the same pages give the
    same chunks. Empty and whitespace-only chunks are never produced.
    """
    counter = counter or CharCounter()
    sizes = (config or ChunkConfig()).sizes(counter.chunk_tokens)
    parts, page_offsets, page_numbers = _join(pages)
    text = _PAGE_JOIN.join(parts)
    joined = _Text(text, counter.prefix(parts, _PAGE_JOIN), counter)
    spans = _fit(joined, _pack(joined, _atoms(joined, sizes), sizes), sizes.max_tokens)
    return [
        _chunk(i, text, s, e, n, page_offsets, page_numbers) for i, (s, e, n) in enumerate(spans)
    ]


def is_heading(paragraph: str) -> bool:
    """Whether a paragraph looks like a heading: one short title line without closing
    punctuation, optionally after a section number line ("2.1", "Chapter 3")."""
    paragraph = paragraph.strip()
    if paragraph.count("\n") > 1:
        return False  # three lines or more (most paragraphs): skip splitting them
    lines = [line.strip() for line in paragraph.splitlines()]
    if len(lines) == 2 and _SECTION_NUMBER.fullmatch(lines[0]):
        lines = lines[1:]
    if len(lines) != 1:
        return False
    title = lines[0].lstrip("#").strip()
    # The cheap tests first: most paragraphs are long or end in punctuation.
    if not 0 < len(title) <= _HEADING_MAX_CHARS or title[-1] in ".,;:!":
        return False
    number = _SECTION_NUMBER.match(title)
    words = (title[number.end() :] if number else title).split()
    return (
        0 < len(words) <= _HEADING_MAX_WORDS
        and words[0][0].isupper()
        and any(c.isalpha() for c in title)
        and not _DOT_LEADER.search(title)
    )


def _join(pages: Iterable[tuple[int, str]]) -> tuple[list[str], list[int], list[int]]:
    parts: list[str] = []
    offsets: list[int] = []
    numbers: list[int] = []
    at = 0
    for number, page_text in pages:
        if number < 1:
            raise ValueError(f"page numbers are 1-based, got {number}")
        offsets.append(at)
        numbers.append(number)
        parts.append(page_text)
        at += len(page_text) + len(_PAGE_JOIN)
    return parts, offsets, numbers


def _stripped_spans(text: str, start: int, end: int) -> Iterable[tuple[int, int]]:
    """Spans of the paragraphs of ``text[start:end]``, without surrounding whitespace."""
    cursor = start
    for brk in _PARAGRAPH_BREAK.finditer(text, start, end):
        yield from _strip(text, cursor, brk.start())
        cursor = brk.end()
    yield from _strip(text, cursor, end)


def _strip(text: str, start: int, end: int) -> Iterable[tuple[int, int]]:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    if start < end:
        yield start, end


def _atoms(joined: _Text, sizes: ChunkSizes) -> list[_Atom]:
    # Small enough that an overlap plus any one atom always fits in a chunk.
    limit = sizes.max_tokens - sizes.overlap_tokens
    text = joined.text
    atoms: list[_Atom] = []
    for start, end in _stripped_spans(text, 0, len(text)):
        if joined.size(start, end) <= limit:
            heading = text.count("\n", start, end) <= 1 and is_heading(text[start:end])
            atoms.append(_Atom(start, end, heading))  # 3+ lines: never a heading, no slice
            continue
        atoms.extend(_Atom(s, e, False) for s, e in _split_span(joined, start, end, limit, 0))
    return atoms


# Where a long paragraph may be cut, best first: after a line, a sentence, a word.
_CUTS = (re.compile(r"\n\s*"), re.compile(r"(?<=[.!?;:])\s+"), re.compile(r"\s+"))


def _split_span(
    joined: _Text, start: int, end: int, limit: int, level: int
) -> list[tuple[int, int]]:
    """Pieces of ``text[start:end]`` of at most ``limit`` tokens, cut at line, then
    sentence, then word ends, then anywhere; sized from the prefix where it is exact."""
    if joined.size(start, end) <= limit and joined.exact(start, end):
        return [(start, end)]
    text = joined.text
    if level == len(_CUTS):
        return [(start + s, start + e) for s, e in _split(text[start:end], limit, joined.count)]
    bounds = [start]
    for m in _CUTS[level].finditer(text, start, end):
        bounds += [m.start(), m.end()]
    bounds.append(end)
    pieces = [(bounds[i], bounds[i + 1]) for i in range(0, len(bounds), 2)]
    out: list[tuple[int, int]] = []
    for s, e in pieces:
        if s >= e:
            continue
        if out and joined.size(out[-1][0], e) <= limit and joined.exact(out[-1][0], e):
            out[-1] = (out[-1][0], e)
        elif joined.size(s, e) <= limit and joined.exact(s, e):
            out.append((s, e))
        else:
            out.extend(_split_span(joined, s, e, limit, level + 1))
    return out


def _split(paragraph: str, limit: int, count: Callable[[str], int]) -> list[tuple[int, int]]:
    """Offsets of pieces of at most ``limit`` tokens, cut at the largest whitespace runs
    first (lines, then sentences, then words)."""
    result = semchunk_chunk(paragraph, limit, count, memoize=False, offsets=True)
    assert isinstance(result, tuple)  # offsets=True returns (chunks, offsets)
    return result[1]


class _Packer:
    """Greedy packing of atoms into ``(start, end)`` chunk spans."""

    def __init__(self, joined: _Text, sizes: ChunkSizes) -> None:
        self.joined = joined
        self.sizes = sizes
        self.spans: list[tuple[int, int]] = []
        self.current: list[_Atom] = []
        self.start = 0
        # Where the next chunk starts if it opens with overlap (None: at its first atom).
        self.carry: int | None = None

    def add(self, atom: _Atom) -> None:
        limit = self.sizes.max_tokens
        size = self.joined.size
        if atom.heading and self._size() >= self.sizes.min_tokens_before_heading:
            self.flush(overlap=False)
        while self.current and size(self.start, atom.end) > limit:
            self.flush(overlap=not atom.heading)
        if not self.current:
            fits = self.carry is not None and size(self.carry, atom.end) <= limit
            self.start = self.carry if fits and self.carry is not None else atom.start
            self.carry = None
        self.current.append(atom)

    def _size(self) -> int:
        return self.joined.size(self.start, self.current[-1].end) if self.current else 0

    def flush(self, *, overlap: bool) -> None:
        """Close the current chunk; trailing headings move on to open the next one."""
        body, tail = _split_trailing_headings(self.current)
        end = body[-1].end
        self.spans.append((self.start, end))
        self.current = tail
        self.carry = None
        if tail:
            self.start = tail[0].start
        elif overlap and self.sizes.overlap_tokens:
            lo = self.joined.back(end, self.sizes.overlap_tokens)
            self.carry = _overlap_start(self.joined.text, self.start, lo, end)

    def finish(self) -> list[tuple[int, int]]:
        if self.current:
            self.spans.append((self.start, self.current[-1].end))
        return self.spans


def _split_trailing_headings(atoms: list[_Atom]) -> tuple[list[_Atom], list[_Atom]]:
    cut = len(atoms)
    while cut > 1 and atoms[cut - 1].heading:
        cut -= 1
    return atoms[:cut], atoms[cut:]


def _overlap_start(text: str, chunk_start: int, lo: int, end: int) -> int | None:
    """Where the next chunk starts: from ``lo`` (the last overlap's worth of tokens of the
    previous chunk) on, at the first line start, else sentence start, else word start
    (None: no overlap)."""
    lo = max(chunk_start + 1, lo)
    for boundary in ("\n", ". ", " "):
        found = text.find(boundary, lo - 1, end)
        if found != -1:
            at = _skip_space(text, found + len(boundary), end)
            return at if at < end else None
    return None


def _skip_space(text: str, at: int, end: int) -> int:
    while at < end and text[at].isspace():
        at += 1
    return at


def _pack(joined: _Text, atoms: list[_Atom], sizes: ChunkSizes) -> list[tuple[int, int]]:
    packer = _Packer(joined, sizes)
    for atom in atoms:
        packer.add(atom)
    return packer.finish()


def _fit(joined: _Text, spans: list[tuple[int, int]], limit: int) -> list[tuple[int, int, int]]:
    """``(start, end, exact tokens)`` of each span. A span the counter cannot size from the
    prefix (a cut inside a word may tokenize differently) is counted on its own, and
    split again at exact counts if that puts it over ``limit``."""
    text, counter = joined.text, joined.counter
    unsure = [i for i, (s, e) in enumerate(spans) if not counter.exact_span(text, s, e)]
    recount = counter.counts([text[spans[i][0] : spans[i][1]] for i in unsure])
    exact = dict(zip(unsure, recount, strict=True))
    out: list[tuple[int, int, int]] = []
    for i, (start, end) in enumerate(spans):
        tokens = exact.get(i)
        tokens = joined.size(start, end) if tokens is None else tokens
        if tokens <= limit:
            out.append((start, end, tokens))
            continue
        pieces = [
            (start + s, start + e)
            for s, e in _split(text[start:end], limit, joined.count)
            if text[start + s : start + e].strip()
        ]
        counts = counter.counts([text[s:e] for s, e in pieces])
        out.extend((s, e, n) for (s, e), n in zip(pieces, counts, strict=True))
    return out


def _chunk(
    ordinal: int,
    text: str,
    start: int,
    end: int,
    tokens: int,
    offsets: list[int],
    numbers: list[int],
) -> Chunk:
    body = text[start:end]
    return Chunk(
        ordinal=ordinal,
        text=body,
        page_start=numbers[bisect.bisect_right(offsets, start) - 1],
        page_end=numbers[bisect.bisect_right(offsets, end - 1) - 1],
        sha256=hashlib.sha256(body.encode()).hexdigest(),
        tokens=tokens,
    )
