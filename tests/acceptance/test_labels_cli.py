"""Metadata and readers through the CLI: given at `ingest`/`submit` to new documents, in
the transaction that creates them; changed with `metadata`; filtered on by `search
--meta`, trimmed by `search --as`; bad ones refused in one line before anything goes in.
Real subprocesses, real PostgreSQL, a local Cohere-compatible server."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from bench.harness.cli import Cli
from bench.harness.db import sql
from bench.harness.procs import REPO
from runtime.cli.common import EXIT_OK, EXIT_USAGE

SAMPLES = REPO / "samples"


@pytest.fixture
def cli(cohere_cli: Cli) -> Cli:
    return cohere_cli


def files(search: list[dict[str, object]]) -> set[str]:
    return {str(h["filename"]) for h in search}


def test_labels_from_ingest_to_search(cli: Cli, dsn: str, tmp_path: Path) -> None:
    team, public = tmp_path / "team", tmp_path / "public"
    team.mkdir()
    public.mkdir()
    shutil.copy(SAMPLES / "sourdough.pdf", team / "sourdough.pdf")
    shutil.copy(SAMPLES / "lighthouses.pdf", public / "lighthouses.pdf")
    done = cli.run("ingest", str(team), "--meta", "team=bakery", "--readers", "bakers,chefs")
    assert done.code == EXIT_OK, done
    assert cli.run("ingest", str(public), "--meta", "team=sea").code == EXIT_OK
    rows = {
        r["filename"]: r
        for r in sql(dsn, "SELECT filename, metadata::text, readers FROM documents")
    }
    assert rows["sourdough.pdf"]["metadata"] == '{"team": "bakery"}'
    assert rows["sourdough.pdf"]["readers"] == ["bakers", "chefs"]
    assert rows["lighthouses.pdf"]["readers"] is None

    def search(*args: str) -> set[str]:
        result = cli.run("search", "the", "-k", "50", "--mode", "keyword", "--json", *args)
        assert result.code == EXIT_OK, result
        return files(result.json())

    assert search() == {"sourdough.pdf", "lighthouses.pdf"}
    assert search("--meta", "team=bakery") == {"sourdough.pdf"}
    assert search("--as", "sailors") == {"lighthouses.pdf"}
    assert search("--as", "chefs") == {"sourdough.pdf", "lighthouses.pdf"}
    # Nothing within the filters says so, not that nothing is indexed.
    none = cli.run("search", "the", "--meta", "team=nobody")
    assert none.code == EXIT_OK and "no chunk matches the query within filters" in none.err, none

    # Changed later: no stage runs, the next search sees it.
    doc = str(sql(dsn, "SELECT id::text FROM documents WHERE filename = 'sourdough.pdf'")[0]["id"])
    jobs = sql(dsn, "SELECT count(*) AS n FROM stage_jobs")[0]["n"]
    # A name that is no document's is refused in one line that names it, nothing changed.
    named = cli.run("metadata", "sourdough.txt", "--set", "year=2024")
    assert named.code == EXIT_USAGE and "no document named 'sourdough.txt'" in named.err, named
    # The document's own name stands for its id.
    shown = cli.run("metadata", "sourdough.pdf", "--set", "year=2024", "--everyone", "--json")
    assert shown.code == EXIT_OK, shown
    assert shown.json()[doc] == {"metadata": {"team": "bakery", "year": "2024"}, "readers": None}
    assert search("--as", "sailors") == {"sourdough.pdf", "lighthouses.pdf"}
    assert sql(dsn, "SELECT count(*) AS n FROM stage_jobs")[0]["n"] == jobs


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--meta", "novalue"), "metadata: expected KEY=VALUE"),
        (("--readers", "a b"), "readers: not a principal name"),
    ],
)
def test_bad_labels_are_one_line_and_nothing_goes_in(
    cli: Cli, dsn: str, args: tuple[str, ...], message: str
) -> None:
    result = cli.run("submit", str(SAMPLES / "tides.md"), *args)
    assert result.code == EXIT_USAGE and message in result.err, result
    assert len(result.err_lines) == 1
    assert sql(dsn, "SELECT count(*) AS n FROM documents")[0]["n"] == 0


def test_a_source_gives_its_documents_labels(cli: Cli, dsn: str, tmp_path: Path) -> None:
    """`sync --meta/--readers`: new files' documents take them as they are inserted; a
    later sync told other ones sets them on every document of the source, and one told
    nothing leaves them (new files get the source's)."""
    folder = tmp_path / "src"
    folder.mkdir()
    shutil.copy(SAMPLES / "tides.md", folder / "tides.md")

    def labels() -> dict[str, tuple[str, object]]:
        rows = sql(dsn, "SELECT filename, metadata::text, readers FROM documents")
        return {r["filename"]: (r["metadata"], r["readers"]) for r in rows}

    first = cli.run("sync", str(folder), "--meta", "team=sea", "--readers", "sailors")
    assert first.code == EXIT_OK, first
    assert labels() == {"tides.md": ('{"team": "sea"}', ["sailors"])}

    shutil.copy(SAMPLES / "lighthouses.pdf", folder / "lighthouses.pdf")
    assert cli.run("sync", str(folder)).code == EXIT_OK
    assert labels()["lighthouses.pdf"] == ('{"team": "sea"}', ["sailors"])

    jobs = sql(dsn, "SELECT count(*) AS n FROM stage_jobs")[0]["n"]
    assert cli.run("sync", str(folder), "--everyone").code == EXIT_OK
    assert labels() == {
        "tides.md": ('{"team": "sea"}', None),
        "lighthouses.pdf": ('{"team": "sea"}', None),
    }
    assert sql(dsn, "SELECT count(*) AS n FROM stage_jobs")[0]["n"] == jobs  # no stage ran
