"""Structure-aware chunking of page texts, with exact page provenance.

Pure logic for the chunk stage. The pages are joined into one text with a blank line
between pages, and every decision is made on character offsets into that text, so each
chunk is a verbatim slice and its page span follows from where it starts and ends.

1. Paragraphs are the runs of text between blank lines (the parse stage writes one per
   PDF text block). A paragraph longer than a chunk can hold is split further with
   semchunk (at line, sentence, then word boundaries).
2. Paragraphs are packed greedily into chunks of at most ``max_chars`` characters.
3. A heading-like paragraph starts a new chunk unless the current one is still small, and
   a chunk never ends on a heading (the heading moves to the next chunk with its body).
4. A chunk that follows a size break starts up to ``overlap_chars`` before the previous
   one ended, snapped to a line, sentence or word start; one that follows a heading break
   starts at the heading, without overlap.

Sizes are in characters, not tokens: that needs no tokenizer, is the same for every
embedding model, and 1,000 characters (about 250 tokens of English) fit the 256-token
window of small local models as well as the larger windows of hosted ones.
"""

from __future__ import annotations

import bisect
import hashlib
import re
from collections.abc import Iterable

import msgspec
from semchunk.semchunk import chunk as semchunk_chunk

from runtime.errors import ConfigurationError

__all__ = ["Chunk", "ChunkConfig", "chunk_pages", "is_heading"]

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


class ChunkConfig(msgspec.Struct, frozen=True, kw_only=True):
    """How to cut text into chunks; sizes are in characters."""

    max_chars: int = 1000
    overlap_chars: int = 150
    #: Below this size a chunk keeps growing through a heading instead of breaking.
    min_chars_before_heading: int = 250

    def __post_init__(self) -> None:
        if self.max_chars < 50:
            raise ConfigurationError(f"max_chars must be at least 50, got {self.max_chars}")
        if not 0 <= self.overlap_chars <= self.max_chars // 2:
            raise ConfigurationError(
                f"overlap_chars must be between 0 and max_chars/2, got {self.overlap_chars}"
            )
        if not 0 <= self.min_chars_before_heading <= self.max_chars:
            raise ConfigurationError("min_chars_before_heading must be between 0 and max_chars")


class Chunk(msgspec.Struct, frozen=True):
    """A piece of a document's text; ``page_start``/``page_end`` are 1-based, inclusive."""

    ordinal: int
    text: str
    page_start: int
    page_end: int
    sha256: str


class _Atom(msgspec.Struct, frozen=True):
    """A paragraph (or a piece of a long one) as a span of the joined text."""

    start: int
    end: int
    heading: bool


def chunk_pages(pages: Iterable[tuple[int, str]], config: ChunkConfig | None = None) -> list[Chunk]:
    """Cut ``(page number, text)`` pairs, in reading order, into chunks.

    The result depends only on the input and ``config``: the same pages give the same
    chunks. Empty and whitespace-only chunks are never produced.
    """
    config = config or ChunkConfig()
    text, page_offsets, page_numbers = _join(pages)
    spans = _pack(text, _atoms(text, config), config)
    return [_chunk(i, text, s, e, page_offsets, page_numbers) for i, (s, e) in enumerate(spans)]


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


def _join(pages: Iterable[tuple[int, str]]) -> tuple[str, list[int], list[int]]:
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
    return _PAGE_JOIN.join(parts), offsets, numbers


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


def _atoms(text: str, config: ChunkConfig) -> list[_Atom]:
    # Small enough that an overlap plus any one atom always fits in a chunk.
    limit = config.max_chars - config.overlap_chars
    atoms: list[_Atom] = []
    for start, end in _stripped_spans(text, 0, len(text)):
        if end - start <= limit:
            atoms.append(_Atom(start, end, is_heading(text[start:end])))
            continue
        atoms.extend(_Atom(start + s, start + e, False) for s, e in _split(text[start:end], limit))
    return atoms


def _split(paragraph: str, limit: int) -> list[tuple[int, int]]:
    """Offsets of pieces of at most ``limit`` characters, cut at the largest whitespace
    runs first (lines, then sentences, then words)."""
    result = semchunk_chunk(paragraph, limit, len, memoize=False, offsets=True)
    assert isinstance(result, tuple)  # offsets=True returns (chunks, offsets)
    return result[1]


class _Packer:
    """Greedy packing of atoms into ``(start, end)`` chunk spans."""

    def __init__(self, text: str, config: ChunkConfig) -> None:
        self.text = text
        self.config = config
        self.spans: list[tuple[int, int]] = []
        self.current: list[_Atom] = []
        self.start = 0
        # Where the next chunk starts if it opens with overlap (None: at its first atom).
        self.carry: int | None = None

    def add(self, atom: _Atom) -> None:
        limit = self.config.max_chars
        if atom.heading and self._size() >= self.config.min_chars_before_heading:
            self.flush(overlap=False)
        while self.current and atom.end - self.start > limit:
            self.flush(overlap=not atom.heading)
        if not self.current:
            fits = self.carry is not None and atom.end - self.carry <= limit
            self.start = self.carry if fits and self.carry is not None else atom.start
            self.carry = None
        self.current.append(atom)

    def _size(self) -> int:
        return self.current[-1].end - self.start if self.current else 0

    def flush(self, *, overlap: bool) -> None:
        """Close the current chunk; trailing headings move on to open the next one."""
        body, tail = _split_trailing_headings(self.current)
        end = body[-1].end
        self.spans.append((self.start, end))
        self.current = tail
        self.carry = None
        if tail:
            self.start = tail[0].start
        elif overlap and self.config.overlap_chars:
            self.carry = _overlap_start(self.text, self.start, end, self.config.overlap_chars)

    def finish(self) -> list[tuple[int, int]]:
        if self.current:
            self.spans.append((self.start, self.current[-1].end))
        return self.spans


def _split_trailing_headings(atoms: list[_Atom]) -> tuple[list[_Atom], list[_Atom]]:
    cut = len(atoms)
    while cut > 1 and atoms[cut - 1].heading:
        cut -= 1
    return atoms[:cut], atoms[cut:]


def _overlap_start(text: str, chunk_start: int, end: int, overlap_chars: int) -> int | None:
    """Where the next chunk starts: within the last ``overlap_chars`` of the previous one,
    at the first line start, else sentence start, else word start (None: no overlap)."""
    lo = max(chunk_start + 1, end - overlap_chars)
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


def _pack(text: str, atoms: list[_Atom], config: ChunkConfig) -> list[tuple[int, int]]:
    packer = _Packer(text, config)
    for atom in atoms:
        packer.add(atom)
    return packer.finish()


def _chunk(
    ordinal: int, text: str, start: int, end: int, offsets: list[int], numbers: list[int]
) -> Chunk:
    body = text[start:end]
    return Chunk(
        ordinal=ordinal,
        text=body,
        page_start=numbers[bisect.bisect_right(offsets, start) - 1],
        page_end=numbers[bisect.bisect_right(offsets, end - 1) - 1],
        sha256=hashlib.sha256(body.encode()).hexdigest(),
    )
