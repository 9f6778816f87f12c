"""Throwaway databases for tests and benchmarks: one migrated template per run, one clone
per test; and one-query reads from synchronous code.

``DATABASE_URL`` when set (any server we may create databases on); otherwise the
project's own embedded PostgreSQL under a temporary data dir.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import anyio
import asyncpg

from bench.harness.pipelines import EFFECTS_DDL
from runtime.db.migrate import migrate


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
    from runtime.db.embedded import embedded_postgres

    with tempfile.TemporaryDirectory(prefix="ragline-test-pg-") as tmp:
        # mkdtemp makes it 0700; as root the server runs as another user, who must be able
        # to enter it (else the cluster would be placed under /var/tmp and outlive the run).
        os.chmod(tmp, 0o711)
        with embedded_postgres(Path(tmp)) as dsn:
            yield dsn


async def _run(dsn: str, migrate_first: bool, *statements: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        if migrate_first:
            await migrate(conn)
        for statement in statements:
            await conn.execute(statement)
    finally:
        await conn.close()


def execute(dsn: str, *statements: str) -> None:
    """Run ``statements`` in order on one fresh connection, from synchronous code."""
    anyio.run(_run, dsn, False, *statements)


def migrate_database(dsn: str, *then: str) -> None:
    """Apply ragline's migrations to ``dsn``, then run ``then``."""
    anyio.run(_run, dsn, True, *then)


@contextmanager
def throwaway_database(server: str, prefix: str) -> Iterator[str]:
    """A migrated database on ``server`` for the block, dropped (FORCE) after it."""
    name = f"{prefix}_{secrets.token_hex(3)}"
    execute(server, f"CREATE DATABASE {name}")
    try:
        dsn = with_database(server, name)
        migrate_database(dsn)
        yield dsn
    finally:
        with contextlib.suppress(OSError, asyncpg.PostgresError):
            execute(server, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


class Databases:
    """Creates and drops the databases of one test run."""

    def __init__(self, server: str) -> None:
        self.server = server
        self.prefix = f"ragline_t{secrets.token_hex(3)}"
        self.template = f"{self.prefix}_tpl"
        self.count = 0

    def create_template(self) -> None:
        execute(self.server, f"CREATE DATABASE {self.template}")
        migrate_database(with_database(self.server, self.template), EFFECTS_DDL)

    def clone(self) -> str:
        self.count += 1
        name = f"{self.prefix}_{self.count}"
        execute(self.server, f"CREATE DATABASE {name} TEMPLATE {self.template}")
        return name

    def empty(self) -> str:
        self.count += 1
        name = f"{self.prefix}_{self.count}"
        execute(self.server, f"CREATE DATABASE {name}")
        return name

    @contextmanager
    def fresh(self, *, migrated: bool = True) -> Iterator[str]:
        """The DSN of a database for the block: migrated (a clone of the template) or
        empty; dropped after it."""
        name = self.clone() if migrated else self.empty()
        try:
            yield self.dsn(name)
        finally:
            self.drop(name)

    def drop(self, name: str) -> None:
        execute(self.server, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    def dsn(self, name: str) -> str:
        return with_database(self.server, name)


async def _fetch(dsn: str, query: str, *args: Any) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(dsn, timeout=10)
    try:
        return await conn.fetch(query, *args)
    finally:
        await conn.close()


def sql(dsn: str, query: str, *args: Any) -> list[asyncpg.Record]:
    """One query on a fresh connection, from synchronous code (tests read what a
    subprocess wrote; the chaos driver is synchronous)."""
    return anyio.run(_fetch, dsn, query, *args)


def try_sql(dsn: str, query: str, *args: Any) -> list[asyncpg.Record] | None:
    """:func:`sql`, or None while the database is unreachable (it may be restarting)."""
    try:
        return sql(dsn, query, *args)
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError):
        return None
