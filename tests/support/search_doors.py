"""A small corpus behind every door of search (issue 34: filters and permissions).

Eight documents: four synced from a folder (whole-second modification times from 2019 to
2022, two of them in a sub-folder ``notes/``) and four ingested (dated when submitted);
PDFs, Markdown and plain text; 5 to 20 chunks each. Embedded by the fake Cohere server,
served by ``ragline serve`` with one token per set of principals (:func:`token_for`).

:func:`expected` is the oracle: which documents a caller with some principals, searching
with some filters, must see, computed here in Python from the rows (each filter as the
README words it), not by the code under test.
"""

from __future__ import annotations

import itertools
import os
import shutil
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec

from bench.harness.cli import Cli
from bench.harness.db import Databases, execute, sql
from bench.harness.procs import REPO
from bench.harness.serve import Server, running_server
from tests.support.pipeline_env import FAKE_DIMS, TimedCohere, cohere_env

SAMPLES = REPO / "samples"
#: The principals tokens hold; documents' readers also name ``stranger``, whom no token has.
PRINCIPALS = ("alice", "bob", "team-docs", "ops@corp.example")
STRANGER = "stranger"
#: Synced files' modification times (whole seconds, UTC).
DATES = {
    "sourdough.pdf": datetime(2019, 6, 1, tzinfo=UTC),
    "tides.md": datetime(2020, 6, 1, tzinfo=UTC),
    "notes/alpha.md": datetime(2021, 6, 1, tzinfo=UTC),
    "notes/beta.txt": datetime(2022, 6, 1, tzinfo=UTC),
}
#: Words every document holds (so keyword search finds each).
COMMON = "lantern harbour ledger"
#: Filter parameters: the HTTP API's name → the CLI's option.
OPTIONS = {
    "document": "--document",
    "source": "--source",
    "path": "--path",
    "type": "--type",
    "since": "--since",
    "until": "--until",
    "meta": "--meta",
    "pages": "--pages",
    "section": "--section",
}

Filters = Mapping[str, str | Sequence[str]]
Principals = frozenset[str] | None
#: A query string's pairs, as httpx takes them.
Query = list[tuple[str, Any]]


class Chunk(msgspec.Struct, frozen=True):
    page_start: int
    page_end: int
    section: str | None


