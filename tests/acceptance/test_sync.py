"""``ragline sync`` as a user runs it: real files on disk and a real S3 server (moto), the
real pipeline with a Cohere-compatible embedder over real HTTP, checked in the index
itself: per document, points equal chunks and carry its current generation; no point of
a deleted document or of a superseded version; a rename runs no stage and costs 0 embed
calls; two syncs at once double nothing; a sync SIGKILLed midway and run again converges.
"""

from __future__ import annotations

import asyncio
import io
import os
import signal
from pathlib import Path
from typing import Any

import asyncpg
import msgspec
import pytest
from minio import Minio

from bench.harness.cli import Cli, Result
from bench.harness.db import sql
from bench.harness.fake_cohere import FakeCohere
from bench.harness.procs import wait_for
from runtime.cli.common import EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE
from stages.services import Services
from tests.made_formats import MAKERS, TOPICS
from tests.support.pdfs import pymupdf
from tests.support.pipeline_env import cohere_env
from tests.support.s3 import S3Server

QUIET = "--no-progress"


def pdf_bytes(text: str) -> bytes:
    doc = pymupdf.open()
    doc.new_page().insert_text((72, 72), text)
    data: bytes = doc.tobytes()
    doc.close()
    return data


def write_pdf(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pdf_bytes(text))
    return path


class DocState(msgspec.Struct, frozen=True):
    id: str
    uri: str
    generation: int
    status: str
    chunks: int
    points: int
    #: Generations of the document's points in the index.
    point_generations: frozenset[int]


class IndexState(msgspec.Struct, frozen=True):
    docs: dict[str, DocState]  # by uri
    #: Points whose document is not a live document.
    stray_points: int


def index_state(cli: Cli) -> IndexState:
    """Documents of every source of ``cli``'s database and data dir, with their points
    counted in the vector index."""

    async def go() -> IndexState:
        services = Services(cli.env, cli.data_dir)
        async with services.lifespan():
            refs = await services.index.scan(services.vector_collection)
        conn = await asyncpg.connect(cli.dsn)
        try:
            rows = await conn.fetch(
                "SELECT d.id::text AS id, d.source_uri, d.generation, d.status::text AS status,"
                " (SELECT count(*) FROM chunks c WHERE c.document_id = d.id) AS chunks"
                " FROM documents d"
            )
        finally:
            await conn.close()
        by_doc: dict[str, list[int]] = {}
        for ref in refs:
            by_doc.setdefault(ref.document_id, []).append(ref.generation)
        docs = {
            r["source_uri"]: DocState(
                id=r["id"],
                uri=r["source_uri"],
                generation=r["generation"],
                status=r["status"],
                chunks=r["chunks"],
                points=len(by_doc.get(r["id"], [])),
                point_generations=frozenset(by_doc.get(r["id"], [])),
            )
            for r in rows
        }
        live = {d.id for d in docs.values()}
        stray = sum(len(g) for d, g in by_doc.items() if d not in live)
        return IndexState(docs=docs, stray_points=stray)

    return asyncio.run(go())


def assert_index_equals(state: IndexState, uris: set[str]) -> None:
    assert set(state.docs) == uris
    assert state.stray_points == 0
    for d in state.docs.values():
        assert d.status == "ready", d
        assert d.chunks > 0 and d.points == d.chunks, d
        assert d.point_generations == {d.generation}, d


