"""Fixtures of the acceptance tests: the CLI against a local Cohere-compatible server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.harness.cli import Cli
from tests.support.browser import chromium
from tests.support.pipeline_env import FAKE_DIMS, TimedCohere, cohere_env


@pytest.fixture
def fake_cohere() -> Iterator[TimedCohere]:
    with TimedCohere(dims=FAKE_DIMS) as server:
        yield server


@pytest.fixture
def cohere_cli(dsn: str, tmp_path: Path, fake_cohere: TimedCohere) -> Cli:
    """``python -m runtime`` on this test's database and data dir, embedding with the
    local Cohere-compatible server (no model to load, no OCR)."""
    return Cli(dsn, tmp_path / "data", tmp_path / "logs", **cohere_env(fake_cohere))


@pytest.fixture(scope="module")
def driver() -> Iterator[Any]:
    """Headless Chromium (the tests that use it are marked ``needs_chromium``)."""
    yield from chromium()
