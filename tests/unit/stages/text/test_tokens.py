"""Chunks sized in the embedder's tokens: the counters agree with the real tokenizer, and no
chunk is longer than all-MiniLM-L6-v2's window on CJK, Cyrillic and code pages."""

# mypy: disallow-untyped-calls=False

from __future__ import annotations

import functools
import json
import random
import re
import string
from pathlib import Path

import numpy as np
import pytest
import tokenizers

from bench.harness.corpus import CORPUS_DIR
from runtime.errors import ConfigurationError
from stages.parsing.formats.pdf import iter_pages, open_pdf
from stages.settings import PipelineSettings
from stages.text.chunking import Chunk, ChunkConfig, ChunkSizes, chunk_pages
from stages.text.tokens import (
    MINILM_MAX_TOKENS,
    MINILM_TOKENIZER,
    CharCounter,
    Prefix,
    TokenCounter,
    TokenizerCounter,
    Utf8Counter,
    local_counter,
    token_counter_for,
)
from stages.text.wordtable import bounds, key_chars, word_keys
from tests.support.corpus import corpus_pdfs

#: Corpus pages by script: (file, first page, last page), 1-based, inclusive.
CORPUS_PAGES = {
    "cjk": [
        ("auto-multiple-choice-doc-pdf__auto-multiple-choice.ja.pdf", 1, 78),
        ("texlive-latex-recommended-doc__example-chinese.pdf", 1, 9),
        ("texlive-latex-recommended-doc__example-japanese.pdf", 1, 9),
        ("texlive-latex-recommended-doc__example-korean.pdf", 1, 9),
    ],
    "cyrillic": [
        ("texlive-latex-recommended-doc__examples.pdf", 1, 4),
        ("texlive-latex-recommended-doc__microtype-code.pdf", 200, 206),
    ],
    "code": [
        ("r-doc-pdf__R-exts.pdf", 1, 120),
        ("octave-doc__liboctave.pdf", 1, 40),
    ],
}

# Made Cyrillic pages (the corpus has only a few hundred Cyrillic characters): Russian
# sentences, shuffled into long paragraphs with and without line breaks.
RUSSIAN = (
    "Маяк стоит на скале у входа в гавань и светит всю ночь.",
    "Смотритель поднимается по винтовой лестнице и заводит часовой механизм.",
    "Линза Френеля собирает свет лампы в узкий луч, видимый за двадцать миль.",
    "Во время тумана включают ревун, и его низкий голос слышен далеко в море.",
    "Корабли сверяют курс по проблескам огня: у каждого маяка свой ритм.",
    "Зимой шторм бросает брызги до самой галереи, и стекло покрывается солью.",
)


@functools.cache
def tokenizer() -> tokenizers.Tokenizer:
    """all-MiniLM-L6-v2's tokenizer as the embedder loads it, but never truncating."""
    tok = tokenizers.Tokenizer.from_file(str(MINILM_TOKENIZER))
    tok.no_truncation()
    tok.no_padding()
    return tok


def model_tokens(text: str) -> int:
    """What the model would be fed for ``text``: its tokens with [CLS] and [SEP]."""
    return len(tokenizer().encode(text).ids)


@functools.cache
def corpus_pages(script: str) -> list[tuple[int, str]]:
    corpus_pdfs()  # skips when the corpus is missing
    pages: list[tuple[int, str]] = []
    for name, first, last in CORPUS_PAGES[script]:
        doc = open_pdf(CORPUS_DIR / "pdfs" / name, name=name)
        found = [(t.page, t.text) for t, _ in iter_pages(doc) if first <= t.page <= last]
        doc.close()
        assert found, name
        # One document's pages, renumbered after the previous document's.
        base = len(pages)
        pages.extend((base + i + 1, text) for i, (_, text) in enumerate(found))
    return pages


def russian_pages(count: int, seed: int = 7) -> list[tuple[int, str]]:
    rng = random.Random(seed)
    pages = []
    for page in range(1, count + 1):
        paragraphs = []
        for _ in range(rng.randint(1, 4)):
            sentences = [rng.choice(RUSSIAN) for _ in range(rng.choice([2, 8, 30, 80]))]
            joiner = rng.choice([" ", "\n"])
            paragraphs.append(joiner.join(sentences))
        pages.append((page, "\n\n".join(paragraphs)))
    return pages


