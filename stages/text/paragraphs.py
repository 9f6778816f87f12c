"""Paragraphs of the joined page text, as the chunker packs them: where each is, whether
it looks like a heading, and how one too long for a chunk is cut (the chunk stage's pure
logic, with :mod:`stages.text.chunking`)."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterator

import msgspec
from semchunk.semchunk import chunk as semchunk_chunk

from stages.text.tokens import Prefix, TokenCounter

__all__ = ["Atom", "Joined", "atoms", "is_heading", "split"]

# A paragraph: the text between blank lines ("\n[ \t]*\n"), without the whitespace around
# it: from a non-space character, over any newline not followed by a blank line, back to a
# non-space character (\s is str.isspace()).
_PARAGRAPH = re.compile(r"\S[^\n]*(?:\n(?![ \t]*\n)[^\n]*)*(?<=\S)")
_SECTION_NUMBER = re.compile(
    r"(?:\d+(?:\.\d+)*\.?|[IVXLC]+\.|[A-Z]\.(?:\d+\.?)*|(?:chapter|section|part|appendix)\s+\S+)",
    re.IGNORECASE,
)
# Table-of-contents lines look like headings but end in dot leaders and a page number.
_DOT_LEADER = re.compile(r"(?:\.\s?){2,}\s*\d+\s*$|\.{4,}")
_HEADING_MAX_CHARS = 80
# A heading's title never ends in these.
_NOT_TITLE_END = ".,;:!"
_HEADING_MAX_WORDS = 12
# Where str.splitlines() splits.
_LINE_BREAK = re.compile("[\n\r\x0b\x0c\x1c-\x1e\x85\u2028\u2029]")
#: Paragraphs made into atoms at a time (one numpy lookup of their prefix entries each).
_ATOM_BATCH = 2048


class Atom(msgspec.Struct, frozen=True):
    """A paragraph (or a piece of a long one) as a span of the joined text, with the
    prefix array at its ends (a span's size is ``prefix[end] - prefix[start]``)."""

    start: int
    end: int
    heading: bool
    before_start: int
    before_end: int


class Joined:
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


def is_heading(paragraph: str) -> bool:
    """Whether a paragraph looks like a heading: one short title line without closing
    punctuation, optionally after a section number line ("2.1", "Chapter 3")."""
    paragraph = paragraph.strip()
    if not _LINE_BREAK.search(paragraph):
        title = paragraph.lstrip("#").strip()  # one line (most candidates): no splitting
    else:
        if paragraph.count("\n") > 1:
            return False  # three lines or more (most paragraphs): skip splitting them
        lines = [line.strip() for line in paragraph.splitlines()]
        if len(lines) == 2 and _SECTION_NUMBER.fullmatch(lines[0]):
            lines = lines[1:]
        if len(lines) != 1:
            return False
        title = lines[0].lstrip("#").strip()
    # The cheap tests first: most paragraphs are long or end in punctuation.
    if not 0 < len(title) <= _HEADING_MAX_CHARS or title[-1] in _NOT_TITLE_END:
        return False
    number = _SECTION_NUMBER.match(title)
    words = (title[number.end() :] if number else title).split()
    return (
        0 < len(words) <= _HEADING_MAX_WORDS
        and words[0][0].isupper()
        # An upper-case letter is a letter (not so a Roman numeral or a circled letter).
        and (words[0][0].isalpha() or any(c.isalpha() for c in title))
        and not _DOT_LEADER.search(title)
    )


def atoms(joined: Joined, limit: int) -> Iterator[Atom]:
    """The paragraphs of the text, each cut into pieces of at most ``limit`` tokens, in
    order; made a batch of paragraphs at a time, so a long document's are never all held
    at once (the packer keeps only the current chunk's)."""
    found = _PARAGRAPH.finditer(joined.text)
    while batch := [m.span() for m in itertools.islice(found, _ATOM_BATCH)]:
        yield from _atoms(joined, limit, batch)


def _atoms(joined: Joined, limit: int, spans: list[tuple[int, int]]) -> list[Atom]:
    text = joined.text
    before = joined.prefix.at([at for span in spans for at in span])
    out: list[Atom] = []
    for i, (start, end) in enumerate(spans):
        at_start, at_end = before[2 * i], before[2 * i + 1]
        if at_end - at_start <= limit:
            # The cheap tests first: most paragraphs end in punctuation or have 3+ lines.
            heading = (
                text[end - 1] not in _NOT_TITLE_END
                and text.count("\n", start, end) <= 1
                and is_heading(text[start:end])
            )
            out.append(Atom(start, end, heading, at_start, at_end))
            continue
        pieces = _split_span(joined, start, end, limit, 0)
        ends = joined.prefix.at([at for piece in pieces for at in piece])
        out.extend(
            Atom(s, e, False, ends[2 * j], ends[2 * j + 1]) for j, (s, e) in enumerate(pieces)
        )
    return out


# Where a long paragraph may be cut, best first: after a line, a sentence, a word.
_CUTS = (re.compile(r"\n\s*"), re.compile(r"(?<=[.!?;:])\s+"), re.compile(r"\s+"))


def _split_span(
    joined: Joined, start: int, end: int, limit: int, level: int
) -> list[tuple[int, int]]:
    """Pieces of ``text[start:end]`` of at most ``limit`` tokens, cut at line, then
    sentence, then word ends, then anywhere; sized from the prefix where it is exact."""
    if joined.size(start, end) <= limit and joined.exact(start, end):
        return [(start, end)]
    text = joined.text
    if level == len(_CUTS):
        return [(start + s, start + e) for s, e in split(text[start:end], limit, joined.count)]
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


def split(paragraph: str, limit: int, count: Callable[[str], int]) -> list[tuple[int, int]]:
    """Offsets of pieces of at most ``limit`` tokens, cut at the largest whitespace runs
    first (lines, then sentences, then words)."""
    result = semchunk_chunk(paragraph, limit, count, memoize=False, offsets=True)
    assert isinstance(result, tuple)  # offsets=True returns (chunks, offsets)
    return result[1]
