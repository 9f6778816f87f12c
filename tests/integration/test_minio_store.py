"""The MinIO/S3 asset store alone: a server that is down is a transient error, and the
composition root picks it only when ``MINIO_ENDPOINT`` is set. What every asset store
does is in tests/conformance/test_asset_store.py."""

from __future__ import annotations

import hashlib
import uuid
from pathlib import Path

import pytest

from runtime.errors import ConfigurationError, TransientError
from stages.adapters.assets.directory import DirStore
from stages.adapters.assets.minio import MinioConfig, MinioStore
from stages.ports.assets import original_key
from stages.services import asset_store
from stages.settings import PipelineSettings
from tests.support.s3 import closed_port

pytestmark = pytest.mark.anyio

SHA = hashlib.sha256(b"x").hexdigest()


async def test_minio_server_down_is_transient() -> None:
    config = MinioConfig(endpoint=f"127.0.0.1:{closed_port()}", http_retries=0)
    store = MinioStore(config)
    try:
        with pytest.raises(TransientError) as caught:
            await store.get(original_key(uuid.uuid4(), SHA))
        assert caught.value.__cause__ is not None
    finally:
        await store.aclose()


def test_factory_picks_minio_only_when_endpoint_set(tmp_path: Path) -> None:
    assert isinstance(asset_store(PipelineSettings.from_env({}), tmp_path), DirStore)
    env = {"MINIO_ENDPOINT": "127.0.0.1:9", "MINIO_SECURE": "true"}
    made = asset_store(PipelineSettings.from_env(env), tmp_path)
    assert isinstance(made, MinioStore)
    assert made.config.secure and made.config.bucket == "ragline"
    with pytest.raises(ConfigurationError, match=r"^MINIO_SECURE='maybe' is invalid"):
        PipelineSettings.from_env({"MINIO_ENDPOINT": "x:1", "MINIO_SECURE": "maybe"})
