"""``serve`` takes the formats ``submit`` takes (detected from the content), over real HTTP,
and they are ingested by a worker process; what neither reads is refused with 415."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.harness.cli import Cli
from bench.harness.db import Databases, sql
from bench.harness.serve import Server, running_server
from tests.made_formats import make_docx, make_epub, make_markdown, make_png


@pytest.fixture(scope="module")
def cli(databases: Databases, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cli]:
    name = databases.clone()
    tmp = tmp_path_factory.mktemp("serve-formats")
    try:
        yield Cli(databases.dsn(name), tmp / "data", tmp / "logs")
    finally:
        databases.drop(name)


@pytest.fixture(scope="module")
def server(cli: Cli) -> Iterator[Server]:
    with running_server(cli) as s:
        yield s


def test_uploads_of_each_family_are_detected_stored_and_ingested(
    cli: Cli, server: Server, tmp_path: Path
) -> None:
    files = [
        make_docx(tmp_path / "glaciers.docx"),
        make_epub(tmp_path / "volcanoes.epub"),
        make_markdown(tmp_path / "tides.md"),
    ]
    unnamed = make_png(tmp_path / "picture")
    with server.client() as http:
        for path in files:  # multipart, as the web view sends them
            r = http.post("/v1/documents", files={"file": (path.name, path.read_bytes())})
            assert r.status_code == 202, r.text
        # A raw body without a name: the content names it.
        r = http.post("/v1/documents", content=unnamed.read_bytes())
        assert r.status_code == 202, r.text
        refused = http.post(
            "/v1/documents",
            content=b"\x00\x01 no type ragline reads",
            headers={"Content-Disposition": 'attachment; filename="blob.bin"'},
        )
        assert refused.status_code == 415 and "blob.bin: not a type ragline reads" in refused.text
    rows = {r["filename"]: r["media_type"] for r in sql(cli.dsn, "SELECT * FROM documents")}
    assert rows == {
        "glaciers.docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
        "volcanoes.epub": "application/epub+zip",
        "tides.md": "text/markdown",
        "upload.png": "image/png",
    }
    result = cli.run("--exit-when-idle", "--stages", "parse,chunk", timeout_s=110)
    assert result.code == 0, result
    [[ready, parsed]] = sql(
        cli.dsn,
        "SELECT count(*) FILTER (WHERE stage <> 'parse'), count(*) FROM documents",
    )
    assert ready == parsed == 4
    sections = {r[0] for r in sql(cli.dsn, "SELECT section FROM chunks WHERE section IS NOT NULL")}
    assert any("Glaciers" in s for s in sections) and any("Tides" in s for s in sections)
