"""The sources queries against a real PostgreSQL and a real asset store on disk: a new
version's superseded objects go only once it is indexed, and never one the new version
still uses; a file's document is created once however many syncs race for it."""

from __future__ import annotations

import uuid
from pathlib import Path

import anyio
import asyncpg
import pytest

from runtime.api import DocumentRepository, NewDocument
from stages.adapters.assets.directory import DirStore
from stages.db import checkpoints, sources
from stages.ports.assets import image_key, original_key

pytestmark = pytest.mark.anyio

SHA = {name: (name * 64)[:64] for name in "abcdef"}


def new_doc(doc_id: uuid.UUID, sha: str, uri: str = "x.pdf") -> sources.NewSourceDocument:
    return sources.NewSourceDocument(
        id=doc_id,
        filename=uri,
        media_type="application/pdf",
        byte_size=10,
        sha256=sha,
        asset_key=original_key(doc_id, sha),
        uri=uri,
        mtime_ns=1,
    )


def image(doc_id: uuid.UUID, sha: str) -> checkpoints.Asset:
    return checkpoints.Asset(
        sha256=sha,
        object_key=image_key(doc_id, sha, "png"),
        media_type="image/png",
        byte_size=3,
        page=1,
        width=40,
        height=40,
    )


async def test_superseded_objects_go_once_the_new_version_is_indexed(
    dsn: str, tmp_path: Path
) -> None:
    assets = DirStore(tmp_path / "assets")
    doc_id = uuid.uuid4()
    pool = await asyncpg.create_pool(dsn, min_size=0, max_size=4)
    try:
        source = await sources.ensure_source(pool, "/data/src", "default")
        assert await sources.insert_document(pool, source, new_doc(doc_id, SHA["a"]), "parse")
        old_images = [image(doc_id, SHA["b"]), image(doc_id, SHA["c"])]
        async with pool.acquire() as conn:
            await checkpoints.replace_assets(conn, doc_id, old_images)
        keys = [original_key(doc_id, SHA["a"]), *(a.object_key for a in old_images)]
        for key in keys:
            await assets.put(key, b"old", "application/octet-stream")

        generation = await sources.new_version(pool, new_doc(doc_id, SHA["d"]), "parse")
        assert generation == 2
        # The new version's parse finds image c again and a new one, e.
        new_images = [image(doc_id, SHA["c"]), image(doc_id, SHA["e"])]
        async with pool.acquire() as conn:
            await checkpoints.replace_assets(conn, doc_id, new_images)
        for key in [original_key(doc_id, SHA["d"]), new_images[1].object_key]:
            await assets.put(key, b"new", "application/octet-stream")

        # The old version's index run (a zombie's, or a repair's) deletes nothing.
        assert await sources.retire_superseded(pool, assets, doc_id, 1) == 0
        assert await sources.retire_superseded(pool, assets, doc_id, generation) == 2
        left = set(await assets.list(f"documents/{doc_id}/"))
        assert left == {
            original_key(doc_id, SHA["d"]),
            image_key(doc_id, SHA["c"], "png"),
            image_key(doc_id, SHA["e"], "png"),
        }
        assert await sources.retire_superseded(pool, assets, doc_id, generation) == 0
    finally:
        await pool.close()


async def test_racing_syncs_create_a_files_document_once(dsn: str) -> None:
    pool = await asyncpg.create_pool(dsn, min_size=0, max_size=8)
    try:
        source = await sources.ensure_source(pool, "/data/race", "default")
        created: list[bool] = []

        async def one() -> None:
            doc = new_doc(uuid.uuid4(), SHA["f"], uri="same.pdf")
            created.append(await sources.insert_document(pool, source, doc, "parse"))

        async with anyio.create_task_group() as tg:
            for _ in range(6):
                tg.start_soon(one)
        assert sorted(created) == [False] * 5 + [True]
        jobs = await pool.fetchval("SELECT count(*) FROM stage_jobs")
        assert jobs == 1
        # Another source's file of the same bytes: one document per collection (issue 39).
        other = await sources.ensure_source(pool, "/data/other", "default")
        assert not await sources.insert_document(
            pool, other, new_doc(uuid.uuid4(), SHA["f"], "same.pdf"), "parse"
        )
        elsewhere = await sources.ensure_source(pool, "/data/elsewhere", "birds")
        assert await sources.insert_document(
            pool, elsewhere, new_doc(uuid.uuid4(), SHA["f"], "same.pdf"), "parse"
        )
    finally:
        await pool.close()


async def test_a_source_adopts_a_submitted_document_once(dsn: str) -> None:
    """A submitted document of the bytes a source's new file has is adopted by the first
    source that asks (no second document); another source then finds it owned."""
    pool = await asyncpg.create_pool(dsn, min_size=0, max_size=4)
    try:
        doc_id = uuid.uuid4()
        submitted = NewDocument(
            id=doc_id,
            filename="x.pdf",
            media_type="application/pdf",
            byte_size=10,
            sha256=SHA["a"],
            asset_key=original_key(doc_id, SHA["a"]),
        )
        assert (await DocumentRepository(pool).submit(submitted, "parse")).created
        one = await sources.ensure_source(pool, "/data/one", "default")
        two = await sources.ensure_source(pool, "/data/one/two", "default")

        [found] = await sources.same_size(pool, "default", [10, 11])
        assert (found.id, found.sha256, found.source) == (doc_id, SHA["a"], None)
        assert await sources.same_size(pool, "birds", [10]) == []
        [by_bytes] = await sources.same_bytes(pool, "default", [SHA["a"], SHA["b"]])
        assert by_bytes == found
        assert await sources.adopt(pool, one, doc_id, "a/x.pdf", "a/x.pdf", (5, None))
        assert not await sources.adopt(pool, two, doc_id, "x.pdf", "x.pdf", (5, None))

        [owned] = await sources.same_size(pool, "default", [10])
        assert (owned.source, owned.uri) == ("/data/one", "a/x.pdf")
        known = await sources.documents(pool, one.id)
        assert known["a/x.pdf"].id == doc_id and known["a/x.pdf"].mtime_ns == 5
        assert await sources.documents(pool, two.id) == {}
    finally:
        await pool.close()


async def test_a_sync_records_the_device_of_its_folder(dsn: str) -> None:
    pool = await asyncpg.create_pool(dsn, min_size=0, max_size=2)
    try:
        source = await sources.ensure_source(pool, "/data/dev", "default")
        assert source.device is None
        await sources.mark_synced(pool, source.id, 2049)
        assert (await sources.ensure_source(pool, "/data/dev", "default")).device == 2049
        found = await sources.find_source(pool, "/data/dev")
        assert found is not None and found.device == 2049
        await sources.mark_synced(pool, source.id, None)  # a bucket has none
        found = await sources.find_source(pool, "/data/dev")
        assert found is not None and found.device is None
    finally:
        await pool.close()
