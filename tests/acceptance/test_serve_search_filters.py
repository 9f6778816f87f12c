"""Search filters at the HTTP doors (issue 34, item 3): ``GET /v1/search`` and the web
view's search page take ``search``'s filter options by the same names (``document``,
``source``, ``path``, ``type``, ``since``, ``until``, ``meta``, ``pages``, ``section``),
answer what the filters allow (checked against an oracle computed from the rows), refuse
a bad filter with a 400 problem carrying the CLI's one line, and the OpenAPI schema
describes them. ``ragline serve`` in a subprocess over a synced and an ingested folder
(:mod:`tests.support.search_doors`)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from bench.harness.db import Databases
from tests.support.search_doors import (
    OPTIONS,
    Corpus,
    Filters,
    Query,
    cli_args,
    corpus,
    expected,
    ids_of,
    query_params,
    token_for,
)

PROBLEM = "application/problem+json"
OPEN = token_for(None)
#: Every chunk of the corpus comes back (fewer than this many), so answers are exact.
K = "100"


@pytest.fixture(scope="module")
def docs(databases: Databases, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Corpus]:
    with corpus(databases, tmp_path_factory.mktemp("filters")) as c:
        c.set_about({}, {d.id: {"team": "a" if i % 2 else "b"} for i, d in enumerate(c.docs)})
        yield c


@pytest.fixture(scope="module")
def http(docs: Corpus) -> Iterator[httpx.Client]:
    with docs.server.client(headers={"Authorization": f"Bearer {OPEN}"}) as client:
        yield client


@pytest.fixture(scope="module")
def web(docs: Corpus) -> Iterator[httpx.Client]:
    """The web view's client: the login cookie, no bearer header."""
    with docs.server.client(cookies={"ragline_token": OPEN}) as client:
        yield client


def metadata_of(docs: Corpus) -> dict[str, dict[str, str]]:
    return {d.id: {"team": "a" if i % 2 else "b"} for i, d in enumerate(docs.docs)}


def api_search(http: httpx.Client, filters: Filters, mode: str = "dense") -> set[str]:
    params: Query = [("q", "lantern harbour tides"), ("k", K), ("mode", mode)]
    params += query_params(filters)
    r = http.get("/v1/search", params=params)
    assert r.status_code == 200, r.text
    return ids_of(r.json())


def page_search(web: httpx.Client, filters: Filters) -> tuple[set[str], str]:
    params: Query = [("q", "lantern harbour tides"), ("k", K), *query_params(filters)]
    r = web.get("/search", params=params)
    assert r.status_code == 200, r.text
    hits = re.findall(r'<li class="hit"><a href="/documents/([0-9a-f-]{36})"', r.text)
    return set(hits), r.text


def cases(docs: Corpus) -> list[Filters]:
    """Each filter alone (some twice), then several together."""
    tides, alpha = docs.by_name["tides.md"], docs.by_name["notes/alpha.md"]
    return [
        {"document": [tides.id, alpha.id]},
        {"source": docs.folder},
        {"path": "notes/"},
        {"path": "rust"},
        {"type": ["text/markdown"]},
        {"type": ["text/plain", "application/pdf"]},
        {"since": "2020-06-01"},  # inclusive: tides.md's own time
        {"until": "2021-06-01T00:00:00+00:00"},  # exclusive: alpha.md's is left out
        {"meta": ["team=a"]},
        {"pages": "3-"},
        {"pages": "2-2"},
        {"section": "TIDES: WHY"},  # any case
        {"type": ["text/markdown"], "source": docs.folder, "since": "2020-01-01", "meta": "team=a"},
        {"path": "notes/", "section": "alpha notes › ledger"},
    ]


def test_each_filter_answers_what_it_allows(
    docs: Corpus, http: httpx.Client, web: httpx.Client
) -> None:
    every = {d.id for d in docs.docs}
    metadata = metadata_of(docs)
    for filters in cases(docs):
        want = expected(docs, None, filters, {}, metadata)
        assert want and want != every, filters  # each case keeps some and drops some
        assert api_search(http, filters) == want, filters
        assert api_search(http, filters, mode="hybrid") == want, filters
        assert page_search(web, filters)[0] == want, filters
    assert {name for f in cases(docs) for name in f} == set(OPTIONS)