def files_under(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*.pdf")}


def search_all(cli: Cli) -> list[dict[str, Any]]:
    result = cli.run("search", "anything", "-k", "1000", "--json")
    assert result.code == EXIT_OK, result
    hits: list[dict[str, Any]] = result.json()
    return hits


def media_types(dsn: str) -> dict[str, str]:
    """Each synced document's media type, by its URI."""
    return {r[0]: r[1] for r in sql(dsn, "SELECT source_uri, media_type FROM documents")}


def jobs_of(dsn: str, doc_id: str) -> int:
    return int(
        sql(dsn, "SELECT count(*) FROM stage_jobs WHERE document_id = $1::uuid", doc_id)[0][0]
    )


@pytest.fixture
def cohere(fake_cohere: FakeCohere) -> FakeCohere:
    return fake_cohere


@pytest.fixture
def cli(cohere_cli: Cli) -> Cli:
    return cohere_cli


def synced(cli: Cli, source: str, *args: str) -> Result:
    result = cli.run("sync", source, QUIET, "--json", *args)
    assert result.code == EXIT_OK, result
    assert "Traceback" not in result.err, result
    return result


def test_folder_edit_rename_delete_add(
    cli: Cli, dsn: str, tmp_path: Path, cohere: FakeCohere
) -> None:
    src = tmp_path / "src"
    write_pdf(src / "a.pdf", "aardvarks eat ants in august")
    write_pdf(src / "b.pdf", "bears browse blackberry brambles")
    write_pdf(src / "c.pdf", "cormorants circle the cold cove")
    write_pdf(src / "deep/d.pdf", "dunlins dart along the dunes")

    first = synced(cli, str(src)).json()
    assert first["counts"] == {
        "new": 4,
        "changed": 0,
        "moved": 0,
        "deleted": 0,
        "adopted": 0,
        "unchanged": 0,
    }
    assert first["ready"] == 4
    before = index_state(cli)
    assert_index_equals(before, files_under(src))

    write_pdf(src / "a.pdf", "albatrosses glide above the atlantic")  # edit
    (src / "b.pdf").rename(src / "deep/b-renamed.pdf")  # rename and move
    (src / "c.pdf").unlink()  # delete
    write_pdf(src / "e.pdf", "egrets wade in the estuary")  # add
    plan = cli.run("sync", str(src), "--dry-run", "--json")
    assert plan.code == EXIT_OK, plan
    assert plan.json()["counts"] == {
        "new": 1,
        "changed": 1,
        "moved": 1,
        "deleted": 1,
        "adopted": 0,
        "unchanged": 1,
    }
    assert plan.json()["files"]["moved"] == ["b.pdf -> deep/b-renamed.pdf"]
    assert jobs_of(dsn, before.docs["a.pdf"].id) == 5  # the dry run changed nothing

    second = synced(cli, str(src)).json()
    assert second["counts"] == plan.json()["counts"]
    after = index_state(cli)
    assert_index_equals(after, files_under(src))
    # Edited: the same document, its next generation; renamed: the same document, as it was.
    assert after.docs["a.pdf"].id == before.docs["a.pdf"].id
    assert after.docs["a.pdf"].generation == before.docs["a.pdf"].generation + 1
    renamed = after.docs["deep/b-renamed.pdf"]
    assert renamed.id == before.docs["b.pdf"].id
    assert renamed.generation == before.docs["b.pdf"].generation
    assert jobs_of(dsn, renamed.id) == 5  # no stage ran for it

    # Deleted content and the superseded version are never returned by search.
    hits = search_all(cli)
    assert len(hits) == sum(d.points for d in after.docs.values())
    texts = " ".join(h["text"] for h in hits)
    assert "cormorants" not in texts and "aardvarks" not in texts
    assert "albatrosses" in texts and "egrets" in texts
    gone = before.docs["c.pdf"].id
    assert gone not in {h["document_id"] for h in hits}

    # Stored objects: the deleted document's are gone, the edited one keeps only its own.
    objects = [
        p.relative_to(cli.data_dir / "assets").as_posix()
        for p in (cli.data_dir / "assets").rglob("*")
        if p.is_file()
    ]
    assert not [o for o in objects if gone in o]
    a_id = after.docs["a.pdf"].id
    [a_original] = [o for o in objects if a_id in o and "/original-" in o]
    current = sql(dsn, "SELECT asset_key FROM documents WHERE id = $1::uuid", a_id)[0][0]
    assert a_original == current

    # The tombstone stays for status; verify finds nothing to repair.
    status = cli.run("status", gone)
    assert f"deleted from source {src.resolve()} : c.pdf" in status.out, status
    overview = cli.run("status")
    assert "4 document(s), 1 deleted (tombstones)" in overview.out, overview
    verify = cli.run("verify", "--json")
    assert verify.code == EXIT_OK, verify

    # A rename alone: no stage runs and 0 embed calls.
    calls = cohere.requests_to("embed")
    (src / "e.pdf").rename(src / "e-moved.pdf")
    third = synced(cli, str(src)).json()
    assert third["counts"]["moved"] == 1 and third["counts"]["new"] == 0
    assert cohere.requests_to("embed") == calls
    moved = index_state(cli)
    assert_index_equals(moved, files_under(src))
    assert jobs_of(dsn, moved.docs["e-moved.pdf"].id) == 5


def test_unchanged_costs_a_stat(cli: Cli, tmp_path: Path) -> None:
    """A second sync of an unchanged folder hashes nothing; a touched file (same bytes,
    new mtime) is hashed once, runs no stage, and is a stat again after."""
    src = tmp_path / "src"
    for i in range(3):
        write_pdf(src / f"f{i}.pdf", f"file number {i} about foxes")
    synced(cli, str(src))
    again = synced(cli, str(src)).json()
    assert again["hashed"] == 0 and again["counts"]["unchanged"] == 3
    os.utime(src / "f0.pdf", ns=(1_000_000_000, 1_000_000_000))
    touched = synced(cli, str(src)).json()
    assert touched["hashed"] == 1 and touched["counts"]["unchanged"] == 3
    assert synced(cli, str(src)).json()["hashed"] == 0


def test_folder_of_every_text_format(cli: Cli, dsn: str, tmp_path: Path) -> None:
    """A folder syncs every format submit reads, each detected from its bytes: DOCX,
    EPUB, XPS, Markdown, HTML and text end ready and searchable; a ``.docx`` that is text
    is refused with one line naming it; a ``.csv`` is not part of the source. A Markdown
    file whose content becomes HTML is a new version read as HTML."""
    src = tmp_path / "src"
    src.mkdir()
    made = {s: MAKERS[s](src / f"doc.{s}") for s in ("docx", "epub", "xps", "md", "html", "txt")}
    (src / "fake.docx").write_text("just some words, not a word-processing document\n")
    (src / "table.csv").write_text("a,b\n1,2\n")

    result = cli.run("sync", str(src), QUIET, "--json")
    assert result.code != EXIT_OK, result  # the refused file makes it non-zero
    assert "Traceback" not in result.err, result
    report = result.json()
    assert report["counts"]["new"] == len(made) + 1
    assert report["ready"] == len(made)
    [refused] = report["refused"]
    assert refused.startswith("fake.docx: not a DOCX") and "\n" not in refused, refused
    state = index_state(cli)
    assert_index_equals(state, {p.name for p in made.values()})
    types = media_types(dsn)
    assert types["doc.md"] == "text/markdown"
    assert types["doc.docx"].endswith("wordprocessingml.document")
    texts = " ".join(h["text"] for h in search_all(cli))
    for suffix in made:
        heading, body = TOPICS[suffix]
        assert body.split()[0] in texts, (suffix, heading)

    page = "<!DOCTYPE html><html><body><h1>Lighthouses</h1><p>Fresnel lenses</p></body></html>"
    (src / "doc.md").write_text(page)
    second = cli.run("sync", str(src), QUIET, "--json").json()
    assert second["counts"]["changed"] == 1
    assert media_types(dsn)["doc.md"] == "text/html"
    assert "Fresnel lenses" in " ".join(h["text"] for h in search_all(cli))


def test_bucket_edit_rename_delete_add(
    dsn: str, tmp_path: Path, cohere: FakeCohere, s3_server: S3Server
) -> None:
    client = Minio(
        s3_server.endpoint,
        access_key=s3_server.access_key,
        secret_key=s3_server.secret_key,
        secure=False,
    )
    bucket = "sync-src"
    if not client.bucket_exists(bucket):
        client.make_bucket(bucket)

    def put(key: str, text: str) -> None:
        data = pdf_bytes(text)
        client.put_object(bucket, key, io.BytesIO(data), len(data), "application/pdf")

    put("docs/a.pdf", "anchors and anemones")
    put("docs/b.pdf", "buoys bobbing in the bay")
    put("docs/c.pdf", "crabs under the causeway")
    put("other/x.pdf", "outside the prefix")
    # Formats beyond PDF are detected from the object's first bytes (no file to list).
    docx_file = MAKERS["docx"](tmp_path / "g.docx")
    client.fput_object(bucket, "docs/g.docx", str(docx_file))
    notes = b"# Gannets\n\nGannets dive into the sea for herring.\n"
    client.put_object(bucket, "docs/n.md", io.BytesIO(notes), len(notes))
    env = cohere_env(
        cohere,
        MINIO_ENDPOINT=s3_server.endpoint,
        MINIO_ACCESS_KEY=s3_server.access_key,
        MINIO_SECRET_KEY=s3_server.secret_key,
        MINIO_BUCKET="sync-assets",
    )
    cli = Cli(dsn, tmp_path / "data", tmp_path / "logs", **env)
    source = f"s3://{bucket}/docs/"
    first = synced(cli, source).json()
    assert first["counts"]["new"] == 5
    before = index_state(cli)
    assert_index_equals(before, {"a.pdf", "b.pdf", "c.pdf", "g.docx", "n.md"})
    types = media_types(dsn)
    assert types["g.docx"].endswith("wordprocessingml.document")
    assert types["n.md"] == "text/markdown"

    # The same length of text, so likely the same size and, within the second, the same
    # Last-Modified: only the ETag tells the change.
    put("docs/a.pdf", "anchors and anenomes")
    client.copy_object(bucket, "docs/sub/b2.pdf", _copy_source(bucket, "docs/b.pdf"))
    client.remove_object(bucket, "docs/b.pdf")
    client.remove_object(bucket, "docs/c.pdf")
    put("docs/d.pdf", "divers near the dock")
    calls = cohere.requests_to("embed")
    second = synced(cli, source).json()
    assert second["counts"] == {
        "new": 1,
        "changed": 1,
        "moved": 1,
        "deleted": 1,
        "adopted": 0,
        "unchanged": 2,
    }
    after = index_state(cli)
    assert_index_equals(after, {"a.pdf", "sub/b2.pdf", "d.pdf", "g.docx", "n.md"})
    assert after.docs["sub/b2.pdf"].id == before.docs["b.pdf"].id
    assert after.docs["a.pdf"].generation == 2
    # Two new texts embedded (the edit and the addition), none for the rename.
    assert cohere.requests_to("embed") - calls <= 2
    texts = " ".join(h["text"] for h in search_all(cli))
    assert "crabs" not in texts and "anemones" not in texts and "anenomes" in texts
    assert "outside the prefix" not in texts


def _copy_source(bucket: str, key: str) -> Any:
    from minio.commonconfig import CopySource

    return CopySource(bucket, key)


def test_two_syncs_at_once_double_nothing(cli: Cli, dsn: str, tmp_path: Path) -> None:
    src = tmp_path / "src"
    for i in range(8):
        write_pdf(src / f"n{i}.pdf", f"note {i} on nightjars and nettles")
    one, two = cli.start("sync", str(src), QUIET), cli.start("sync", str(src), QUIET)
    assert one.wait().code == EXIT_OK and two.wait().code == EXIT_OK
    state = index_state(cli)
    assert_index_equals(state, files_under(src))
    parse_jobs = sql(dsn, "SELECT count(*) FROM stage_jobs WHERE stage = 'parse'")[0][0]
    assert parse_jobs == 8


def test_killed_sync_converges(cli: Cli, dsn: str, tmp_path: Path) -> None:
    src = tmp_path / "src"
    for i in range(40):
        write_pdf(src / f"k{i:02}.pdf", f"kittiwake log {i}: {'kelp ' * (i % 7)}")

    def killed_when(query: str) -> None:
        running = cli.start("sync", str(src), QUIET)
        wait_for(lambda: bool(sql(dsn, query)[0][0]), timeout_s=60, what=query)
        running.signal(signal.SIGKILL)
        running.wait()

    killed_when("SELECT count(*) >= 3 FROM documents")
    unfinished = sql(dsn, "SELECT count(*) FROM documents WHERE status <> 'ready'")[0][0]
    total = sql(dsn, "SELECT count(*) FROM documents")[0][0]
    assert total < 40 or unfinished > 0  # it was killed midway
    # The same command again, nothing changed meanwhile: it finishes what the first left.
    synced(cli, str(src))
    assert_index_equals(index_state(cli), files_under(src))

    # Killed again while applying edits and deletions, then run again.
    for i in range(0, 40, 2):
        (src / f"k{i:02}.pdf").unlink()
    for i in range(1, 10, 2):
        write_pdf(src / f"k{i:02}.pdf", f"kestrel log {i}")
    killed_when("SELECT count(*) >= 1 FROM source_tombstones")
    synced(cli, str(src))
    assert_index_equals(index_state(cli), files_under(src))
    texts = " ".join(h["text"] for h in search_all(cli))
    assert "kestrel log 1" in texts and "kittiwake log 0" not in texts


TWO = "SELECT id, generation, source_uri FROM documents WHERE collection = 'birds-two' ORDER BY id"


TWO = "SELECT id, generation, source_uri FROM documents WHERE collection = 'birds-two' ORDER BY id"


def test_sources_keep_to_their_collection(cli: Cli, dsn: str, tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    write_pdf(one / "p.pdf", "puffins on the point")
    write_pdf(two / "q.pdf", "quail in the quarry")
    write_pdf(two / "r.pdf", "ravens on the ridge")
    synced(cli, str(one), "--collection", "birds-one")
    synced(cli, str(two), "--collection", "birds-two")
    before = sql(dsn, TWO)
    (one / "p.pdf").unlink()
    write_pdf(one / "q.pdf", "quail in the quarry")  # the same bytes as two's q.pdf
    result = synced(cli, str(one)).json()
    assert result["counts"]["deleted"] == 1 and result["counts"]["new"] == 1
    after = sql(dsn, TWO)
    assert [tuple(r) for r in after] == [tuple(r) for r in before]
    wrong = cli.run("sync", str(one), "--collection", "birds-two")
    assert wrong.code == EXIT_USAGE and "collection" in wrong.err, wrong


def test_watch_syncs_what_changes(cli: Cli, dsn: str, tmp_path: Path) -> None:
    src = tmp_path / "src"
    write_pdf(src / "w1.pdf", "wagtails by the water")
    watching = cli.start("sync", str(src), "--watch", QUIET, RAGLINE_SYNC_POLL_S="30")
    try:

        def ready(n: int) -> bool:
            rows = sql(dsn, "SELECT count(*) FROM documents WHERE status = 'ready'")
            return bool(rows[0][0] == n)

        wait_for(lambda: ready(1), timeout_s=60, what="the first sync")
        write_pdf(src / "w2.pdf", "woodpeckers in the wood")
        wait_for(lambda: ready(2), timeout_s=25, what="the watcher to sync a new file")
        (src / "w1.pdf").unlink()
        wait_for(lambda: ready(1), timeout_s=25, what="the watcher to sync a deletion")
        assert watching.poll() is None
    finally:
        watching.signal(signal.SIGINT)
        result = watching.wait()
    assert result.code == EXIT_INTERRUPTED, result
    assert_index_equals(index_state(cli), {"w2.pdf"})