class Doc(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    filename: str
    #: Its path in its sync source; None for an ingested one.
    source_uri: str | None
    #: Its sync source's URI; None for an ingested one.
    source: str | None
    media_type: str
    date: datetime
    chunks: tuple[Chunk, ...]


class Corpus:
    def __init__(self, cli: Cli, server: Server, docs: list[Doc], folder: Path) -> None:
        self.cli = cli
        self.dsn = cli.dsn
        self.server = server
        self.docs = docs
        #: The synced folder's URI (its resolved path).
        self.folder = str(folder.resolve())
        self.by_name = {d.filename: d for d in docs}

    def set_about(
        self, readers: Mapping[str, Sequence[str] | None], metadata: Mapping[str, Mapping[str, str]]
    ) -> None:
        """Documents' readers and metadata, straight in SQL (no index write, no embed)."""
        statements = []
        for doc in self.docs:
            who = readers.get(doc.id)
            array = (
                "NULL" if who is None else "ARRAY[" + ",".join(_lit(w) for w in who) + "]::text[]"
            )
            meta = _lit(msgspec.json.encode(dict(metadata.get(doc.id, {}))).decode())
            statements.append(
                f"UPDATE documents SET readers = {array}, metadata = {meta}::jsonb "
                f"WHERE id = '{doc.id}'"
            )
        execute(self.dsn, *statements)


def _lit(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def token_for(principals: Principals) -> str:
    """The token of a caller with these principals (``open``: none, may read all)."""
    if principals is None:
        return "tok-open"
    bits = sum(1 << PRINCIPALS.index(p) for p in principals)
    return f"tok-{bits:02d}"


def tokens_setting() -> str:
    """RAGLINE_API_TOKENS: the open token and one per non-empty set of principals."""
    entries = [token_for(None)]
    for size in range(1, len(PRINCIPALS) + 1):
        for chosen in itertools.combinations(PRINCIPALS, size):
            entries.append(f"{token_for(frozenset(chosen))}:{'+'.join(chosen)}")
    return ",".join(entries)


def may_read(principals: Principals, readers: Sequence[str] | None) -> bool:
    """The README's rule: no readers, everyone; else a caller holding one of them; a
    caller without principals (the open token, the operator) reads everything."""
    return principals is None or readers is None or bool(set(readers) & principals)


def expected(
    corpus: Corpus,
    principals: Principals,
    filters: Filters,
    readers: Mapping[str, Sequence[str] | None],
    metadata: Mapping[str, Mapping[str, str]],
) -> set[str]:
    """The documents a search as ``principals`` with ``filters`` answers from (every
    chunk of every allowed document is found: the corpus holds fewer than ``k``)."""
    return {
        d.id
        for d in corpus.docs
        if may_read(principals, readers.get(d.id))
        and _document_passes(corpus, d, filters, metadata.get(d.id, {}))
        and any(_chunk_passes(c, filters) for c in d.chunks)
    }


def _many(filters: Filters, name: str) -> list[str]:
    value = filters.get(name)
    return [] if value is None else [value] if isinstance(value, str) else list(value)


def _one(filters: Filters, name: str) -> str | None:
    value = filters.get(name)
    assert value is None or isinstance(value, str)
    return value


def _when(text: str) -> datetime:
    when = datetime.fromisoformat(text)
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def _document_passes(corpus: Corpus, d: Doc, filters: Filters, metadata: Mapping[str, str]) -> bool:
    ids, types, pairs = _many(filters, "document"), _many(filters, "type"), _many(filters, "meta")
    source, path = _one(filters, "source"), _one(filters, "path")
    since, until = _one(filters, "since"), _one(filters, "until")
    return (
        (not ids or d.id in ids)
        and (source is None or d.source == source)
        and (path is None or (d.source_uri or d.filename).startswith(path))
        and (not types or d.media_type in types)
        and (since is None or d.date >= _when(since))
        and (until is None or d.date < _when(until))
        and all(metadata.get(k) == v for k, _, v in (p.partition("=") for p in pairs))
    )


def _chunk_passes(c: Chunk, filters: Filters) -> bool:
    pages, section = _one(filters, "pages"), _one(filters, "section")
    if pages is not None:
        first, dash, last = pages.partition("-")
        lo = int(first) if first else None
        hi = (int(last) if last else None) if dash else lo
        if (lo is not None and c.page_end < lo) or (hi is not None and c.page_start > hi):
            return False
    if section is not None:
        return c.section is not None and c.section.lower().startswith(section.lower())
    return True


def query_params(filters: Filters) -> Query:
    """The filters as a query string's pairs (repeated names for lists)."""
    return [(name, value) for name in filters for value in _many(filters, name)]


def cli_args(filters: Filters) -> list[str]:
    """The filters as ``search``'s options."""
    return [arg for name, value in query_params(filters) for arg in (OPTIONS[name], value)]


def _write_corpus(folder: Path, other: Path) -> None:
    shutil.copy(SAMPLES / "sourdough.pdf", folder / "sourdough.pdf")
    shutil.copy(SAMPLES / "tides.md", folder / "tides.md")
    (folder / "notes").mkdir()
    (folder / "notes" / "alpha.md").write_text(
        "# Alpha notes\n\n## Harbour\n\n"
        + f"The {COMMON} of alpha. " * 40
        + "\n\n## Ledger\n\n"
        + f"More {COMMON} for alpha. " * 40
        + "\n"
    )
    (folder / "notes" / "beta.txt").write_text(f"Beta: {COMMON}, plain text. " * 60 + "\n")
    for name, when in DATES.items():
        os.utime(folder / name, (when.timestamp(), when.timestamp()))
    shutil.copy(SAMPLES / "lighthouses.pdf", other / "lighthouses.pdf")
    shutil.copy(SAMPLES / "rust-borrow-checker.pdf", other / "rust-borrow-checker.pdf")
    (other / "gamma.md").write_text(
        "# Gamma\n\n"
        + f"Gamma {COMMON} one. " * 30
        + "\n\n## Tides of gamma\n\n"
        + f"Gamma {COMMON} two. " * 30
        + "\n"
    )
    (other / "delta.txt").write_text(f"Delta {COMMON} words. " * 50 + "\n")


def _documents(dsn: str) -> list[Doc]:
    rows = sql(
        dsn,
        "SELECT d.id::text AS id, d.filename, d.source_uri, s.uri AS source, d.media_type,"
        " d.source_mtime_ns, d.created_at, d.status::text AS status,"
        " coalesce(json_agg(json_build_array(c.page_start, c.page_end, c.section)"
        "   ORDER BY c.ordinal) FILTER (WHERE c.ordinal IS NOT NULL), '[]')::text AS chunks"
        " FROM documents d LEFT JOIN sources s ON s.id = d.source_id"
        " LEFT JOIN chunks c ON c.document_id = d.id AND c.generation = d.generation"
        " GROUP BY d.id, s.uri ORDER BY d.filename",
    )
    docs = []
    for r in rows:
        assert r["status"] == "ready", dict(r)
        ns = r["source_mtime_ns"]
        chunks = tuple(Chunk(*c) for c in msgspec.json.decode(r["chunks"]))
        assert chunks, dict(r)
        docs.append(
            Doc(
                id=r["id"],
                filename=r["filename"],
                source_uri=r["source_uri"],
                source=r["source"],
                media_type=r["media_type"],
                date=datetime.fromtimestamp(ns / 1e9, UTC) if ns else r["created_at"],
                chunks=chunks,
            )
        )
    return docs


@contextmanager
def corpus(databases: Databases, tmp: Path) -> Iterator[Corpus]:
    """The corpus, ingested, with ``serve`` running (tokens of :func:`tokens_setting`)."""
    folder, other = tmp / "synced", tmp / "ingested"
    folder.mkdir()
    other.mkdir()
    _write_corpus(folder, other)
    with TimedCohere(dims=FAKE_DIMS) as fake, databases.fresh() as dsn:
        cli = Cli(dsn, tmp / "data", tmp / "logs", **cohere_env(fake))
        env = {"RAGLINE_API_TOKENS": tokens_setting()}
        # The server first: document events are kept only while a server listens.
        with running_server(cli, "--sse-heartbeat", "0.2", **env) as server:
            for args in (("sync", str(folder)), ("ingest", str(other))):
                done = cli.run(*args, "--json")
                assert done.code == 0, done
            docs = _documents(dsn)
            assert len(docs) == 8, [d.filename for d in docs]
            yield Corpus(cli, server, docs, folder)


def ids_of(hits: list[dict[str, Any]]) -> set[str]:
    return {str(h["document_id"]) for h in hits}


def new_id() -> str:
    return str(uuid.uuid4())
