"""Commands that take document ids take a file name too when it is one document's
(`status`, `retry`, `reprocess`, `delete`, `metadata`); a name that is no document's, or
several documents', is refused in one line that says so, and nothing changes. Real
subprocesses, real PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.harness.cli import Cli
from bench.harness.db import sql
from bench.harness.procs import REPO
from runtime.cli.common import EXIT_OK, EXIT_USAGE

LIGHTHOUSES = REPO / "samples" / "lighthouses.pdf"
SOURDOUGH = REPO / "samples" / "sourdough.pdf"


@pytest.fixture
def cli(dsn: str, tmp_path: Path) -> Cli:
    cli = Cli(dsn, tmp_path / "data", tmp_path / "logs")
    for args in ((LIGHTHOUSES, SOURDOUGH), (LIGHTHOUSES, "--collection", "team")):
        assert cli.run("submit", *map(str, args)).code == EXIT_OK
    return cli


def ids(dsn: str, filename: str) -> dict[str, str]:
    rows = sql(dsn, "SELECT id::text, collection FROM documents WHERE filename = $1", filename)
    return {r["collection"]: r["id"] for r in rows}


def generation(dsn: str, doc: str) -> int:
    return int(sql(dsn, "SELECT generation FROM documents WHERE id = $1::uuid", doc)[0][0])


def test_a_name_of_one_document_stands_for_its_id(cli: Cli, dsn: str) -> None:
    [sourdough] = ids(dsn, "sourdough.pdf").values()
    shown = cli.run("status", "sourdough.pdf", "--json")
    assert shown.code == EXIT_OK and shown.json()["document"]["id"] == sourdough, shown
    # A path names the file it ends in.
    assert cli.run("status", str(SOURDOUGH), "--json").json()["document"]["id"] == sourdough
    changed = cli.run("metadata", "sourdough.pdf", "--set", "year=2024", "--json")
    assert changed.code == EXIT_OK, changed
    assert changed.json()[sourdough]["metadata"] == {"year": "2024"}
    again = cli.run("reprocess", "sourdough.pdf", "--from", "chunk")
    assert again.code == EXIT_OK and generation(dsn, sourdough) == 2, again
    # Within a collection, a name of several collections' documents is that one's.
    team = ids(dsn, "lighthouses.pdf")["team"]
    gone = cli.run("delete", "lighthouses.pdf", "--collection", "team", "--json")
    assert gone.code == EXIT_OK and gone.json()["deleted"] == [team], gone
    assert set(ids(dsn, "lighthouses.pdf")) == {"default"}


@pytest.mark.parametrize(
    "command",
    [
        ("delete", "lighthouses.pdf"),
        ("reprocess", "lighthouses.pdf", "--from", "chunk"),
        ("metadata", "lighthouses.pdf", "--set", "k=v"),
        ("status", "lighthouses.pdf"),
        ("retry", "lighthouses.pdf"),
    ],
    ids=lambda c: c[0],
)
def test_a_name_of_several_documents_is_refused_with_their_ids(
    cli: Cli, dsn: str, command: tuple[str, ...]
) -> None:
    before = sql(dsn, "SELECT id, generation, metadata::text FROM documents ORDER BY id")
    result = cli.run(*command)
    assert result.code == EXIT_USAGE and len(result.err_lines) == 1, result
    both = ids(dsn, "lighthouses.pdf")
    assert "'lighthouses.pdf' names 2 documents: " in result.err, result
    assert f"{both['default']} (default)" in result.err and f"{both['team']} (team)" in result.err
    assert "give the id of the one you mean" in result.err
    assert sql(dsn, "SELECT id, generation, metadata::text FROM documents ORDER BY id") == before


def test_a_name_of_no_document_is_refused(cli: Cli, dsn: str) -> None:
    before = sql(dsn, "SELECT id, generation FROM documents ORDER BY id")
    for command in (("delete", "nope.pdf"), ("metadata", "sourdough.pdf", "--collection", "team")):
        result = cli.run(*command)
        assert result.code == EXIT_USAGE and len(result.err_lines) == 1, result
        assert "no document named '" in result.err and "Traceback" not in result.err, result
    assert "in collection 'team'" in result.err
    assert sql(dsn, "SELECT id, generation FROM documents ORDER BY id") == before
