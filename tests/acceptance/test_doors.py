"""Every door does the same thing: reprocess and delete through the CLI, the HTTP API and
sync (one implementation each, ``stages/actions/documents.py``) touch the same documents
and leave the same state. Real PostgreSQL, ``python -m runtime`` and ``serve`` in
subprocesses, a local Cohere-compatible server for the embedder."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from bench.harness.cli import Cli
from bench.harness.db import sql
from bench.harness.procs import REPO
from bench.harness.serve import running_server
from runtime.cli.common import EXIT_FAILED, EXIT_OK

SAMPLES = REPO / "samples"
PDFS = ("lighthouses.pdf", "sourdough.pdf")


@pytest.fixture
def cli(cohere_cli: Cli) -> Cli:
    return cohere_cli


def folder_of(tmp_path: Path, name: str, files: tuple[str, ...]) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    for file in files:
        shutil.copy(SAMPLES / file, folder / file)
    return folder


def ids_of(dsn: str, collection: str) -> set[str]:
    rows = sql(dsn, "SELECT id::text FROM documents WHERE collection = $1", collection)
    return {r["id"] for r in rows}


def generations(dsn: str) -> dict[str, int]:
    return {
        r["id"]: r["generation"] for r in sql(dsn, "SELECT id::text, generation FROM documents")
    }


def bumped(before: dict[str, int], after: dict[str, int]) -> set[str]:
    return {doc for doc, generation in after.items() if generation != before.get(doc)}


def test_reprocess_of_a_collection_touches_the_same_documents_through_every_door(
    cli: Cli, dsn: str, tmp_path: Path
) -> None:
    for name in ("alpha", "beta"):
        done = cli.run("submit", str(folder_of(tmp_path, name, PDFS)), "--collection", name)
        assert done.code == EXIT_OK, done
    alpha, beta = ids_of(dsn, "alpha"), ids_of(dsn, "beta")
    assert len(alpha) == len(beta) == 2

    before = generations(dsn)
    by_cli = cli.run("reprocess", "--from", "chunk", "--all", "--collection", "alpha", "--json")
    assert by_cli.code == EXIT_OK, by_cli
    after_cli = generations(dsn)
    with running_server(cli) as server, server.client() as http:
        body = {"from": "chunk", "all": True, "collection": "alpha"}
        by_http = http.post("/v1/reprocess", json=body)
        assert by_http.status_code == 202, by_http.text
        # A document of another collection, named by id, is missing through both doors.
        stray = sorted(beta)[0]
        one = {"from": "chunk", "ids": [stray], "collection": "alpha"}
        http_stray = http.post("/v1/reprocess", json=one)
    after_http = generations(dsn)

    assert bumped(before, after_cli) == bumped(after_cli, after_http) == alpha
    assert {r["document_id"] for r in by_cli.json()} == alpha
    assert {r["document_id"] for r in by_http.json()["reprocessing"]} == alpha
    assert http_stray.json() == {"reprocessing": [], "missing": [stray]}
    cli_stray = cli.run("reprocess", "--from", "chunk", stray, "--collection", "alpha")
    assert cli_stray.code == EXIT_FAILED and f"no document {stray}" in cli_stray.err
    assert generations(dsn) == after_http  # neither door touched it


def stored_objects(cli: Cli, doc: str) -> list[Path]:
    return sorted((cli.data_dir / "assets" / "documents" / doc).rglob("*"))


def test_delete_leaves_the_same_state_through_every_door(
    cli: Cli, dsn: str, tmp_path: Path
) -> None:
    """A document deleted by the CLI, by the HTTP API or by sync (its file gone from the
    folder): no row, no job, no stored object and no point is left of it; the other is
    intact, and verify finds the index equal to PostgreSQL."""
    kept = folder_of(tmp_path, "kept", (*PDFS, "tides.md"))
    ingested = cli.run("ingest", str(kept), "--json")
    assert ingested.code == EXIT_OK, ingested
    source = folder_of(tmp_path, "source", ("rust-borrow-checker.pdf",))
    synced = cli.run("sync", str(source), "--json", "--no-progress")
    assert synced.code == EXIT_OK, synced
    drained = cli.run("--exit-when-idle")
    assert drained.code == EXIT_OK, drained
    rows = sql(dsn, "SELECT id::text, filename, status::text AS status FROM documents")
    assert {r["status"] for r in rows} == {"ready"}, rows
    by_name = {r["filename"]: r["id"] for r in rows}
    gone = {
        "cli": by_name["lighthouses.pdf"],
        "http": by_name["sourdough.pdf"],
        "sync": by_name["rust-borrow-checker.pdf"],
    }
    for doc in gone.values():
        assert stored_objects(cli, doc)

    deleted = cli.run("delete", gone["cli"], "--json")
    assert deleted.code == EXIT_OK and deleted.json()["deleted"] == [gone["cli"]], deleted
    with running_server(cli) as server, server.client() as http:
        assert http.delete(f"/v1/documents/{gone['http']}").status_code == 204
        assert http.delete(f"/v1/documents/{gone['http']}").status_code == 404
    (source / "rust-borrow-checker.pdf").unlink()
    # The source's only file: deleting every document of a source takes --allow-deletes.
    resynced = cli.run("sync", str(source), "--json", "--no-progress", "--allow-deletes")
    assert resynced.code == EXIT_OK, resynced

    for door, doc in gone.items():
        assert not sql(dsn, "SELECT 1 FROM documents WHERE id = $1::uuid", doc), door
        assert not sql(dsn, "SELECT 1 FROM stage_jobs WHERE document_id = $1::uuid", doc), door
        assert stored_objects(cli, doc) == [], door
    verified = cli.run("verify", "--json")
    assert verified.code == EXIT_OK, verified
    report = verified.json()
    assert report["documents"] == 1 and report["problems"] == [], report
    assert [r["filename"] for r in sql(dsn, "SELECT filename FROM documents")] == ["tides.md"]
