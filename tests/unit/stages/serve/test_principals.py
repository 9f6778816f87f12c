"""Tokens with principals and what the doors make of a caller's words: RAGLINE_API_TOKENS
entries (the settings row and the server read them alike), the read rule, search filters
from a query string, and what an upload says about its document."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st
from litestar.exceptions import HTTPException

from runtime.errors import ConfigurationError
from stages.serve import http_api as api
from stages.serve import uploads
from stages.serve.auth import EVERYONE, NOBODY, Caller, token_match
from stages.serve.config import ApiToken, ServeConfig, api_tokens, parse_tokens
from stages.settings import PIPELINE_SETTINGS

ROW = next(s for s in PIPELINE_SETTINGS if s.name == "RAGLINE_API_TOKENS")


def test_entries_name_their_principals() -> None:
    assert api_tokens(("plain", "t2:alice", "t3:bob+team-docs+ops@corp.example")) == (
        ApiToken("plain", None),
        ApiToken("t2", ("alice",)),
        ApiToken("t3", ("bob", "team-docs", "ops@corp.example")),
    )
    assert api_tokens(("t:a+a",)) == (ApiToken("t", ("a",)),)


@pytest.mark.parametrize("entries", [(":p",), ("s3cret:",), ("s3cret:p+",), ("s3cret:p q",),
                                     ("s3cret", "s3cret:p"), ("s3cret:" + "p" * 129,)])  # fmt: skip
def test_a_bad_entry_is_one_line_without_the_token(entries: tuple[str, ...]) -> None:
    with pytest.raises(ConfigurationError) as caught:
        api_tokens(entries)
    assert caught.value.message.startswith("RAGLINE_API_TOKENS: ")
    assert "s3cret" not in caught.value.message and "\n" not in caught.value.message
    with pytest.raises(ConfigurationError):  # the server refuses to start with it
        ServeConfig(tokens=entries)
    assert ROW.problem(",".join(entries)) is not None


ENTRY = st.text(alphabet="ab:+@- ", min_size=1, max_size=8).filter(lambda e: e.strip())


@given(st.lists(ENTRY, min_size=1, max_size=4))
def test_the_settings_row_and_the_server_agree(entries: list[str]) -> None:
    raw = ",".join(entries)
    try:
        api_tokens(parse_tokens(raw))
        served = True
    except ConfigurationError:
        served = False
    assert (ROW.problem(raw) is None) == served, raw


def test_a_token_names_its_caller_in_constant_time() -> None:
    tokens = api_tokens(("open", "mine:alice+bob"))
    assert token_match("mine", tokens) == ApiToken("mine", ("alice", "bob"))
    assert token_match("open", tokens) == ApiToken("open", None)
    assert token_match("min", tokens) is None and token_match(None, tokens) is None


@pytest.mark.parametrize(
    ("principals", "readers", "may"),
    [
        (None, None, True),
        (None, [], True),
        (None, ["x"], True),
        (("a",), None, True),
        (("a",), [], False),
        (("a",), ["b"], False),
        (("a", "b"), ["c", "b"], True),
        ((), None, True),
        ((), ["a"], False),
    ],
)
def test_the_read_rule(
    principals: tuple[str, ...] | None, readers: list[str] | None, may: bool
) -> None:
    assert Caller(principals).may_read(readers) is may
    assert Caller(principals).restricted is (principals is not None)


def test_a_caller_the_check_never_saw_reads_only_open_documents() -> None:
    assert NOBODY.may_read(None) and not NOBODY.may_read(["anyone"])
    assert EVERYONE.may_read(["anyone"])


def words(**given: object) -> api.SearchWords:
    return api.SearchWords(**given)  # type: ignore[arg-type]


def test_search_words_become_filters() -> None:
    doc = uuid.uuid4()
    found = api.search_filters(
        words(
            document=(str(doc), ""),
            type=("text/markdown", " "),
            meta=("team=a", ""),
            path="notes/",
            pages="3-",
            since="2024-01-02",
            section="",
        )
    )
    assert found.documents == (doc,) and found.media_types == ("text/markdown",)
    assert found.metadata == {"team": "a"} and found.path_prefix == "notes/"
    assert found.pages == (3, None) and found.section is None
    assert found.since is not None and found.since.tzinfo is not None
    assert api.search_filters(api.NO_WORDS) == api.search_filters(words(path="", pages=""))
    assert api.search_filters(words(source="s3://bucket/p")).source == "s3://bucket/p"


@pytest.mark.parametrize(
    ("given", "line"),
    [
        ({"pages": " 3"}, "pages: expected"),
        ({"pages": "0"}, "pages: expected"),
        ({"document": ("nope",)}, "document: not a document id"),
        ({"until": "9999-12-31T23:00:00-05:00"}, "until: out of the range of dates"),
        ({"section": "a\x00"}, "NUL"),
        ({"type": ("a\x00",)}, "NUL"),
    ],
)
def test_bad_search_words_are_400(given: dict[str, object], line: str) -> None:
    with pytest.raises(HTTPException) as caught:
        api.search_filters(words(**given))
    assert caught.value.status_code == 400 and line in str(caught.value.detail)


def spooled(readers: str | None = None, meta: tuple[str, ...] = ()) -> uploads.Spooled:
    from pathlib import Path

    return uploads.Spooled(
        path=Path("x"), filename="x.pdf", sha256="0", byte_size=1, readers=readers, meta=meta
    )


def test_what_an_upload_says_about_its_document() -> None:
    alice = Caller(("alice",))
    none: tuple[str, ...] | bool | None = uploads.readers_of(None, "readers")
    assert none is False and uploads.readers_of("  ", "readers") is False
    assert uploads.readers_of("*", "readers") is None
    assert uploads.readers_of("b, a,b", "readers") == ("b", "a")
    # Not given: the caller's principals (every caller for a caller without them).
    assert uploads.about_upload(alice, False, {}, spooled()).readers == ("alice",)
    assert uploads.about_upload(EVERYONE, False, {}, spooled()).readers is None
    # Given in the query or the form; both: they must agree.
    assert uploads.about_upload(alice, None, {}, spooled()).readers is None
    assert uploads.about_upload(alice, False, {}, spooled("bob")).readers == ("bob",)
    assert uploads.about_upload(alice, ("bob",), {}, spooled("bob")).readers == ("bob",)
    merged = uploads.about_upload(alice, False, {"a": "1"}, spooled(meta=("b=2", "a=1")))
    assert merged.metadata == {"a": "1", "b": "2"}


@pytest.mark.parametrize(
    ("query_readers", "query_meta", "form", "line"),
    [
        (("bob",), {}, spooled("alice"), "disagree"),
        (False, {"a": "1"}, spooled(meta=("a=2",)), "disagree on 'a'"),
        (False, {}, spooled("a b"), "the multipart field readers: readers: not a principal"),
        (False, {}, spooled(meta=("novalue",)), "expected KEY=VALUE"),
        (False, {}, spooled(meta=("k=" + "v" * 9000,)), "more than 8192 bytes"),
    ],
)
def test_a_bad_upload_description_is_400(
    query_readers: tuple[str, ...] | bool | None,
    query_meta: dict[str, str],
    form: uploads.Spooled,
    line: str,
) -> None:
    with pytest.raises(HTTPException) as caught:
        uploads.about_upload(EVERYONE, query_readers, query_meta, form)  # type: ignore[arg-type]
    assert caught.value.status_code == 400 and line in str(caught.value.detail)
