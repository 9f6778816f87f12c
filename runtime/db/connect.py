"""Which PostgreSQL to use: ``DATABASE_URL``, or the embedded cluster under the data dir."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import asyncpg

import schema
from runtime.db.migrate import migrate, pending
from runtime.errors import ConfigurationError, DatabaseUnavailable

_W = schema.load("workers")


@contextlib.contextmanager
def database(database_url: str | None, data_dir: Path, *, supervise: bool = False) -> Iterator[str]:
    """Yield a DSN; starts (or joins) the embedded cluster when no URL is given.

    ``supervise``: start the embedded cluster again whenever it dies while the block runs
    (:mod:`runtime.db.supervisor`), for commands that run workers.
    """
    if database_url:
        yield database_url
        return
    from runtime.db.embedded import EmbeddedPostgres
    from runtime.db.supervisor import Supervisor

    cluster = EmbeddedPostgres(data_dir)
    dsn = cluster.acquire()
    try:
        if supervise:
            with Supervisor(cluster).running():
                yield dsn
        else:
            yield dsn
    finally:
        cluster.release()


async def connect(dsn: str, timeout_s: float = 10.0) -> asyncpg.Connection[Any]:
    try:
        return await asyncpg.connect(dsn, timeout=timeout_s)
    except (OSError, TimeoutError, asyncpg.PostgresError) as exc:
        raise DatabaseUnavailable(f"cannot connect to PostgreSQL: {exc}") from exc


async def ensure_schema(dsn: str) -> list[int]:
    conn = await connect(dsn)
    try:
        return await migrate(conn)
    finally:
        await conn.close()


async def check_schema(dsn: str) -> None:
    """Raise :class:`ConfigurationError` when migrations are pending (``--no-auto-migrate``)."""
    conn = await connect(dsn)
    try:
        missing = await pending(conn)
    finally:
        await conn.close()
    if missing:
        raise ConfigurationError(
            f"the database lacks {len(missing)} of ragline's schema migrations "
            f"(first: {missing[0]:04d}) and auto-migrate is off: run 'ragline migrate' "
            f"or drop --no-auto-migrate / RAGLINE_AUTO_MIGRATE=false"
        )


async def prime_codecs(conn: asyncpg.Connection[Any]) -> None:
    """Have asyncpg learn, in one catalog query, the types a connection's statements use.

    asyncpg looks up each type it has no built-in codec for (the arrays ragline binds, the
    schema's enums) the first time one of a connection's statements uses it: a catalog
    query, with ``jit`` switched off and on around it (three round trips, ~4 ms of the
    server's time), for each statement that brings a new one. On bench.ingest that was 50
    lookups over 17 connections; one statement naming every such type (``codec_types``)
    makes it one lookup a connection. A pool's ``init``: it runs on each new connection.
    """
    names = [r["name"] for r in await conn.fetch(_W["codec_types"])]
    if names:
        # Names from format_type(), quoted as SQL needs them.
        await conn.fetchrow("SELECT " + ", ".join(f"NULL::{name}" for name in names))


@contextlib.asynccontextmanager
async def open_pool(dsn: str, max_size: int = 10) -> AsyncIterator[asyncpg.Pool[Any]]:
    try:
        # min_size=0: a pool that keeps a floor of connections logs a traceback each time
        # it fails to restore one during an outage; connections open on first use.
        pool = await asyncpg.create_pool(dsn, min_size=0, max_size=max_size, init=prime_codecs)
    except (OSError, TimeoutError, asyncpg.PostgresError) as exc:
        raise DatabaseUnavailable(f"cannot connect to PostgreSQL: {exc}") from exc
    try:
        yield pool
    finally:
        with anyio.CancelScope(shield=True):
            await pool.close()
