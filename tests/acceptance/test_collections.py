"""Collections through the CLI: two collections on one database and one index; search,
delete, verify and reprocess in one never see the other's documents. Counted in the
vector index itself (verify scans it), over real PostgreSQL, a real data dir and a local
Cohere-compatible server."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from bench.harness.cli import Cli
from bench.harness.db import sql
from bench.harness.procs import REPO
from runtime.cli.common import EXIT_FAILED, EXIT_OK, EXIT_USAGE

SAMPLES = REPO / "samples"


@pytest.fixture
def cli(cohere_cli: Cli) -> Cli:
    return cohere_cli


def ids_by_collection(dsn: str) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for r in sql(dsn, "SELECT id::text, filename, collection, status::text FROM documents"):
        assert r["status"] == "ready", dict(r)
        out.setdefault(r["collection"], {})[r["filename"]] = r["id"]
    return out


def test_two_collections_never_see_each_other(cli: Cli, dsn: str, tmp_path: Path) -> None:
    alpha_dir, beta_dir = tmp_path / "alpha", tmp_path / "beta"
    for folder, names in (
        (alpha_dir, ("lighthouses.pdf", "sourdough.pdf")),
        (beta_dir, ("rust-borrow-checker.pdf", "sourdough.pdf")),
    ):
        folder.mkdir()
        for name in names:
            shutil.copy(SAMPLES / name, folder / name)
    for name, folder in (("alpha", alpha_dir), ("beta", beta_dir)):
        done = cli.run("ingest", str(folder), "--collection", name, "--json")
        assert done.code == EXIT_OK, done
    ids = ids_by_collection(dsn)
    # The same bytes in two collections are two documents.
    assert set(ids) == {"alpha", "beta"}
    assert ids["alpha"]["sourdough.pdf"] != ids["beta"]["sourdough.pdf"]
    alpha, beta = set(ids["alpha"].values()), set(ids["beta"].values())

    s_alpha, s_beta, s_all, v_alpha, v_beta = cli.run_all(
        ("search", "sourdough starter", "-k", "500", "--collection", "alpha", "--json"),
        ("search", "sourdough starter", "-k", "500", "--collection", "beta", "--json"),
        ("search", "sourdough starter", "-k", "500", "--json"),
        ("verify", "--collection", "alpha", "--json"),
        ("verify", "--collection", "beta", "--json"),
    )
    for result in (s_alpha, s_beta, s_all, v_alpha, v_beta):
        assert result.code == EXIT_OK, result
    # Every point of a collection, and nothing else.
    chunks = {
        r["id"]: r["n"]
        for r in sql(dsn, "SELECT document_id::text AS id, count(*) AS n FROM chunks GROUP BY 1")
    }
    for result, own, name in ((s_alpha, alpha, "alpha"), (s_beta, beta, "beta")):
        hits = result.json()
        assert {h["document_id"] for h in hits} == own
        assert {h["collection"] for h in hits} == {name}
        assert len(hits) == sum(chunks[d] for d in own)
    assert {h["document_id"] for h in s_all.json()} == alpha | beta
    assert v_alpha.json()["documents"] == 2 and v_alpha.json()["problems"] == []
    assert v_alpha.json()["points"] == sum(chunks[d] for d in alpha)
    assert v_beta.json()["points"] == sum(chunks[d] for d in beta)

    # delete in alpha cannot reach beta's document, even by id.
    beta_sourdough = ids["beta"]["sourdough.pdf"]
    refused = cli.run("delete", beta_sourdough, "--collection", "alpha", "--json")
    assert refused.code == EXIT_FAILED, refused
    assert refused.json() == {"deleted": [], "missing": [beta_sourdough]}
    alpha_sourdough = ids["alpha"]["sourdough.pdf"]
    deleted = cli.run("delete", alpha_sourdough, "--collection", "alpha", "--json")
    assert deleted.code == EXIT_OK, deleted

    # reprocess --all in beta touches beta only.
    again = cli.run("reprocess", "--from", "index", "--all", "--collection", "beta", "--json")
    assert again.code == EXIT_OK, again
    assert {r["document_id"] for r in again.json()} == beta
    worker = cli.run("--exit-when-idle")
    assert worker.code == EXIT_OK, worker

    s_beta, v_all, v_alpha = cli.run_all(
        ("search", "sourdough starter", "-k", "500", "--collection", "beta", "--json"),
        ("verify", "--json"),
        ("verify", "--collection", "alpha", "--json"),
    )
    assert beta_sourdough in {h["document_id"] for h in s_beta.json()}
    assert len(s_beta.json()) == sum(chunks[d] for d in beta)
    assert v_all.code == EXIT_OK and v_all.json()["problems"] == [], v_all
    assert v_all.json()["documents"] == 3
    assert v_alpha.json()["documents"] == 1
    assert v_alpha.json()["points"] == chunks[ids["alpha"]["lighthouses.pdf"]]
    generations = {
        r["collection"]: r["g"]
        for r in sql(dsn, "SELECT collection, max(generation) AS g FROM documents GROUP BY 1")
    }
    assert generations == {"alpha": 1, "beta": 2}


def test_a_bad_collection_name_is_one_line_and_exit_2(cli: Cli) -> None:
    result = cli.run("submit", str(SAMPLES / "sourdough.pdf"), "--collection", "Bad Name!")
    assert result.code == EXIT_USAGE, result
    assert len(result.err_lines) == 1 and "invalid collection name 'Bad Name!'" in result.err


def test_http_upload_and_search_take_a_collection(cli: Cli, dsn: str) -> None:
    from bench.harness.serve import running_server

    sourdough, light = SAMPLES / "sourdough.pdf", SAMPLES / "lighthouses.pdf"
    with running_server(cli) as server, server.client() as http:
        raw = http.post(
            "/v1/documents",
            params={"collection": "alpha"},
            content=sourdough.read_bytes(),
            headers={"Content-Disposition": 'attachment; filename="sourdough.pdf"'},
        )
        assert raw.status_code == 202, raw.text
        form = http.post(
            "/v1/documents",
            files={"file": (light.name, light.read_bytes(), "application/pdf")},
            data={"collection": "beta"},
        )
        assert form.status_code == 202, form.text
        # The same bytes in another collection: a new document, not the first one.
        same = http.post(
            "/v1/documents",
            files={"file": (sourdough.name, sourdough.read_bytes(), "application/pdf")},
            data={"collection": "beta"},
        )
        assert same.status_code == 202 and same.json()["id"] != raw.json()["id"], same.text
        bad = http.post(
            "/v1/documents", params={"collection": "No/Good"}, content=sourdough.read_bytes()
        )
        assert bad.status_code == 400 and "invalid collection name" in bad.json()["detail"]
        assert cli.run("--exit-when-idle").code == EXIT_OK

        alpha = http.get("/v1/search", params={"q": "lens", "k": 100, "collection": "alpha"})
        beta = http.get("/v1/search", params={"q": "lens", "k": 100, "collection": "beta"})
        assert {h["document_id"] for h in alpha.json()} == {raw.json()["id"]}
        assert {h["document_id"] for h in beta.json()} == {form.json()["id"], same.json()["id"]}
        assert http.get("/v1/search", params={"q": "x", "collection": "A B"}).status_code == 400
    rows = sql(dsn, "SELECT id::text, collection FROM documents ORDER BY collection")
    assert sorted((r["collection"], r["id"]) for r in rows) == sorted(
        [("alpha", raw.json()["id"]), ("beta", form.json()["id"]), ("beta", same.json()["id"])]
    )
