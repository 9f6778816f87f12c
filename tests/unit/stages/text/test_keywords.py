"""stages.text.keywords: the keyword side's terms and weights, for documents and queries."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stages.text import keywords
from stages.text.keywords import (
    AVERAGE_TERMS,
    K1,
    STORED_FORMAT,
    from_stored,
    query_vector,
    stored_vector,
    term_index,
    terms,
    text_vector,
)


def test_identifiers_are_kept_whole_and_split() -> None:
    assert list(terms("asn1_der_decoding")) == ["asn1_der_decoding", "asn1", "der", "decoding"]
    assert list(terms("XRDP_UPSTREAM_VERSION")) == [
        "xrdp_upstream_version", "xrdp", "upstream", "version",
    ]  # fmt: skip
    assert list(terms("getHTTPResponseCode")) == [
        "gethttpresponsecode", "get", "http", "response", "code",
    ]  # fmt: skip
    assert list(terms("ssl.SSLContext")) == ["ssl.sslcontext", "ssl", "context"]
    assert list(terms("utf-8 v2Beta")) == ["utf-8", "utf", "8", "v2beta", "v2", "beta"]


def test_words_are_case_folded_in_any_script() -> None:
    assert list(terms("Straße ПРИВЕТ мир naïveCafé")) == [
        "strasse", "привет", "мир", "naïvecafé", "naïve", "café",
    ]  # fmt: skip
    assert list(terms("مرحبا بالعالم")) == ["مرحبا", "بالعالم"]


def test_cjk_runs_become_characters_and_their_pairs() -> None:
    assert list(terms("東京都")) == ["東", "京", "都", "東京", "京都"]
    assert list(terms("Python入門")) == ["python", "入", "門", "入門"]


def test_a_query_shares_the_documents_terms() -> None:
    indices, values = query_vector("the Quick quick fox")
    assert indices == sorted({term_index("the"), term_index("quick"), term_index("fox")})
    assert values == [1.0, 1.0, 1.0]
    doc_indices, _ = text_vector("The quick brown fox")
    assert set(indices) <= set(doc_indices)


def test_document_weights_are_bm25_term_frequencies() -> None:
    indices, values = text_vector("fox fox dog")
    weight = dict(zip(indices, values, strict=True))
    norm = K1 * (1 - 0.75 + 0.75 * 3 / AVERAGE_TERMS)
    assert abs(weight[term_index("fox")] - 2 * (K1 + 1) / (2 + norm)) < 1e-9
    assert abs(weight[term_index("dog")] - (K1 + 1) / (1 + norm)) < 1e-9
    assert weight[term_index("fox")] < 2 * weight[term_index("dog")]  # saturates
    assert text_vector("") == ([], [])


def test_a_chunks_heading_path_counts_each_of_its_terms_once_more() -> None:
    """A chunk of section "2.1 Rip currents" that does not print its heading has the
    heading's terms as if printed once; the text's own weights and length are unchanged."""
    text = "A ripcurrent flows away from the beach through a gap."
    plain = dict(zip(*text_vector(text), strict=True))
    weight = dict(zip(*text_vector(text, "2 Currents › 2.1 Rip currents"), strict=True))
    once = plain[term_index("ripcurrent")]
    for term in ("rip", "currents", "2.1", "2", "1"):
        assert weight[term_index(term)] == once  # "currents" twice in the path: once
    assert weight[term_index("beach")] == plain[term_index("beach")]
    assert weight[term_index("gap")] == once
    assert set(weight) - set(plain) == {term_index(t) for t in ("rip", "currents", "2.1", "2", "1")}
    # A heading word the text prints too counts twice, over the text's length.
    both = dict(zip(*text_vector(text, "Beach safety"), strict=True))
    norm = K1 * (1 - 0.75 + 0.75 * len(list(terms(text))) / AVERAGE_TERMS)
    assert abs(both[term_index("beach")] - 2 * (K1 + 1) / (2 + norm)) < 1e-9
    assert text_vector(text, None) == text_vector(text, "") == text_vector(text)


def test_garbage_words_are_not_terms() -> None:
    assert list(terms("a" * 65 + " ok")) == ["ok"]


@given(st.text(max_size=400), st.one_of(st.none(), st.text(max_size=60)))
def test_a_stored_vector_reads_back_as_the_computed_one_by_index(
    text: str, heading: str | None
) -> None:
    """What the chunk stage stores is the chunk's vector, sorted by term index (as the
    shard keeps it), its weights as float32."""
    computed = dict(zip(*text_vector(text, heading), strict=True))
    stored = from_stored(stored_vector(text, heading))
    assert stored is not None
    indices, values = stored
    assert list(indices) == sorted(computed)
    assert list(values) == pytest.approx([computed[i] for i in indices], rel=1e-6)


def test_a_vector_stored_in_another_format_or_damaged_is_not_read() -> None:
    """The index stage computes these again instead: none stored, an older or newer
    format, a cut-off one."""
    good = stored_vector("the borrow checker", "3 Ownership")
    assert from_stored(good) is not None and good[0] == STORED_FORMAT
    assert from_stored(None) is None and from_stored(b"") is None
    assert from_stored(bytes((STORED_FORMAT + 1,)) + good[1:]) is None
    assert from_stored(good[:-3]) is None
    empty = from_stored(stored_vector(""))  # no terms: an empty vector
    assert empty is not None and [list(a) for a in empty] == [[], []]


def _humps_by_rule(piece: str) -> list[str]:
    """The hump rule applied letter by letter (what keywords' quick checks must agree
    with): a capital starts a hump after a letter or digit, where the letter before is
    lower case or a digit, or the letter after is lower case."""
    humps, start = [], 0
    for i in range(1, len(piece)):
        before, here = piece[i - 1], piece[i]
        after = piece[i + 1] if i + 1 < len(piece) else ""
        if (
            here.isupper()
            and before.isalnum()
            and (before.islower() or before.isdigit() or after.islower())
        ):
            humps.append(piece[start:i])
            start = i
    humps.append(piece[start:])
    return [h for h in humps if h]


@given(st.text(alphabet=st.sampled_from("aZ9_Åß東ǅϒΣσİı") | st.characters(), max_size=10))
def test_the_hump_split_of_any_piece_is_the_rules(piece: str) -> None:
    """Words with no capital past the first letter, all capitals or digits skip the
    letter-by-letter walk; the split is the same in every script (titlecase letters,
    uncased letters, digits)."""
    assert keywords._humps(piece) == _humps_by_rule(piece)


@given(st.lists(st.text(max_size=40), min_size=1, max_size=30))
def test_the_word_cache_turning_over_changes_no_vector(texts: list[str]) -> None:
    """Each text's vector is its terms' BM25 weights whether its words come from a cache
    that turns over every few words (carried over from the turn before, or computed
    again) or are computed afresh."""
    # A turn holds 4 words, or one text's words when it has more.
    bound = max(4, *(len(set(keywords._WORD.findall(keywords._normal(t)))) for t in texts))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(keywords, "MAX_CACHED_WORDS", 4)
        patch.setattr(keywords, "_WORDS", {})
        patch.setattr(keywords, "_OLDER_WORDS", {})
        for _ in range(2):  # the second time round, partly from the cache
            for text in texts:
                counts = Counter(term_index(term) for term in terms(text))
                norm = K1 * (1 - 0.75 + 0.75 * counts.total() / AVERAGE_TERMS)
                indices, values = text_vector(text)
                assert indices == list(counts)
                assert values == pytest.approx([n * (K1 + 1) / (n + norm) for n in counts.values()])
                assert len(keywords._WORDS) <= bound
