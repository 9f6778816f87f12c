"""Structure-aware chunking of page texts, sized in the embedder's tokens, with exact page
provenance.

Pure logic for the chunk stage: every decision is a character offset into the pages'
joined text, so a chunk is a verbatim slice whose page span follows from its ends. Spans are
sized with a :class:`~stages.text.tokens.Prefix` of the embedder's tokens. Paragraphs are
packed up to ``max_tokens``, headings start chunks, size breaks overlap, and every chunk is
then counted exactly (``Chunk.tokens``) and split again if over. The steps in full:
docs/architecture.md, "Chunking in tokens".
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Iterable, Iterator, Sequence

import msgspec

from runtime.api import ConfigurationError
from stages.text.paragraphs import Atom, Joined, atoms, is_heading, split
from stages.text.tokens import CharCounter, TokenCounter

__all__ = ["Chunk", "ChunkConfig", "ChunkSizes", "Cut", "chunk_pages", "cut", "is_heading"]

_PAGE_JOIN = "\n\n"
MIN_CHUNK_TOKENS = 16
#: A document is chunked this many characters of its pages at a time (whole pages; no
#: chunk spans two runs, and none overlaps the run before): its token prefix array, the
#: chunker's largest (a dense one is about 30 bytes a character while it is built),
#: grows with the run, not with the document. A 500-page book is one run.
WINDOW_CHARS = 2 << 20


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


def chunk_pages(
    pages: Iterable[tuple[int, str]],
    config: ChunkConfig | None = None,
    counter: TokenCounter | None = None,
) -> list[Chunk]:
    """Cut ``(page number, text)`` pairs, in reading order, into chunks.

    Sizes are in ``counter``'s tokens (default: characters, with a 1,000 window). The
    result depends only on the input, ``config`` and the counter: the same pages give the
    same chunks. Empty and whitespace-only chunks are never produced. A document longer
    than :data:`WINDOW_CHARS` is cut a run of pages at a time.
    """
    counter = counter or CharCounter()
    sizes = (config or ChunkConfig()).sizes(counter.chunk_tokens)
    chunks: list[Chunk] = []
    for window in _windows(pages):
        chunks.extend(_chunk_window(window, sizes, counter, len(chunks)))
    return chunks


class Cut(msgspec.Struct, frozen=True):
    """A window of parts joined (``text``), where each part starts in it (``first``: the
    index of its first part), and the chunk spans cut from it: ``(start, end, exact
    tokens)``."""

    text: str
    offsets: list[int]
    spans: list[tuple[int, int, int]]
    first: int


def cut(
    parts: Sequence[tuple[int, str]],
    sizes: ChunkSizes,
    counter: TokenCounter,
    breaks: Iterable[int] = (),
) -> list[Cut]:
    """:func:`chunk_pages`'s spans over ``(page number, text)`` parts, no chunk running
    over the start of a part in ``breaks`` (their indexes: where a section starts; the
    structure's chunker, :mod:`stages.text.structure`, maps the spans to boxes); a
    window of :data:`WINDOW_CHARS` at a time, as there."""
    hard = sorted(set(breaks))
    out: list[Cut] = []
    first = 0
    for window in _windows(parts):
        texts, offsets, _ = _join(window)
        text = _PAGE_JOIN.join(texts)
        at = [offsets[i - first] for i in hard if first < i < first + len(window)]
        out.append(Cut(text, offsets, _spans(text, texts, sizes, counter, at), first))
        first += len(window)
    return out


def _windows(pages: Iterable[tuple[int, str]]) -> Iterator[list[tuple[int, str]]]:
    """The pages in runs of :data:`WINDOW_CHARS` characters or more (the last shorter)."""
    window: list[tuple[int, str]] = []
    size = 0
    for page in pages:
        window.append(page)
        size += len(page[1])
        if size >= WINDOW_CHARS:
            yield window
            window, size = [], 0
    if window:
        yield window


def _chunk_window(
    pages: list[tuple[int, str]], sizes: ChunkSizes, counter: TokenCounter, first: int
) -> list[Chunk]:
    """The chunks of a run of pages, numbered from ``first``: each a copy of its text, so
    the run's joined text and arrays go once it is cut."""
    parts, page_offsets, page_numbers = _join(pages)
    text = _PAGE_JOIN.join(parts)
    spans = _spans(text, parts, sizes, counter)
    return [
        _chunk(first + i, text, s, e, n, page_offsets, page_numbers)
        for i, (s, e, n) in enumerate(spans)
    ]


def _spans(
    text: str,
    parts: list[str],
    sizes: ChunkSizes,
    counter: TokenCounter,
    breaks: Sequence[int] = (),
) -> list[tuple[int, int, int]]:
    """``(start, end, tokens)`` of each chunk. The token prefix array lives only in here:
    a long document's is freed before its chunks' texts are cut."""
    joined = Joined(text, counter.prefix(parts, _PAGE_JOIN), counter)
    # Small enough that an overlap plus any one atom always fits in a chunk.
    pieces = atoms(joined, sizes.max_tokens - sizes.overlap_tokens)
    return _fit(joined, _pack(joined, pieces, sizes, breaks), sizes.max_tokens)


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


class _Packer:
    """Greedy packing of atoms into ``(start, end)`` chunk spans."""

    def __init__(self, joined: Joined, sizes: ChunkSizes, breaks: Sequence[int] = ()) -> None:
        self.joined = joined
        self.sizes = sizes
        # Offsets no chunk runs over (ascending), and the next of them.
        self.breaks = breaks
        self.next_break = 0
        self.spans: list[tuple[int, int]] = []
        self.current: list[Atom] = []
        self.start = 0
        self.before_start = 0  # the prefix array at self.start
        # Where the next chunk starts if it opens with overlap (None: at its first atom).
        self.carry: int | None = None

    def add(self, atom: Atom) -> None:
        limit = self.sizes.max_tokens
        if self.next_break < len(self.breaks) and atom.start >= self.breaks[self.next_break]:
            self._close()
            while self.next_break < len(self.breaks) and atom.start >= self.breaks[self.next_break]:
                self.next_break += 1
        if atom.heading and self.current and self._size() >= self.sizes.min_tokens_before_heading:
            self.flush(overlap=False)
        while self.current and atom.before_end - self.before_start > limit:
            self.flush(overlap=not atom.heading)
        if not self.current:
            carry = self.carry
            self.carry = None
            if carry is not None:
                before_carry = self.joined.prefix[carry]
                if atom.before_end - before_carry <= limit:
                    self.start, self.before_start = carry, before_carry
                    self.current.append(atom)
                    return
            self.start, self.before_start = atom.start, atom.before_start
        self.current.append(atom)

    def _size(self) -> int:
        return self.current[-1].before_end - self.before_start if self.current else 0

    def flush(self, *, overlap: bool) -> None:
        """Close the current chunk; trailing headings move on to open the next one."""
        body, tail = _split_trailing_headings(self.current)
        end = body[-1].end
        self.spans.append((self.start, end))
        self.current = tail
        self.carry = None
        if tail:
            self.start, self.before_start = tail[0].start, tail[0].before_start
        elif overlap and self.sizes.overlap_tokens:
            lo = self.joined.back(end, self.sizes.overlap_tokens)
            self.carry = _overlap_start(self.joined.text, self.start, lo, end)

    def _close(self) -> None:
        """End the current chunk here, with nothing carried over (a section's end)."""
        if self.current:
            self.spans.append((self.start, self.current[-1].end))
        self.current = []
        self.carry = None

    def finish(self) -> list[tuple[int, int]]:
        if self.current:
            self.spans.append((self.start, self.current[-1].end))
        return self.spans


def _split_trailing_headings(atoms: list[Atom]) -> tuple[list[Atom], list[Atom]]:
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


def _pack(
    joined: Joined, atoms: Iterable[Atom], sizes: ChunkSizes, breaks: Sequence[int] = ()
) -> list[tuple[int, int]]:
    packer = _Packer(joined, sizes, breaks)
    for atom in atoms:
        packer.add(atom)
    return packer.finish()


def _fit(joined: Joined, spans: list[tuple[int, int]], limit: int) -> list[tuple[int, int, int]]:
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
            for s, e in split(text[start:end], limit, joined.count)
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
