"""Retrieval probes built from a corpus without a model (``python -m bench.retrieval``).

Five kinds, each a query and the page(s) of one document that answer it:

- **title**: a PDF outline title → the page its entry points at (titles that are not
  unique among the outlines, or that appear on more than :data:`MAX_TITLE_PAGES` pages,
  running heads, are left out; the title must be on its page);
- **identifier**: a rare identifier (with an underscore, camelCase, or capitals with
  digits) → the one or two pages of one document that hold it;
- **verbatim**: a sentence taken from past a chunk's start → the one page that holds it;
- **section**: a word and the section it is asked about ("tabsize in Listing options":
  the word on several pages of the document, the section's title naming which) → the
  pages of that section's chunks that hold the word;
- **table**: a table row's value asked by its row and column ("Default of timeout", the
  table chunks' header and first cell) → the one page that holds the row.

At most ``per_doc`` of each kind per document, drawn with a fixed seed.
"""

from __future__ import annotations

import random
import re
import uuid
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence

import msgspec

#: A title on more pages than this is a running head, not a place.
MAX_TITLE_PAGES = 3
#: Identifiers on at most this many pages (of one document) are rare.
MAX_IDENTIFIER_PAGES = 2
#: A verbatim sentence starts at least this far into its chunk.
PAST_START_CHARS = 120
MIN_WORDS, MAX_WORDS = 8, 40

_TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_UNDERSCORED = re.compile(r"[A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)+")
_CAMEL = re.compile(r"[A-Za-z]*[a-z][A-Z][A-Za-z0-9]*")
_CAPS_DIGITS = re.compile(r"(?=[A-Z0-9]*[0-9])(?=(?:[0-9]*[A-Z]){2})[A-Z][A-Z0-9]+")
_SENTENCE_END = re.compile(r"(?<=[a-z)][.!?])\s+(?=[A-Z])")
_NUMBERING = re.compile(r"^[\dA-Z]{0,3}(?:\.\d+)*\.?\s+")


class Probe(msgspec.Struct, frozen=True, kw_only=True):
    query: str
    kind: str
    document: uuid.UUID
    pages: tuple[int, ...]


class Page(msgspec.Struct, frozen=True):
    document: uuid.UUID
    page: int
    text: str


class ChunkText(msgspec.Struct, frozen=True):
    document: uuid.UUID
    ordinal: int
    page_start: int
    page_end: int
    text: str
    section: str | None = None
    table: bool = False


def normal(text: str) -> str:
    return " ".join(text.split())


class Corpus:
    """Page texts, whitespace-normalized and case-folded, for finding where text is."""

    def __init__(self, pages: Iterable[Page]) -> None:
        self.pages = [Page(p.document, p.page, normal(p.text)) for p in pages]
        self._folded = [p.text.casefold() for p in self.pages]

    def folded(self) -> Iterable[tuple[Page, str]]:
        """Each page with its text case-folded."""
        return zip(self.pages, self._folded, strict=True)

    def where(self, text: str) -> list[tuple[uuid.UUID, int]]:
        """The pages whose text holds ``text`` (case-folded)."""
        needle = normal(text).casefold()
        return [
            (p.document, p.page)
            for p, folded in zip(self.pages, self._folded, strict=True)
            if needle in folded
        ]


def title_probes(
    outlines: Mapping[uuid.UUID, Sequence[tuple[str, int]]],
    corpus: Corpus,
    per_doc: int,
    seed: int,
) -> list[Probe]:
    """Outline titles (text, page) per document → their pages."""
    counts: dict[str, int] = defaultdict(int)
    for entries in outlines.values():
        for title, _ in entries:
            counts[normal(title).casefold()] += 1
    probes = []
    for document, entries in outlines.items():
        found = []
        for title, page in entries:
            text = normal(title)
            bare = _NUMBERING.sub("", text)
            if counts[text.casefold()] != 1 or len(bare) < 8 or len(bare.split()) < 2:
                continue
            places = corpus.where(bare)
            if (document, page) in places and len(places) <= MAX_TITLE_PAGES:
                found.append(Probe(query=text, kind="title", document=document, pages=(page,)))
        probes += _sample(found, per_doc, seed)
    return probes


