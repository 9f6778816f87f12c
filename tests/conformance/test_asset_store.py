"""One conformance suite for the asset store's port (stages.ports.assets.AssetStore):
every test runs against each implementation, DirStore on a tmp dir and MinioStore on a
moto S3 server, and each implementation has every member of the port. What one adapter
alone does is in tests/integration/test_directory_store.py and test_minio_store.py."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from runtime.errors import MissingInput
from stages.adapters.assets.directory import DirStore
from stages.adapters.assets.minio import MinioConfig, MinioStore
from stages.ports.assets import AssetStore, document_prefix, image_key, original_key, validate_key
from tests.support.parity import parity_problems, port_members
from tests.support.s3 import S3Server

pytestmark = pytest.mark.anyio

SHA = hashlib.sha256(b"x").hexdigest()
IMPLEMENTATIONS = (DirStore, MinioStore)


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS, ids=lambda c: c.__name__)
def test_every_store_has_every_member_of_the_port(implementation: type) -> None:
    assert {"put", "get", "local_file", "move_file_in"} <= set(port_members(AssetStore))
    assert parity_problems(AssetStore, implementation) == []


def _minio(server: S3Server, bucket: str) -> MinioStore:
    config = MinioConfig(
        endpoint=server.endpoint,
        access_key=server.access_key,
        secret_key=server.secret_key,
        bucket=bucket,
    )
    return MinioStore(config)


@pytest.fixture(params=["dir", "minio"])
async def store(
    request: pytest.FixtureRequest, tmp_path: Path, s3_server: S3Server
) -> AsyncIterator[AssetStore]:
    made: AssetStore
    if request.param == "dir":
        made = DirStore(tmp_path / "assets")
    else:
        made = _minio(s3_server, f"ragline-{uuid.uuid4().hex[:12]}")
    try:
        yield made
    finally:
        await made.aclose()


async def test_put_get_roundtrip_and_overwrite(store: AssetStore) -> None:
    key = original_key(uuid.uuid4(), SHA)
    await store.put(key, b"first", "application/pdf")
    assert await store.get(key) == b"first"
    await store.put(key, b"second", "application/pdf")
    assert await store.get(key) == b"second"
    assert await store.list(key) == [key]


async def test_missing_key_is_missing_input_naming_the_key(store: AssetStore) -> None:
    key = original_key(uuid.uuid4(), SHA)
    with pytest.raises(MissingInput) as caught:
        await store.get(key)
    assert key in str(caught.value)
    assert "\n" not in str(caught.value)
    assert not await store.exists(key)


async def test_exists_and_delete(store: AssetStore) -> None:
    key = image_key(uuid.uuid4(), SHA, "PNG")
    await store.put(key, b"img", "image/png")
    assert await store.exists(key)
    await store.delete(key)
    assert not await store.exists(key)
    await store.delete(key)  # deleting what is gone is fine


async def test_list_and_delete_prefix_stay_within_one_document(store: AssetStore) -> None:
    doc, other = uuid.uuid4(), uuid.uuid4()
    keys = [original_key(doc, SHA), image_key(doc, "a" * 64, "png"), image_key(doc, SHA, "jpg")]
    for key in [*keys, original_key(other, SHA)]:
        await store.put(key, key.encode(), "application/octet-stream")
    assert await store.list(document_prefix(doc)) == sorted(keys)
    assert await store.list(f"documents/{str(doc)[:8]}") == sorted(keys)  # string prefix
    assert await store.delete_prefix(document_prefix(doc)) == 3
    assert await store.list(document_prefix(doc)) == []
    assert await store.get(original_key(other, SHA)) == original_key(other, SHA).encode()
    assert await store.delete_prefix(document_prefix(doc)) == 0


async def test_put_file_and_read_it_as_a_local_file(store: AssetStore, tmp_path: Path) -> None:
    source = tmp_path / "user's file name.pdf"
    payload = bytes(range(256)) * 40_000  # ~10 MB: several multipart parts on S3
    source.write_bytes(payload)
    key = original_key(uuid.uuid4(), hashlib.sha256(payload).hexdigest())
    await store.put_file(key, source, "application/pdf")
    async with store.local_file(key) as path:
        assert path.read_bytes() == payload
        with path.open("rb") as held:
            # Overwriting the key meanwhile leaves a reader's open file as it was.
            await store.put(key, b"replaced", "application/pdf")
            assert held.read() == payload
    with pytest.raises(MissingInput):
        async with store.local_file(original_key(uuid.uuid4(), SHA)):
            pass


async def test_dir_store_reads_in_place_and_s3_downloads_are_cleaned_up(
    store: AssetStore,
) -> None:
    key = original_key(uuid.uuid4(), SHA)
    await store.put(key, b"%PDF-1.7 x", "application/pdf")
    async with store.local_file(key) as path:
        pass
    if isinstance(store, DirStore):
        assert path == store.root / key  # no copy of the original per parse
    else:
        assert not path.exists()  # the download's temporary directory is gone


@pytest.mark.parametrize("bad", ["", "/abs", "a/../b", "a//b", "a/./b", ".tmp-x", "a\\b"])
async def test_unsafe_keys_are_rejected(store: AssetStore, bad: str) -> None:
    with pytest.raises(ValueError):
        await store.put(bad, b"x", "text/plain")
    with pytest.raises(ValueError):
        await store.get(bad)


async def test_empty_prefix_cannot_wipe_the_store(store: AssetStore) -> None:
    with pytest.raises(ValueError):
        await store.delete_prefix("")


def test_keys_never_use_file_names_and_validate_inputs() -> None:
    doc = uuid.uuid4()
    assert original_key(doc, SHA) == f"documents/{doc}/original-{SHA[:16]}"
    assert image_key(doc, SHA, ".JPG") == f"documents/{doc}/images/{SHA[:16]}.jpg"
    with pytest.raises(ValueError):
        original_key(doc, "../../etc/passwd")
    with pytest.raises(ValueError):
        image_key(doc, SHA, "p/ng")
    assert validate_key("documents/", prefix=True) == "documents/"
