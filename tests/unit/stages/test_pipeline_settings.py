"""The pipeline's settings rows: one error format for every pipeline variable whichever
reader meets it (the check at start, the composition root's factories), typed values
through the rows, and no variable read without a row."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.errors import ConfigurationError
from runtime.settings import EnvReader, Setting, validate_env
from stages.adapters.assets.directory import DirStore
from stages.services import Services, asset_store
from stages.settings import PIPELINE_SETTINGS, PipelineSettings


def _read_by_pipeline(row: Setting) -> bool:
    """Whether PipelineSettings.from_env reads ``row`` (the serve rows are click options)."""
    read: list[str] = []
    original = EnvReader.raw

    def spy(self: EnvReader, name: str) -> str | None:
        read.append(name)
        return original(self, name)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(EnvReader, "raw", spy)
        PipelineSettings.from_env({})
    return row.name in read


PIPELINE_ROWS = [row for row in PIPELINE_SETTINGS if _read_by_pipeline(row)]
CASES = [
    pytest.param(row, value, id=f"{row.name}={value!r}")
    for row in PIPELINE_ROWS
    for value in row.bad_examples
]


def test_the_pipeline_reads_the_cohere_minio_and_qdrant_rows() -> None:
    names = {row.name for row in PIPELINE_ROWS}
    for prefix in ("COHERE_", "MINIO_", "QDRANT_", "RAGLINE_EMBED", "RAGLINE_VISION"):
        table = {row.name for row in PIPELINE_SETTINGS if row.name.startswith(prefix)}
        assert table and table <= names, sorted(table - names)


@pytest.mark.parametrize(("row", "value"), CASES)
def test_a_bad_value_is_the_same_line_at_start_and_in_the_factories(
    row: Setting, value: str, tmp_path: Path
) -> None:
    env = {row.name: value}
    with pytest.raises(ConfigurationError) as at_start:
        validate_env(env, PIPELINE_SETTINGS)
    with pytest.raises(ConfigurationError) as in_services:
        Services(env, tmp_path)
    assert str(in_services.value) == str(at_start.value)
    assert "\n" not in str(at_start.value) and row.name in str(at_start.value)


def test_typed_values_come_through_the_rows(tmp_path: Path) -> None:
    env = {
        "MINIO_ENDPOINT": "s3.local:9000",
        "MINIO_SECURE": "on",
        "MINIO_BUCKET": "b",
        "QDRANT_URL": "http://q:6333",
        "QDRANT_API_KEY": "qk",
        "COHERE_API_KEY": "ck",
        "RAGLINE_EMBED_DIMENSIONS": "512",
        "RAGLINE_VISION_TIMEOUT_S": "9.5",
    }
    settings = PipelineSettings.from_env(env)
    assert settings.minio is not None
    assert (settings.minio.endpoint, settings.minio.secure, settings.minio.bucket) == (
        "s3.local:9000",
        True,
        "b",
    )
    assert settings.qdrant is not None and settings.qdrant.api_key == "qk"
    assert (settings.embed.kind, settings.embed.dimensions) == ("cohere", 512)
    assert (settings.vision.kind, settings.vision.timeout_s) == ("ocr", 9.5)
    defaults = PipelineSettings.from_env({})
    assert defaults.minio is None and defaults.qdrant is None
    assert isinstance(asset_store(defaults, tmp_path), DirStore)


def test_reading_a_variable_without_a_row_is_a_bug() -> None:
    with pytest.raises(KeyError, match="RAGLINE_NO_SUCH"):
        EnvReader({"RAGLINE_NO_SUCH": "1"}, PIPELINE_SETTINGS).raw("RAGLINE_NO_SUCH")