def assert_within_window(pages: list[tuple[int, str]], chunks: list[Chunk]) -> None:
    assert chunks
    counts = [model_tokens(c.text) for c in chunks]
    # The model reads every token: 256 with its two special tokens.
    assert max(counts) <= MINILM_MAX_TOKENS, max(counts)
    # The chunker's own count is exact.
    assert [c.tokens + 2 for c in chunks] == counts
    # Nothing lost, nothing invented, page order kept.
    joined = "\n\n".join(text for _, text in pages)
    assert all(c.text in joined for c in chunks)
    assert set(joined.split()) == {w for c in chunks for w in c.text.split()}
    spans = [(c.page_start, c.page_end) for c in chunks]
    assert spans == sorted(spans)
    # Packing fills chunks: most use more than half the window.
    assert sum(n > MINILM_MAX_TOKENS // 2 for n in counts) > 0.6 * len(counts)


@pytest.mark.corpus
@pytest.mark.parametrize("script", sorted(CORPUS_PAGES))
def test_no_chunk_exceeds_the_window_on_corpus_pages(script: str) -> None:
    pages = corpus_pages(script)
    assert_within_window(pages, chunk_pages(pages, None, local_counter()))


def test_no_chunk_exceeds_the_window_on_made_cyrillic_pages() -> None:
    pages = russian_pages(30)
    chunks = chunk_pages(pages, None, local_counter())
    assert_within_window(pages, chunks)
    # Cyrillic costs about one WordPiece token per two characters here, so 1,000
    # characters would have been far over the window.
    assert max(len(c.text) for c in chunks) < 700


@pytest.mark.corpus
def test_the_old_character_chunks_did_exceed_the_window() -> None:
    """The regression this fixes, on the same pages: 1,000-character chunks."""
    pages = corpus_pages("cjk")
    old = chunk_pages(pages, ChunkConfig(max_tokens=1000, overlap_tokens=150), CharCounter())
    assert sum(model_tokens(c.text) > MINILM_MAX_TOKENS for c in old) > 0.3 * len(old)


@pytest.mark.corpus
@pytest.mark.parametrize("script", sorted(CORPUS_PAGES))
def test_word_cache_counts_equal_the_tokenizer(script: str) -> None:
    pages = [text for _, text in corpus_pages(script)]
    counter = TokenizerCounter(MINILM_TOKENIZER, MINILM_MAX_TOKENS, "test")
    expected = [len(tokenizer().encode(t, add_special_tokens=False).ids) for t in pages]
    assert counter.counts(pages) == expected
    assert counter.counts(pages) == expected  # from a warm cache
    assert int(counter.prefix(pages, "\n\n")[-1]) == sum(expected)


def test_counts_stay_exact_when_the_word_cache_evicts() -> None:
    counter = TokenizerCounter(MINILM_TOKENIZER, MINILM_MAX_TOKENS, "test", cache_words=50)
    texts = [text for _, text in russian_pages(6)] + [" ".join(f"w{i}x" for i in range(300))]
    expected = [len(tokenizer().encode(t, add_special_tokens=False).ids) for t in texts]
    assert counter.counts(texts) == expected
    assert counter.counts(texts[::-1]) == expected[::-1]
    assert int(counter.prefix(texts, "\n\n")[-1]) == sum(expected)


def test_prefix_and_counts_with_characters_bert_deletes() -> None:
    """Vertical tab, form feed, soft hyphen: str.split() cuts at the first two, BERT deletes
    all three and joins what is around them."""
    counter = TokenizerCounter(MINILM_TOKENIZER, MINILM_MAX_TOKENS, "test")
    texts = ["co\x0boperate and re\x0cassign", "hy\u00adphen\u2003em space", "日本語の文章"]
    expected = [len(tokenizer().encode(t, add_special_tokens=False).ids) for t in texts]
    assert counter.counts(texts) == expected
    prefix = counter.prefix(texts, "\n\n")
    assert int(prefix[-1]) == sum(expected)
    at = len(texts[0]) + 2
    assert int(prefix[at]) == expected[0]  # a page boundary is a word boundary


def test_utf8_counter_is_exact_over_any_span() -> None:
    counter = Utf8Counter(128_000, "cohere/embed-v4.0")
    parts = ["Maßstab 日本 тест 🙂", "x"]
    prefix = counter.prefix(parts, "\n\n")
    text = "\n\n".join(parts)
    for start in range(len(text)):
        for end in range(start, len(text) + 1):
            assert int(prefix[end] - prefix[start]) == len(text[start:end].encode())


def token_counter_from_env(env: dict[str, str]) -> TokenCounter:
    embed = PipelineSettings.from_env(env).embed
    return token_counter_for(embed.kind, embed.model)


def test_the_counter_follows_the_configured_embedder() -> None:
    local = token_counter_from_env({})
    assert (local.window, local.chunk_tokens) == (254, 254)
    cohere = token_counter_from_env({"COHERE_API_KEY": "k"})
    assert (cohere.window, cohere.chunk_tokens) == (128_000, 1000)
    v3_env = {"COHERE_API_KEY": "k", "RAGLINE_EMBED_MODEL": "embed-english-v3.0"}
    v3 = token_counter_from_env(v3_env)
    assert v3.window == 512
    forced = token_counter_from_env({"COHERE_API_KEY": "k", "RAGLINE_EMBEDDER": "local"})
    assert forced.window == 254


def test_chunks_set_above_the_window_are_reported_not_hidden() -> None:
    pages = russian_pages(10)
    counter = local_counter()
    chunks = chunk_pages(pages, ChunkConfig(max_tokens=400), counter)
    over = [c for c in chunks if c.tokens > counter.window]
    assert over
    assert all(model_tokens(c.text) == c.tokens + 2 for c in over)


def test_chunk_sizes_are_whole_sentences_when_they_can_be() -> None:
    pages = russian_pages(10, seed=3)
    for chunk in chunk_pages(pages, ChunkConfig(overlap_tokens=0), local_counter()):
        # Each sentence ends in a period; a chunk cut inside a paragraph ends at one.
        assert re.search(r"[.:]$", chunk.text), chunk.text[-40:]


@pytest.mark.parametrize("gone", ["RAGLINE_CHUNK_CHARS", "RAGLINE_CHUNK_OVERLAP"])
def test_character_settings_are_refused_with_what_to_set_instead(gone: str) -> None:
    with pytest.raises(ConfigurationError, match="RAGLINE_CHUNK_TOKENS"):
        PipelineSettings.from_env({gone: "1000"})


def test_an_overlap_over_half_the_chunk_is_refused_at_start() -> None:
    env = {"RAGLINE_CHUNK_TOKENS": "100", "RAGLINE_CHUNK_OVERLAP_TOKENS": "60"}
    with pytest.raises(ConfigurationError, match="at most half"):
        PipelineSettings.from_env(env)


def test_token_settings_are_read() -> None:
    env = {"RAGLINE_CHUNK_TOKENS": "200", "RAGLINE_CHUNK_OVERLAP_TOKENS": "20"}
    chunk = PipelineSettings.from_env(env).chunk
    assert chunk.sizes(254) == ChunkSizes(200, 20, 50)
    assert PipelineSettings.from_env({}).chunk.sizes(254) == ChunkSizes(254, 38, 63)


def test_ascii_words_counted_in_python_equal_the_tokenizer() -> None:
    counter = TokenizerCounter(MINILM_TOKENIZER, MINILM_MAX_TOKENS, "test")
    rng = random.Random(11)
    alphabet = string.ascii_letters + string.digits + string.punctuation
    words = {"".join(rng.choice(alphabet) for _ in range(rng.randint(1, 30))) for _ in range(5000)}
    words |= {"x" * 101, "a" * 100, "unaffable", "[SEP]", "a[UNK]b", "tab\x01bed", "naïve"}
    listed = sorted(words)
    assert counter._count_words(listed) == counter._tokenize_words(listed)


def test_words_with_unicode_punctuation_and_cjk_counted_in_python_equal_the_tokenizer() -> None:
    """Unicode punctuation and CJK ideographs are one token each; other non-ASCII letters
    and symbols (accents, kana, math) still go to the tokenizer, and the sum is exact."""
    counter = TokenizerCounter(MINILM_TOKENIZER, MINILM_MAX_TOKENS, "test")
    rng = random.Random(12)
    special = "’‘“”—–…•·⟨⟩«»、。「」（）！？；¿¡§¶†‡" + "日本語中文漢字龍" + "\uf900\U00020000"
    others = "éößıİçñжЯβ−→∑のカ한" + "\U0002b820\U0002b91f"
    alphabet = string.ascii_letters + string.digits + string.punctuation + special * 3 + others
    words = {"".join(rng.choice(alphabet) for _ in range(rng.randint(1, 25))) for _ in range(5000)}
    words |= {"‘[SEP]’", "⟨[UNK]⟩", "x’" * 60, "。" * 120}
    listed = sorted(words)
    assert counter._count_words(listed) == counter._tokenize_words(listed)
    ascii_path = counter._ascii
    assert ascii_path is not None
    assert sum(n is not None for n in ascii_path.counts(listed)) > len(listed) // 10


def test_word_keys_are_shared_only_by_words_of_equal_counts() -> None:
    text = (
        "don't don’t don“t 日本 中文 !! word word, Word 0123456789abcdef 0123456789abcdefg "
        "Маяк naïve tab\x01bed"
    )
    keyed_words = text.split()[:10]
    points = key_chars(text)
    starts, ends = bounds(points)
    keyed, keys = word_keys(points, starts, ends)
    assert [w for w, k in zip(text.split(), keyed.tolist(), strict=True) if k] == keyed_words
    counted = TokenizerCounter(MINILM_TOKENIZER, MINILM_MAX_TOKENS, "test")._tokenize_words(
        keyed_words
    )
    by_key: dict[tuple[int, int], set[int]] = {}
    for word, key in zip(keyed_words, keys.tolist(), strict=True):
        by_key.setdefault((key[0], key[1]), set()).add(counted[word])
    assert all(len(found) == 1 for found in by_key.values())
    # Typographic punctuation and ideographs count as "!" (don’t = don“t, 日本 = 中文 = !!);
    # other words have keys of their own.
    assert len(by_key) == len(keyed_words) - 3


@pytest.mark.parametrize("cache_words", [64, 200_000])
def test_word_table_counts_equal_the_tokenizer(cache_words: int) -> None:
    """Short words of ASCII, typographic punctuation and ideographs come from the word
    table (a small one empties itself many times over); each word's share of the prefix
    array is its count."""
    counter = TokenizerCounter(MINILM_TOKENIZER, MINILM_MAX_TOKENS, "test", cache_words)
    rng = random.Random(13)
    alphabet = string.ascii_letters * 3 + string.digits + string.punctuation + "’“”—…日本語。"
    words = ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 20))) for _ in range(6000)]
    words += ["a[SEP]b", "[UNK]", "x’[MASK]", "[CLS]’"]  # added tokens: to the tokenizer
    words += rng.choices(words, k=6000)  # seen again: from the table
    pages = [" ".join(words[i : i + 300]) for i in range(0, len(words), 300)]
    prefix = counter.prefix(pages, "\n\n")
    text = "\n\n".join(pages)
    starts, ends = bounds(key_chars(text))
    shares = [prefix.size(s, e) for s, e in zip(starts.tolist(), ends.tolist(), strict=True)]
    expected = counter._tokenize_words(text.split())
    assert shares == [expected[w] for w in text.split()]
    keyed, keys = word_keys(key_chars(text), starts, ends)
    assert keyed.dtype == bool and keyed.sum() > 0.7 * len(starts)  # lengths 1-20
    if cache_words > len(words):
        assert counter._table.lookup(keys).all()  # every keyed word is in the table


