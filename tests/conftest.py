"""Shared fixtures: a database server, a migrated template, a fresh database per test."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.db import Databases, server_dsn


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "db: needs PostgreSQL")


@pytest.fixture
def anyio_backend() -> Any:
    """uvloop, as the CLI runs. The engine's own tests also run on plain asyncio
    (``tests.support.backends.both_backends``); adapters behave the same on either."""
    return ("asyncio", {"use_uvloop": True})


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
    name = databases.clone()
    try:
        yield databases.dsn(name)
    finally:
        databases.drop(name)
