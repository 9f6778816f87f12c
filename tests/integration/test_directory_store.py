"""The directory asset store alone: a finished write leaves no temporary file beside its
object. What every asset store does is in tests/conformance/test_asset_store.py."""

from __future__ import annotations

import hashlib
import uuid
from pathlib import Path

import pytest

from stages.adapters.assets.directory import DirStore
from stages.ports.assets import original_key

pytestmark = pytest.mark.anyio

SHA = hashlib.sha256(b"x").hexdigest()


async def test_dirstore_leaves_no_temp_files(tmp_path: Path) -> None:
    store = DirStore(tmp_path)
    key = original_key(uuid.uuid4(), SHA)
    await store.put(key, b"x", "text/plain")
    assert [p.name for p in (tmp_path / key).parent.iterdir()] == [key.rsplit("/", 1)[1]]
