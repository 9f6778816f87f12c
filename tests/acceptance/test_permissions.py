"""Permissions at every door (issue 34, item 4): a property test draws documents' readers
(none, empty, or some principals, one of which no token holds), their metadata, a token
with some set of principals (or none) and search filters, then asks every door what the
caller sees: ``search --as`` (the CLI, in this process), ``GET /v1/search``, the document
list and each document over the API and the web view, the web view's search page, and
the event stream (``/v1/events`` replayed from the start). Each must show exactly what
the rule allows (:func:`tests.support.search_doors.expected`): never a document the
caller may not read, and none it may read left out. Readers and metadata change in SQL
between examples; nothing is ingested again.

Then the writes a token with principals makes: it acts only on documents it may read
(404 otherwise, as for a missing one), uploads for its principals unless it names
readers, and never learns of a document it may not read through an upload of the same
bytes; live events follow the same rule, and the login cookie carries the token's
principals. ``ragline serve`` and the workers in subprocesses (:mod:`tests.support.search_doors`).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import threading
import uuid
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from bench.harness.db import Databases, sql
from runtime.cli.main import main
from tests.support.search_doors import (
    PRINCIPALS,
    SAMPLES,
    STRANGER,
    Corpus,
    Filters,
    Principals,
    Query,
    cli_args,
    corpus,
    expected,
    ids_of,
    may_read,
    query_params,
    token_for,
)

#: Examples of the property test: each asks every door (~30 requests, one CLI search).
EXAMPLES = 30
#: Every chunk of the corpus comes back (fewer than this many), so answers are exact.
K = "100"
QUERY = "lantern harbour tides"
_FOREIGN = ("DATABASE_URL", "COHERE_API_KEY", "COHERE_BASE_URL", "QDRANT_URL", "MINIO_ENDPOINT")


@pytest.fixture(scope="module")
def docs(databases: Databases, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Corpus]:
    with corpus(databases, tmp_path_factory.mktemp("permissions")) as c:
        yield c


@contextlib.contextmanager
def client(docs: Corpus, principals: Principals, *, web: bool = False) -> Iterator[httpx.Client]:
    """The API's client (bearer header) or the web view's (the login cookie only)."""
    token = token_for(principals)
    auth: dict[str, Any] = (
        {"cookies": {"ragline_token": token}}
        if web
        else {"headers": {"Authorization": f"Bearer {token}"}}
    )
    with docs.server.client(**auth) as c:
        yield c


# -- the doors -------------------------------------------------------------------------


def api_search(http: httpx.Client, filters: Filters, mode: str) -> set[str]:
    params: Query = [("q", QUERY), ("k", K), ("mode", mode), *query_params(filters)]
    r = http.get("/v1/search", params=params)
    assert r.status_code == 200, r.text
    return ids_of(r.json())


def page_search(web: httpx.Client, filters: Filters) -> set[str]:
    r = web.get("/search", params=[("q", QUERY), ("k", K), *query_params(filters)])
    assert r.status_code == 200, r.text
    return set(re.findall(r'<li class="hit"><a href="/documents/([0-9a-f-]{36})"', r.text))


def cli_search(docs: Corpus, principals: Principals, filters: Filters, mode: str) -> set[str]:
    """``search --as`` through the CLI's own entry point (in this process: a subprocess
    per example would spend its seconds importing)."""
    as_args = [a for p in sorted(principals or ()) for a in ("--as", p)]
    args = docs.cli.argv("search", QUERY, "-k", K, "--mode", mode, "--json", *as_args)[3:]
    env: dict[str, str | None] = {k: None for k in os.environ if k.startswith("RAGLINE_")}
    env.update(dict.fromkeys(_FOREIGN), **docs.cli.env)
    result = CliRunner().invoke(main, [*args, *cli_args(filters)], env=env)
    assert result.exit_code == 0, (result.output, result.stderr)
    return ids_of(json.loads(result.stdout))


def api_list(http: httpx.Client) -> set[str]:
    r = http.get("/v1/documents", params={"limit": 500})
    assert r.status_code == 200, r.text
    return {d["id"] for d in r.json()["documents"]}


def page_list(web: httpx.Client) -> set[str]:
    r = web.get("/")
    assert r.status_code == 200, r.text
    return set(re.findall(r'<tr id="doc-([0-9a-f-]{36})"', r.text))


def shown(http: httpx.Client, path: str, doc: str) -> bool:
    """Whether the document's page or resource answers; a hidden one is the 404 of a
    missing one, word for word."""
    r = http.get(path + doc)
    if r.status_code == 200:
        return True
    missing = http.get(path + str(uuid.uuid4()))
    assert r.status_code == missing.status_code == 404, r.text
    assert r.text.replace(doc, "ID") == missing.text.replace(missing.url.path[len(path) :], "ID")
    return False


def streamed(http: httpx.Client, last_id: int = 0, until: int | None = None) -> set[str]:
    """The documents of the events the stream replays after ``last_id`` (up to ``until``):
    read until the first heartbeat, which comes once the replay is sent."""
    seen: set[str] = set()
    with http.stream("GET", "/v1/events", headers={"Last-Event-ID": str(last_id)}) as r:
        assert r.status_code == 200
        event_id = 0
        for line in r.iter_lines():
            if line.startswith(": heartbeat"):
                break
            if line.startswith("id: "):
                event_id = int(line[4:])
            if line.startswith("data: {") and (until is None or event_id <= until):
                seen.add(json.loads(line[6:])["document_id"])
    return seen


def last_event(docs: Corpus) -> int:
    return int(sql(docs.dsn, "SELECT coalesce(max(id), 0) FROM document_events")[0][0])


# -- the property ----------------------------------------------------------------------

_NAMED = st.lists(st.sampled_from((*PRINCIPALS, STRANGER)), min_size=1, max_size=3, unique=True)
#: No readers (everyone), empty readers (tokens without principals only), or some names,
#: ``stranger`` among them, whom no token holds (one time in two).
READERS = st.one_of(_NAMED, st.none(), st.just(()), _NAMED)  # not the simplest first
_SOME = st.frozensets(st.sampled_from(PRINCIPALS), min_size=1)
#: A token without principals one time in three; else one with some.
CALLERS = st.one_of(_SOME, st.none(), _SOME)
TEAMS = st.sampled_from((None, "a", "b"))


def filters_of(docs: Corpus) -> st.SearchStrategy[dict[str, Any]]:
    ids = [d.id for d in docs.docs]
    today = datetime.now(UTC).date().isoformat()
    dates = st.sampled_from(
        ["2020-01-01", "2021-06-01", "2021-06-01T00:00:01", today, "2100-01-01"]
    )
    types = sorted({d.media_type for d in docs.docs} | {"image/png"})
    return st.fixed_dictionaries(
        {},
        optional={
            "document": st.lists(st.sampled_from(ids), min_size=1, max_size=3, unique=True),
            "source": st.sampled_from([docs.folder, "/nowhere"]),
            "path": st.sampled_from(["notes/", "t", "sourdough", "zzz"]),
            "type": st.lists(st.sampled_from(types), min_size=1, max_size=2, unique=True),
            "since": dates,
            "until": dates,
            "meta": st.lists(
                st.sampled_from(["team=a", "team=b", "other=x"]), min_size=1, max_size=2
            ),
            "pages": st.sampled_from(["1", "2", "3-", "-1", "2-3", "4-9"]),
            "section": st.sampled_from(["tides", "ALPHA NOTES › L", "gamma", "line", "zzz"]),
        },
    )


class Tally:
    """What the property test saw, over all examples (printed with ``-s``)."""

    examples = 0
    #: Documents the rule hid from the example's caller, summed.
    hidden = 0
    answers = 0
    unauthorized = 0


def check_doors(
    docs: Corpus,
    principals: Principals,
    filters: Filters,
    mode: str,
    readers: Mapping[str, Sequence[str] | None],
    metadata: Mapping[str, Mapping[str, str]],
    until: int,
) -> None:
    want = expected(docs, principals, filters, readers, metadata)
    readable = {d.id for d in docs.docs if may_read(principals, readers[d.id])}
    Tally.hidden += len(docs.docs) - len(readable)
    with client(docs, principals) as http, client(docs, principals, web=True) as web:
        found = {
            "api search": api_search(http, filters, mode),
            "web search": page_search(web, filters),
            "cli search --as": cli_search(docs, principals, filters, mode),
        }
        listed = {
            "api list": api_list(http),
            "web list": page_list(web),
            "api document": {d.id for d in docs.docs if shown(http, "/v1/documents/", d.id)},
            "web document": {d.id for d in docs.docs if shown(web, "/documents/", d.id)},
            "events": streamed(http, until=until),
        }
    for ids in [*found.values(), *listed.values()]:
        Tally.answers += len(ids)
        Tally.unauthorized += len(ids - readable)
    for door, ids in found.items():
        assert ids == want, (door, principals, filters)
    for door, ids in listed.items():
        assert ids == readable, (door, principals)


def test_every_door_shows_a_caller_only_what_it_may_read(docs: Corpus) -> None:
    until = last_event(docs)  # the corpus's own events (later tests add others)

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        # No shrinking: each example asks a live server ~30 times; the failing one's
        # draws are printed as they were.
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(data=st.data())
    def run(data: st.DataObject) -> None:
        readers = {d.id: data.draw(READERS, label=f"readers {d.filename}") for d in docs.docs}
        teams = {d.id: data.draw(TEAMS, label=f"team {d.filename}") for d in docs.docs}
        metadata = {d: {"team": t} for d, t in teams.items() if t is not None}
        docs.set_about(readers, metadata)
        principals = data.draw(CALLERS, label="caller")
        filters = data.draw(filters_of(docs), label="filters")
        mode = data.draw(st.sampled_from(["dense", "hybrid"]), label="mode")
        check_doors(docs, principals, filters, mode, readers, metadata, until)
        Tally.examples += 1

    run()
    print(f"\n{Tally.examples} examples, {Tally.hidden} documents hidden by the rule, "
          f"{Tally.answers} shown by the doors, {Tally.unauthorized} unauthorized")  # fmt: skip
    assert Tally.unauthorized == 0
    assert Tally.hidden > 0  # the examples did hide documents from their callers


# -- writes, uploads, live events, the login cookie --------------------------------------

ALICE = frozenset({"alice"})


def hide(docs: Corpus, *names: str) -> dict[str, str]:
    """Every document readable by everyone but ``names``, which only ``stranger`` reads."""
    hidden = {docs.by_name[n].id for n in names}
    docs.set_about({d.id: [STRANGER] if d.id in hidden else None for d in docs.docs}, {})
    return {n: docs.by_name[n].id for n in names}


def generation(docs: Corpus, doc: str) -> int:
    return int(
        sql(docs.dsn, "SELECT generation FROM documents WHERE id = $1", uuid.UUID(doc))[0][0]
    )


def about(docs: Corpus, doc: str) -> tuple[list[str] | None, dict[str, Any], bool]:
    [row] = sql(
        docs.dsn,
        "SELECT readers, metadata::text AS metadata, forced FROM documents WHERE id = $1",
        uuid.UUID(doc),
    )
    return row["readers"], json.loads(row["metadata"]), row["forced"]


def test_a_token_with_principals_acts_only_on_what_it_may_read(docs: Corpus) -> None:
    secret = hide(docs, "lighthouses.pdf")["lighthouses.pdf"]
    visible = docs.by_name["delta.txt"].id
    with client(docs, ALICE) as http:
        for method, path in (("DELETE", ""), ("POST", "/retry")):
            r = http.request(method, f"/v1/documents/{secret}{path}")
            assert r.status_code == 404 and r.json()["detail"] == f"no document {secret}"
        before = generation(docs, secret)
        r = http.post("/v1/reprocess", json={"from": "index", "ids": [secret]})
        assert r.status_code == 202 and r.json() == {"reprocessing": [], "missing": [secret]}
        r = http.post("/v1/reprocess", json={"from": "nowhere", "ids": [secret]})
        assert r.status_code == 400, r.text
        for body in ({"from": "index", "all": True}, {"from": "index", "model": "m"}):
            r = http.post("/v1/reprocess", json=body)
            assert r.status_code == 403 and "by id only" in r.json()["detail"], r.text
        # A document it may read: retry answers (nothing failed), as for any caller.
        assert http.post(f"/v1/documents/{visible}/retry").status_code == 409
    assert generation(docs, secret) == before
    assert sql(docs.dsn, "SELECT 1 FROM documents WHERE id = $1", uuid.UUID(secret))


def upload(
    http: httpx.Client, name: str, *, params: Any = None, fields: Any = None
) -> httpx.Response:
    files = {"file": (name, (SAMPLES / name).read_bytes(), "application/octet-stream")}
    return http.post("/v1/documents", params=params, files=files, data=fields or {})


def test_uploads_say_who_reads_them(docs: Corpus) -> None:
    secret = hide(docs, "lighthouses.pdf")["lighthouses.pdf"]
    made: list[str] = []
    try:
        with client(docs, ALICE) as alice, client(docs, None) as operator:
            # Bytes held only by a document alice may not read: a copy of her own.
            first = upload(alice, "lighthouses.pdf", fields={"meta": ["team=x", "n=1"]})
            assert first.status_code == 202, first.text
            copy = first.json()["id"]
            made.append(copy)
            assert copy != secret and about(docs, copy) == (
                ["alice"],
                {"team": "x", "n": "1"},
                True,
            )
            again = upload(alice, "lighthouses.pdf")
            assert again.status_code == 200 and again.json()["id"] == copy
            assert about(docs, secret) == ([STRANGER], {}, False)  # untouched
            # The operator's upload of the same bytes finds the original, as before.
            assert upload(operator, "lighthouses.pdf").json()["id"] == secret

            # Bytes of a document she may read: that document, unchanged.
            named = upload(alice, "sourdough.pdf", params={"readers": "bob, team-docs"})
            assert named.status_code == 200, named.text
            assert named.json()["id"] == docs.by_name["sourdough.pdf"].id
            assert about(docs, named.json()["id"])[0] is None
            # Readers named (query or form), `*` for everyone.
            tides = (SAMPLES / "tides.md").read_bytes() + b"\n\nAn upload of alice's.\n"
            r = alice.post(
                "/v1/documents",
                params={"readers": "*", "meta": "k=v"},
                content=tides,
                headers={"Content-Disposition": 'attachment; filename="mine.md"'},
            )
            assert r.status_code == 202, r.text
            made.append(r.json()["id"])
            assert about(docs, r.json()["id"]) == (None, {"k": "v"}, False)
            r = operator.post(
                "/v1/documents",
                files={"file": ("t.md", tides + b"2", "text/markdown")},
                data={"readers": "bob,team-docs", "meta": ["a=1", "b=2"]},
            )
            assert r.status_code == 202, r.text
            made.append(r.json()["id"])
            assert about(docs, r.json()["id"]) == (
                ["bob", "team-docs"],
                {"a": "1", "b": "2"},
                False,
            )

            for params, fields, line in (
                ({"readers": "a b"}, {}, "not a principal name"),
                ({"meta": "novalue"}, {}, "expected KEY=VALUE"),
                ({"readers": "bob"}, {"readers": "alice"}, "disagree"),
                ({"meta": "k=1"}, {"meta": "k=2"}, "disagree"),
                ({}, {"readers": ["a", "b"]}, "more than one 'readers'"),
            ):
                r = upload(operator, "tides.md", params=params, fields=fields)
                assert r.status_code == 400 and line in r.json()["detail"], (params, r.text)
    finally:
        with client(docs, None) as operator:
            for doc in made:
                assert operator.delete(f"/v1/documents/{doc}").status_code == 204


class Listener:
    """An event stream read in a thread, as a browser keeps one open."""

    def __init__(self, http: httpx.Client) -> None:
        self.http = http
        self.events: list[dict[str, Any]] = []
        self.open = threading.Event()
        self.changed = threading.Condition()
        self.done = False
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()
        assert self.open.wait(30), "the stream did not open"

    def _read(self) -> None:
        with self.http.stream("GET", "/v1/events") as r:
            for line in r.iter_lines():
                self.open.set()
                if line.startswith("data: {"):
                    with self.changed:
                        self.events.append(json.loads(line[6:]))
                        self.changed.notify_all()
                if self.done:
                    return

    def wait_for(self, doc: str, status: str) -> None:
        with self.changed:
            found = self.changed.wait_for(
                lambda: any(e["document_id"] == doc and e["status"] == status for e in self.events),
                timeout=30,
            )
        assert found, (doc, status, self.events)

    def close(self) -> None:
        self.done = True  # the next heartbeat (0.2 s) ends the read
        self.thread.join(10)


def test_live_events_follow_the_rule(docs: Corpus) -> None:
    """Alice's open stream carries the events of a document she may read, not those of
    one she may not, nor its deletion."""
    hide(docs)
    body = (SAMPLES / "tides.md").read_bytes()
    with client(docs, None) as operator, client(docs, ALICE) as alice:
        listener = Listener(alice)
        try:
            theirs = operator.post("/v1/documents", params={"readers": "bob"},
                                   content=body + b"\n\nlive 1\n").json()["id"]  # fmt: skip
            mine = operator.post("/v1/documents", params={"readers": "alice"},
                                 content=body + b"\n\nlive 2\n").json()["id"]  # fmt: skip
            listener.wait_for(mine, "pending")  # after theirs: checked while it existed
            for doc in (theirs, mine):
                assert operator.delete(f"/v1/documents/{doc}").status_code == 204
            listener.wait_for(mine, "deleted")  # after theirs' deletion, in order
        finally:
            listener.close()
    assert {e["document_id"] for e in listener.events} == {mine}, listener.events


def test_the_login_cookie_carries_the_tokens_principals(docs: Corpus) -> None:
    ids = hide(docs, "tides.md", "gamma.md")
    with docs.server.client() as browser:
        r = browser.post("/login", data={"token": token_for(ALICE), "next": "/"})
        assert r.status_code == 303, r.text
        cookie = browser.cookies.get("ragline_token")
        assert cookie == token_for(ALICE)
        listed = page_list(browser)
        assert listed == {d.id for d in docs.docs} - set(ids.values())
        for doc in ids.values():
            assert browser.get(f"/documents/{doc}").status_code == 404
            assert browser.get(f"/v1/documents/{doc}").status_code == 404


def test_the_cli_searches_as_a_principal_in_its_own_process(docs: Corpus) -> None:
    """``search --as`` as a user runs it: a subprocess."""
    ids = hide(docs, "tides.md")
    run = docs.cli.run("search", QUERY, "-k", K, "--mode", "dense", "--as", "alice", "--json")
    assert run.code == 0, run
    assert ids_of(run.json()) == {d.id for d in docs.docs} - {ids["tides.md"]}
    run = docs.cli.run("search", QUERY, "-k", K, "--as", STRANGER, "--type", "text/markdown",
                       "--json")  # fmt: skip
    assert run.code == 0 and ids_of(run.json()) >= {ids["tides.md"]}, run