def is_identifier(token: str) -> bool:
    if len(token) < 4:
        return False
    return bool(
        _UNDERSCORED.fullmatch(token)
        or (len(token) >= 6 and _CAMEL.fullmatch(token))
        or _CAPS_DIGITS.fullmatch(token)
    )


def identifier_probes(corpus: Corpus, per_doc: int, seed: int) -> list[Probe]:
    """Rare identifiers → the one or two pages (of one document) that hold them."""
    places: dict[str, set[tuple[uuid.UUID, int]]] = defaultdict(set)
    for page in corpus.pages:
        for token in _TOKEN.findall(page.text):
            if is_identifier(token):
                places[token].add((page.document, page.page))
    by_doc: dict[uuid.UUID, list[Probe]] = defaultdict(list)
    for token in sorted(places):
        where = places[token]
        documents = {d for d, _ in where}
        if len(where) <= MAX_IDENTIFIER_PAGES and len(documents) == 1:
            [document] = documents
            pages = tuple(sorted(p for _, p in where))
            by_doc[document].append(
                Probe(query=token, kind="identifier", document=document, pages=pages)
            )
    return [p for document in by_doc for p in _sample(by_doc[document], per_doc, seed)]


def verbatim_probes(
    chunks: Sequence[ChunkText], corpus: Corpus, per_doc: int, seed: int
) -> list[Probe]:
    """A sentence from past the start of a chunk → the one page of the corpus that holds
    it (one sentence per chunk at most)."""
    by_doc: dict[uuid.UUID, list[ChunkText]] = defaultdict(list)
    for chunk in chunks:
        by_doc[chunk.document].append(chunk)
    probes = []
    for own in by_doc.values():
        shuffled = list(own)
        random.Random(seed).shuffle(shuffled)
        found: list[Probe] = []
        for chunk in shuffled:
            if len(found) == per_doc:
                break
            probe = _verbatim(chunk, corpus)
            if probe is not None:
                found.append(probe)
        probes += found
    return probes


def _verbatim(chunk: ChunkText, corpus: Corpus) -> Probe | None:
    text = normal(chunk.text)
    for match in _sentences(text):
        start, sentence = match
        words = sentence.split()
        if start < PAST_START_CHARS or not MIN_WORDS <= len(words) <= MAX_WORDS:
            continue
        letters = sum(c.isalpha() for c in sentence)
        if letters < 0.7 * len(sentence.replace(" ", "")):
            continue
        places = corpus.where(sentence)
        if len(places) == 1 and places[0][0] == chunk.document:
            page = places[0][1]
            if chunk.page_start <= page <= chunk.page_end:
                return Probe(
                    query=sentence, kind="verbatim", document=chunk.document, pages=(page,)
                )
    return None


def _sentences(text: str) -> list[tuple[int, str]]:
    """Each sentence of ``text`` with its offset, the first (cut by the chunk's start)
    and the last (cut by its end) left out."""
    bounds = [0, *(m.end() for m in _SENTENCE_END.finditer(text)), len(text)]
    spans = [(bounds[i], text[bounds[i] : bounds[i + 1]].strip()) for i in range(len(bounds) - 1)]
    return spans[1:-1]


#: A section probe's word is on at least this many pages of its document (ambiguous
#: alone) and at most :data:`MAX_WORD_PAGES`; on at most :data:`MAX_SECTION_PAGES` of
#: its section's.
MIN_WORD_PAGES, MAX_WORD_PAGES, MAX_SECTION_PAGES = 2, 12, 3
_WORD = re.compile(r"[a-z]{6,}")
_SECTION_PART = re.compile(r"\s+[›|]\s+")