def test_the_cli_and_the_api_answer_alike(docs: Corpus, http: httpx.Client) -> None:
    """The same words through ``search``'s options and the query string."""
    chosen = cases(docs)[-2:]
    runs = docs.cli.run_all(
        *(("search", "lantern", "-k", K, "--mode", "dense", "--json", *cli_args(f)) for f in chosen)
    )
    for filters, run in zip(chosen, runs, strict=True):
        assert run.code == 0, run
        assert ids_of(run.json()) == api_search(http, filters), filters


BAD = [
    ({"document": "not-an-id"}, "document: not a document id"),
    ({"since": "last tuesday"}, "since: not a date or time"),
    ({"until": "2024-13-01"}, "until: not a date or time"),
    ({"meta": "team"}, "metadata: expected KEY=VALUE"),
    ({"pages": "0"}, "pages: expected N, FIRST-LAST"),
    ({"pages": "9-3"}, "pages: expected N, FIRST-LAST"),
    ({"pages": " 3"}, "pages: expected N, FIRST-LAST"),
    ({"since": "0001-01-01T00:00:00+05:00"}, "since: out of the range of dates"),
    ({"path": "a\x00b"}, "must not contain NUL"),
    ({"meta": "k=\x00"}, "must not contain NUL"),
]


@pytest.mark.parametrize(("filters", "line"), BAD, ids=[b[1][:24] for b in BAD])
def test_a_bad_filter_is_a_400_problem(
    http: httpx.Client, web: httpx.Client, filters: Filters, line: str
) -> None:
    for client, path in ((http, "/v1/search"), (web, "/search")):
        r = client.get(path, params=[("q", "x"), *query_params(filters)])
        assert r.status_code == 400, (path, r.text)
        if path == "/v1/search":
            assert r.headers["content-type"].startswith(PROBLEM)
            assert line in r.json()["detail"], r.json()
        else:  # the web view answers with a page
            assert r.headers["content-type"].startswith("text/html") and line in r.text


def test_the_cli_refuses_a_bad_filter_with_the_same_line(docs: Corpus, http: httpx.Client) -> None:
    run = docs.cli.run("search", "x", "--pages", "9-3")
    assert run.code == 2, run
    detail = http.get("/v1/search", params={"q": "x", "pages": "9-3"}).json()["detail"]
    assert run.err_lines == [f"ragline: {detail}"], run


def test_the_search_page_has_a_filter_form(web: httpx.Client) -> None:
    _, html = page_search(web, {"type": ["text/markdown"], "path": "no", "meta": "team=a",
                                 "pages": "2-3", "section": "x"})  # fmt: skip
    assert "<option selected>text/markdown</option>" in html
    for name, value in (("path", "no"), ("meta", "team=a"), ("pages", "2-3"), ("section", "x")):
        assert f'name="{name}" id="filter-{name}" value="{value}"' in html, name
    # An empty form field is no filter (what a browser sends for a blank input).
    blank: Query = [("q", "lantern"), ("k", K)]
    blank += [(n, "") for n in ("type", "path", "meta", "pages")]
    r = web.get("/search", params=blank)
    assert r.status_code == 200 and r.text.count('<li class="hit">') > 8


def test_the_schema_describes_the_filters(http: httpx.Client) -> None:
    spec = http.get("/v1/schema/openapi.json").json()
    params = {p["name"]: p for p in spec["paths"]["/v1/search"]["get"]["parameters"]}
    assert set(OPTIONS) <= set(params)
    for name in ("document", "type", "meta"):
        kinds = [s.get("type") for s in params[name]["schema"].get("oneOf", [])]
        assert "array" in kinds, params[name]
    assert all(params[name]["description"] for name in OPTIONS)
    assert params["document"]["schema"]["items"]["format"] == "uuid"
    assert params["pages"]["schema"]["pattern"] == "^[0-9]*(-[0-9]*)?$"
    upload = spec["paths"]["/v1/documents"]["post"]
    form = upload["requestBody"]["content"]["multipart/form-data"]["schema"]["properties"]
    assert {"readers", "meta"} <= set(form)
    assert {"readers", "meta"} <= {p["name"] for p in upload["parameters"]}


def test_fixture_paths_are_real(docs: Corpus) -> None:
    """The corpus is what the cases assume (a guard for the oracle's inputs)."""
    assert Path(docs.folder).is_dir()
    assert {d.source_uri for d in docs.docs if d.source} == {
        "sourdough.pdf", "tides.md", "notes/alpha.md", "notes/beta.txt"
    }  # fmt: skip
    assert any(c.section and c.section.startswith("Alpha notes › Ledger") for c in
               docs.by_name["notes/alpha.md"].chunks)  # fmt: skip
