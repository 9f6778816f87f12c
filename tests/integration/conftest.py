"""Fixtures of the integration tests: a fake Cohere-compatible server and the pipeline
against it, embedded PostgreSQL clusters, users and children."""

from __future__ import annotations

import contextlib
import grp
import hashlib
import importlib.metadata
import os
import secrets
import shutil
import subprocess
from collections.abc import Callable, Iterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Protocol

import pytest

from bench.harness.fake_cohere import FakeCohere
from runtime.db.embedded import EmbeddedPostgres
from tests.support.embedded_helpers import (
    Child,
    LockedPgserver,
    UnprivilegedPython,
    scratch_base,
    user_exists,
)
from tests.support.pipeline_env import FAKE_DIMS, PipelineEnv, TimedCohere, cohere_env, pipeline_env


class OpenPipeline(Protocol):
    """The ``cohere_pipeline`` fixture."""

    def __call__(
        self, server: FakeCohere, **extra: str
    ) -> AbstractAsyncContextManager[PipelineEnv]: ...


@pytest.fixture
def fake_cohere() -> Iterator[TimedCohere]:
    """A local Cohere-compatible server for this test."""
    with TimedCohere(dims=FAKE_DIMS) as server:
        yield server


@pytest.fixture
def cohere_pipeline(dsn: str, tmp_path: Path) -> OpenPipeline:
    """``cohere_pipeline(server, **extra)`` opens the pipeline on this test's database, its
    data dir under ``tmp_path``, with the Cohere embedder against ``server`` (usually
    ``fake_cohere``) and ``extra`` environment on top."""

    def open_env(server: FakeCohere, **extra: str) -> AbstractAsyncContextManager[PipelineEnv]:
        return pipeline_env(dsn, tmp_path / "d", **cohere_env(server, **extra))

    return open_env


@pytest.fixture(scope="session")
def embedded_template() -> Iterator[Path]:
    with scratch_base() as base:
        template = base / "template"
        cluster = EmbeddedPostgres(template)
        cluster.acquire()
        cluster.release()
        yield template


@pytest.fixture
def initialized_data_dir(embedded_template: Path, embedded_base: Path) -> Path:
    """A data dir whose cluster exists (a copy of one made by ragline) and is stopped.

    Tests that are not about initdb start from it: initdb costs about 1 s, a copy 0.1 s.
    """
    data_dir = embedded_base / "data"
    data_dir.mkdir()
    # cp -a keeps the pg/ tree's owner (user postgres when run as root) and modes.
    subprocess.run(["cp", "-a", str(embedded_template / "pg"), str(data_dir)], check=True)
    return data_dir


@pytest.fixture
def spawn_child() -> Iterator[Callable[..., Child]]:
    """Start second processes on a data dir; any still alive are killed at teardown."""
    children: list[Child] = []

    def spawn(
        data_dir: Path, *, wait: bool = True, python: UnprivilegedPython | None = None
    ) -> Child:
        children.append(Child(data_dir, wait=wait, python=python))
        return children[-1]

    yield spawn
    for child in children:
        child.close()


@pytest.fixture
def throwaway_user_name() -> Iterator[str]:
    """A user name that does not exist; the user and its group are deleted at teardown."""
    name = f"rgl-test-{secrets.token_hex(4)}"
    yield name
    if user_exists(name):
        subprocess.run(["userdel", name], check=True, capture_output=True, timeout=60)
    with contextlib.suppress(KeyError):
        grp.getgrnam(name)
        subprocess.run(["groupdel", name], check=True, capture_output=True, timeout=60)


@pytest.fixture
def locked_pgserver(embedded_base: Path) -> Iterator[LockedPgserver]:
    """pgserver installed under a mode-0700 directory, like a venv under /root.

    The reachable copy ragline makes of it under /var/tmp is removed at teardown.
    """
    site = embedded_base / "root" / "venv" / "site-packages"
    site.mkdir(parents=True)
    site.parent.parent.chmod(0o700)
    distribution = importlib.metadata.distribution("pgserver")
    installed = Path(str(distribution.locate_file("")))
    for name in ("pgserver", "pgserver.libs", f"pgserver-{distribution.version}.dist-info"):
        if (installed / name).exists():
            subprocess.run(["cp", "-a", str(installed / name), str(site)], check=True)
    digest = hashlib.sha256(os.fsencode(os.path.realpath(site / "pgserver"))).hexdigest()[:16]
    copy = Path("/var/tmp") / f"ragline-pginstall-{distribution.version}-{digest}"
    yield LockedPgserver(site, copy)
    shutil.rmtree(copy, ignore_errors=True)
    copy.with_name(f"{copy.name}.lock").unlink(missing_ok=True)
