"""stages.text.chunking: page provenance, size bound, overlap, headings, determinism."""

# mypy: disallow-untyped-calls=False

from __future__ import annotations

import hashlib
import itertools
import random
import re

import msgspec
import pytest

from runtime.errors import ConfigurationError
from stages.parsing.formats.pdf import iter_pages, open_pdf
from stages.text import paragraphs as paragraphs_module
from stages.text.chunking import Chunk, ChunkConfig, ChunkSizes, chunk_pages, is_heading
from stages.text.paragraphs import Joined, atoms
from stages.text.tokens import CharCounter
from tests.support.corpus import corpus_pdfs

WORD = re.compile(r"p(\d+)w\d+")


def tagged_pages(page_count: int, seed: int = 1) -> list[tuple[int, str]]:
    """Pages whose every word says which page it is on ("p3w17"), in paragraphs of random
    length, some of which run past the chunk size."""
    rng = random.Random(seed)
    pages = []
    counter = 0
    for page in range(1, page_count + 1):
        paragraphs = []
        for _ in range(rng.randint(1, 6)):
            words = []
            for _ in range(rng.choice([3, 20, 60, 250])):
                counter += 1
                words.append(f"p{page}w{counter}")
            lines = [" ".join(words[i : i + 9]) for i in range(0, len(words), 9)]
            paragraphs.append("\n".join(lines))
        pages.append((page, "\n\n".join(paragraphs)))
    return pages


def pages_of(chunk: Chunk) -> list[int]:
    return [int(m.group(1)) for m in WORD.finditer(chunk.text)]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_page_span_is_exact(seed: int) -> None:
    chunks = chunk_pages(tagged_pages(40, seed))
    assert len(chunks) > 40
    for chunk in chunks:
        pages = pages_of(chunk)
        assert pages[0] == chunk.page_start
        assert pages[-1] == chunk.page_end
        assert pages == sorted(pages)


def test_page_numbers_are_taken_as_given() -> None:
    chunks = chunk_pages([(7, "p7w1 p7w2"), (9, "p9w3 p9w4")])
    assert [(c.page_start, c.page_end) for c in chunks] == [(7, 9)]


def test_chunks_never_exceed_the_size_limit() -> None:
    config = ChunkConfig(max_tokens=300, overlap_tokens=60, min_tokens_before_heading=50)
    pages = [*tagged_pages(30), (31, "x" * 2000), (32, "word " * 500)]
    chunks = chunk_pages(pages, config)
    assert max(len(c.text) for c in chunks) <= 300
    # Packing fills chunks: most are well over half full.
    assert sum(len(c.text) > 150 for c in chunks) > 0.8 * len(chunks)


def test_no_text_is_lost_and_chunks_are_verbatim_slices() -> None:
    pages = tagged_pages(25)
    joined = "\n\n".join(text for _, text in pages)
    chunks = chunk_pages(pages)
    covered = set()
    for chunk in chunks:
        assert chunk.text in joined
        covered.update(re.findall(r"p\d+w\d+", chunk.text))
    assert covered == set(re.findall(r"p\d+w\d+", joined))


def test_consecutive_chunks_overlap_by_at_most_the_overlap() -> None:
    config = ChunkConfig(max_tokens=500, overlap_tokens=100)
    chunks = chunk_pages(tagged_pages(20), config)
    overlaps = [overlap(a.text, b.text) for a, b in itertools.pairwise(chunks)]
    assert max(overlaps) <= 100
    # Text with no headings breaks only on size, and every size break overlaps.
    assert sum(o > 0 for o in overlaps) > 0.9 * len(overlaps)


def test_no_overlap_when_configured_off() -> None:
    config = ChunkConfig(max_tokens=500, overlap_tokens=0)
    chunks = chunk_pages(tagged_pages(20), config)
    words = [w for c in chunks for w in re.findall(r"p\d+w\d+", c.text)]
    assert len(words) == len(set(words))


def overlap(first: str, second: str) -> int:
    """Length of the longest suffix of ``first`` that ``second`` starts with."""
    for size in range(min(len(first), len(second)), 0, -1):
        if second.startswith(first[-size:]):
            return size
    return 0


SECTIONED = [
    (1, "Baking Bread\n\n" + "Flour water salt yeast. " * 12),
    (2, "1.1 Mixing\n\n" + "Mix until shaggy then rest. " * 14 + "\n\n2.3\nShaping"),
    (3, "Shape the dough tightly and proof it. " * 12 + "\n\nChapter 3\nBaking"),
    (4, "Bake hot with steam for a crisp crust. " * 10),
]


def test_sections_start_chunks_and_chunks_never_end_on_a_heading() -> None:
    chunks = chunk_pages(SECTIONED, ChunkConfig(max_tokens=1000, overlap_tokens=150))
    firsts = [c.text.split("\n\n")[0] for c in chunks]
    assert firsts == ["Baking Bread", "1.1 Mixing", "2.3\nShaping", "Chapter 3\nBaking"]
    assert [(c.page_start, c.page_end) for c in chunks] == [(1, 1), (2, 2), (2, 3), (3, 4)]
    for chunk in chunks:
        assert not is_heading(chunk.text.split("\n\n")[-1])


def test_a_heading_moves_to_the_chunk_with_its_body() -> None:
    intro = "Keepers wound the clockwork. " * 7  # 203 chars: too small to break at a heading
    body = "The lens floats on mercury and turns. " * 21  # 798 chars: does not fit after it
    pages = [(1, f"{intro}\n\nRotation"), (2, body)]
    chunks = chunk_pages(pages)
    assert [c.text for c in chunks] == [intro.strip(), "Rotation\n\n" + body.strip()]
    assert [(c.page_start, c.page_end) for c in chunks] == [(1, 1), (1, 2)]