@pytest.mark.parametrize("setting", ["lowercase", "handle_chinese_chars"])
def test_other_bert_tokenizers_are_counted_word_by_word(tmp_path: Path, setting: str) -> None:
    """Keys assume an uncased BERT WordPiece that spaces CJK ideographs: any other BERT
    tokenizer's words all go through the tokenizer (and the cache), with its counts."""
    spec = json.loads(MINILM_TOKENIZER.read_text())
    spec["normalizer"][setting] = False
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(spec))
    counter = TokenizerCounter(path, MINILM_MAX_TOKENS, "cased")
    tok = tokenizers.Tokenizer.from_file(str(path))
    tok.no_truncation()
    texts = [text for _, text in russian_pages(2)] + ["Word word WORD don’t 龘龘龘 !!! x" * 20]
    expected = [len(tok.encode(t, add_special_tokens=False).ids) for t in texts]
    assert counter._ascii is None
    assert counter.counts(texts) == expected
    assert int(counter.prefix(texts, "\n\n")[-1]) == sum(expected)


def test_a_prefix_built_in_blocks_is_the_running_sum_of_its_counts() -> None:
    """Extended a block at a time (a long document's dense prefix spans several blocks),
    a prefix answers as the cumulative sum of all its counts at once."""
    rng = np.random.default_rng(7)
    counts = rng.integers(0, 5, size=(1 << 20) + 12_345, dtype=np.int64)
    prefix = Prefix.dense(counts)
    before = np.concatenate(([0], np.cumsum(counts)))
    offsets = sorted(rng.integers(0, len(counts) + 1, size=5_000).tolist())
    assert prefix.at(offsets) == before[offsets].tolist()
    assert [prefix[i] for i in offsets[:500]] == before[offsets[:500]].tolist()
    assert prefix.starts.typecode == "i"  # 32-bit entries: half the memory
    in_two = Prefix(np.arange(10), counts[:10], 20)
    in_two.extend(np.arange(10, 20), counts[10:20])
    assert in_two.at(list(range(21))) == before[:21].tolist()


def test_a_prefix_of_a_huge_text_keeps_64_bit_entries() -> None:
    prefix = Prefix(np.array([0, 2**31 + 5]), np.array([1, 2]), 2**31 + 10)
    assert prefix.starts.typecode == "q"
    assert prefix[2**31 + 6] == 3
