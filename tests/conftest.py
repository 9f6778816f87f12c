"""Shared fixtures: a database server, a migrated template, a fresh database per test; the
async backend; worker processes; a scratch directory for embedded clusters."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.harness.db import Databases, server_dsn
from bench.harness.procs import StartWorker, workers
from tests.support.embedded_helpers import scratch_base
from tests.support.s3 import S3Server

UVLOOP = ("asyncio", {"use_uvloop": True})
ASYNCIO: tuple[str, dict[str, Any]] = ("asyncio", {})


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "db: needs PostgreSQL")
    config.addinivalue_line(
        "markers", "both_backends: run the async tests on uvloop and on plain asyncio"
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Tests marked ``both_backends`` (the engine's own) run on uvloop and plain asyncio."""
    if "anyio_backend" in metafunc.fixturenames and metafunc.definition.get_closest_marker(
        "both_backends"
    ):
        metafunc.parametrize("anyio_backend", [UVLOOP, ASYNCIO], ids=["uvloop", "asyncio"])


@pytest.fixture
def anyio_backend() -> Any:
    """uvloop, as the CLI runs. Modules marked ``both_backends`` also run on plain asyncio;
    adapters behave the same on either."""
    return UVLOOP


@pytest.fixture(scope="session")
def databases() -> Iterator[Databases]:
    with server_dsn() as server:
        dbs = Databases(server)
        dbs.create_template()
        try:
            yield dbs
        finally:
            dbs.drop(dbs.template)


@pytest.fixture
def dsn(databases: Databases) -> Iterator[str]:
    """A fresh, migrated database for this test (cloned from the template)."""
    with databases.fresh() as dsn:
        yield dsn


@pytest.fixture
def embedded_base() -> Iterator[Path]:
    """A scratch directory that the server's user can enter, removed with its clusters."""
    with scratch_base() as base:
        yield base


@pytest.fixture
def start_worker(tmp_path: Path) -> Iterator[StartWorker]:
    """Starts worker processes (``start_worker(dsn, *args, **env)``); all stopped at teardown."""
    with workers(tmp_path) as start:
        yield start


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """A moto S3 server on an ephemeral loopback port, shared by the session."""
    from moto.server import ThreadedMotoServer  # heavy: only for tests that use S3

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield S3Server(endpoint=f"{host}:{port}")
    finally:
        server.stop()