def test_small_sections_share_a_chunk() -> None:
    pages = [(1, "Intro\n\nShort.\n\nUsage\n\nAlso short.\n\nLimits\n\nBrief too.")]
    [chunk] = chunk_pages(pages)
    assert chunk.text == pages[0][1]


def test_same_input_gives_the_same_chunks() -> None:
    first = msgspec.json.encode(chunk_pages(tagged_pages(30, seed=5)))
    second = msgspec.json.encode(chunk_pages(tagged_pages(30, seed=5)))
    assert first == second


def test_ordinals_and_hashes() -> None:
    chunks = chunk_pages(tagged_pages(10))
    assert [c.ordinal for c in chunks] == list(range(len(chunks)))
    for chunk in chunks:
        assert chunk.sha256 == hashlib.sha256(chunk.text.encode()).hexdigest()


def test_empty_and_blank_pages_give_no_chunks() -> None:
    assert chunk_pages([]) == []
    assert chunk_pages([(1, ""), (2, "  \n\n \t\n"), (3, "\n")]) == []
    chunks = chunk_pages([(1, ""), (2, "  words here  "), (3, "   ")])
    assert [(c.text, c.page_start, c.page_end) for c in chunks] == [("words here", 2, 2)]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1 Introduction", True),
        ("2.3\nShaping the Loaf", True),
        ("Chapter 3\nBaking", True),
        ("Appendix A Glossary", True),
        ("## The Borrow Checker", True),
        ("Table of Contents", True),
        ("This is a sentence.", False),
        ("lower case start", False),
        ("12", False),
        ("2 Simple manipulations . . . . . . 8", False),
        ("Two\nordinary lines", False),
        ("A " + "very " * 20 + "long title", False),
    ],
)
def test_is_heading(text: str, expected: bool) -> None:
    assert is_heading(text) is expected


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_tokens": 10},
        {"overlap_tokens": 600},
        {"overlap_tokens": -1},
        {"min_tokens_before_heading": 5000},
        {"max_tokens": 100, "overlap_tokens": 51},
    ],
)
def test_invalid_config(kwargs: dict[str, int]) -> None:
    with pytest.raises(ConfigurationError):
        ChunkConfig(**kwargs).sizes(1000)


def test_sizes_follow_the_window_unless_set() -> None:
    assert ChunkConfig().sizes(254) == ChunkSizes(254, 38, 63)
    assert ChunkConfig().sizes(1000) == ChunkSizes(1000, 150, 250)
    assert ChunkConfig(max_tokens=200, overlap_tokens=0).sizes(254) == ChunkSizes(200, 0, 50)


def test_invalid_page_number() -> None:
    with pytest.raises(ValueError, match="1-based"):
        chunk_pages([(0, "text")])


@pytest.mark.corpus
def test_corpus_documents_chunk_within_bounds() -> None:
    for path in corpus_pdfs(min_count=60)[::10]:
        doc = open_pdf(path, name=path.name)
        if doc.page_count > 300:  # the long references only slow the test down
            doc.close()
            continue
        pages = [(text.page, text.text) for text, _ in iter_pages(doc)]
        doc.close()
        chunks = chunk_pages(pages)
        joined = "\n\n".join(text for _, text in pages)
        assert chunks, path.name
        assert all(len(c.text) <= 1000 for c in chunks)
        assert all(c.text in joined for c in chunks)
        spans = [(c.page_start, c.page_end) for c in chunks]
        assert spans == sorted(spans)
        # Every word of the document is in some chunk.
        assert set(joined.split()) == {w for c in chunks for w in c.text.split()}


def blank_line_paragraphs(text: str) -> list[tuple[int, int]]:
    """The paragraphs' spans by definition: split at blank lines, strip whitespace."""
    cuts = [0]
    for brk in re.finditer(r"\n[ \t]*\n", text):
        cuts += [brk.start(), brk.end()]
    cuts.append(len(text))
    spans = []
    for start, end in zip(cuts[::2], cuts[1::2], strict=True):
        piece = text[start:end]
        if piece.strip():
            lead, trail = len(piece) - len(piece.lstrip()), len(piece) - len(piece.rstrip())
            spans.append((start + lead, end - trail))
    return spans


def test_paragraphs_are_the_stripped_text_between_blank_lines() -> None:
    rng = random.Random(5)
    alphabet = " \t\n\r\xa0\u2003\x0bab.#"
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40))) for _ in range(20000)]
    texts += ["\n".join(text for _, text in tagged_pages(5, seed)) for seed in (1, 2)]
    counter = CharCounter(window=10**6)
    for text in texts:
        joined = Joined(text, counter.prefix([text], ""), counter)
        spans = [(a.start, a.end) for a in atoms(joined, 10**6)]
        assert spans == blank_line_paragraphs(text), repr(text)


def test_atoms_of_a_long_text_are_made_in_batches_alike(monkeypatch: pytest.MonkeyPatch) -> None:
    """Paragraphs become atoms a batch at a time; across batch boundaries they are the
    same atoms as made all at once."""
    rng = random.Random(11)
    words = ["alpha", "beta.", "Gamma", "delta,", "epsilon"]
    paragraphs = [" ".join(rng.choices(words, k=rng.randint(1, 30))) for _ in range(5_000)]
    text = "\n\n".join(paragraphs)
    counter = CharCounter(window=10**6)
    joined = Joined(text, counter.prefix([text], ""), counter)
    batched = list(atoms(joined, 100))
    assert len(batched) > 2 * paragraphs_module._ATOM_BATCH
    monkeypatch.setattr(paragraphs_module, "_ATOM_BATCH", 10**9)
    assert batched == list(atoms(joined, 100))
