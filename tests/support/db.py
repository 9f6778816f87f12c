"""Throwaway databases for tests: one migrated template per run, one clone per test.

``DATABASE_URL`` when set (any server we may create databases on); otherwise the
project's own embedded PostgreSQL under a temporary data dir.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from runtime.migrate import migrate
from tests.support.pipelines import EFFECTS_DDL


def with_database(dsn: str, name: str) -> str:
    parts = urlsplit(dsn)
    return urlunsplit(parts._replace(path="/" + name))


@contextmanager
def server_dsn() -> Iterator[str]:
    """A DSN of a server where the tests may create databases."""
    url = os.environ.get("DATABASE_URL")
    if url:
        yield url
        return
    from runtime.embedded import embedded_postgres

    with tempfile.TemporaryDirectory(prefix="ragline-test-pg-") as tmp:
        # mkdtemp makes it 0700; as root the server runs as another user, who must be able
        # to enter it (else the cluster would be placed under /var/tmp and outlive the run).
        os.chmod(tmp, 0o711)
        with embedded_postgres(Path(tmp)) as dsn:
            yield dsn


async def _admin(dsn: str, *statements: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        for statement in statements:
            await conn.execute(statement)
    finally:
        await conn.close()


async def _build_template(dsn: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await migrate(conn)
        await conn.execute(EFFECTS_DDL)
    finally:
        await conn.close()


class Databases:
    """Creates and drops the databases of one test run."""

    def __init__(self, server: str) -> None:
        self.server = server
        self.prefix = f"ragline_t{secrets.token_hex(3)}"
        self.template = f"{self.prefix}_tpl"
        self.count = 0

    def create_template(self) -> None:
        asyncio.run(_admin(self.server, f"CREATE DATABASE {self.template}"))
        asyncio.run(_build_template(with_database(self.server, self.template)))

    def clone(self) -> str:
        self.count += 1
        name = f"{self.prefix}_{self.count}"
        asyncio.run(_admin(self.server, f"CREATE DATABASE {name} TEMPLATE {self.template}"))
        return name

    def empty(self) -> str:
        self.count += 1
        name = f"{self.prefix}_{self.count}"
        asyncio.run(_admin(self.server, f"CREATE DATABASE {name}"))
        return name

    def drop(self, name: str) -> None:
        asyncio.run(_admin(self.server, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))

    def dsn(self, name: str) -> str:
        return with_database(self.server, name)