def section_probes(
    chunks: Sequence[ChunkText], corpus: Corpus, per_doc: int, seed: int
) -> list[Probe]:
    """A word of a section's chunks that the document has on other pages too, asked "in"
    the section's title → the section's pages that hold it (one probe per section)."""
    pages_of = _word_pages(corpus)
    by_doc: dict[uuid.UUID, dict[str, tuple[set[int], set[str]]]] = defaultdict(dict)
    for chunk in chunks:
        title = _leaf(chunk.section)
        if title is None:
            continue
        pages, words = by_doc[chunk.document].setdefault(title, (set(), set()))
        pages.update(range(chunk.page_start, chunk.page_end + 1))
        words.update(_WORD.findall(chunk.text.casefold()))
    probes = []
    for document, sections in by_doc.items():
        found = []
        for title in sorted(sections):
            pages, words = sections[title]
            probe = _section_probe(document, title, pages, words, pages_of, seed)
            if probe is not None:
                found.append(probe)
        probes += _sample(found, per_doc, seed)
    return probes


def _leaf(section: str | None) -> str | None:
    """The section's own title (its path's last heading), numbering left out; None when
    too short to name a place."""
    if not section:
        return None
    title = _NUMBERING.sub("", _SECTION_PART.split(section)[-1]).strip()
    return title if len(title) >= 8 and len(title.split()) >= 2 else None


def _word_pages(corpus: Corpus) -> dict[tuple[uuid.UUID, str], set[int]]:
    """The pages each word of a document is on."""
    pages_of: dict[tuple[uuid.UUID, str], set[int]] = defaultdict(set)
    for page, folded in corpus.folded():
        for word in set(_WORD.findall(folded)):
            pages_of[(page.document, word)].add(page.page)
    return pages_of


def _section_probe(
    document: uuid.UUID,
    title: str,
    pages: set[int],
    words: set[str],
    pages_of: Mapping[tuple[uuid.UUID, str], set[int]],
    seed: int,
) -> Probe | None:
    folded = title.casefold()
    fitting = sorted(
        word
        for word in words
        if word not in folded
        and MIN_WORD_PAGES <= len(on := pages_of.get((document, word), set())) <= MAX_WORD_PAGES
        and on - pages
        and 0 < len(on & pages) <= MAX_SECTION_PAGES
    )
    if not fitting:
        return None
    word = random.Random(f"{seed}{title}").choice(fitting)
    where = tuple(sorted(pages_of[(document, word)] & pages))
    return Probe(query=f"{word} in {title}", kind="section", document=document, pages=where)


def table_probes(
    chunks: Sequence[ChunkText], corpus: Corpus, per_doc: int, seed: int
) -> list[Probe]:
    """A table chunk's row asked by its first cell and its second column's header
    ("Default of timeout") → the one page that holds the row."""
    by_doc: dict[uuid.UUID, list[Probe]] = defaultdict(list)
    for chunk in chunks:
        if chunk.table:
            by_doc[chunk.document] += _table_rows(chunk, corpus)
    return [p for document in by_doc for p in _sample(by_doc[document], per_doc, seed)]


def _table_rows(chunk: ChunkText, corpus: Corpus) -> list[Probe]:
    lines = chunk.text.split("\n")
    if len(lines) < 3:
        return []
    header = _cells(lines[0])
    out = []
    for line in lines[2:]:
        cells = _cells(line)
        if len(cells) < 2 or len(header) < 2 or not header[1] or not cells[1]:
            continue
        key = cells[0]
        if len(key) < 3 or not any(c.isalpha() for c in key):
            continue
        places = corpus.where(line)
        if len(places) == 1 and places[0][0] == chunk.document:
            query = f"{header[1]} of {key}"
            out.append(
                Probe(query=query, kind="table", document=chunk.document, pages=(places[0][1],))
            )
    return out


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split(" | ")]


def _sample(probes: Sequence[Probe], n: int, seed: int) -> list[Probe]:
    if len(probes) <= n:
        return list(probes)
    return random.Random(seed).sample(list(probes), n)
