"""The benchmarks' PostgreSQL: the server (``DATABASE_URL``, else the local one), a
throwaway migrated database per run, and connections and pools closed even when the run
is cancelled."""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import AsyncIterator
from typing import Any, Protocol, TypeAlias, TypeVar

import anyio
import asyncpg

from bench.harness.db import with_database
from runtime.db.migrate import migrate

Conn: TypeAlias = "asyncpg.Connection[Any]"
Pool: TypeAlias = "asyncpg.Pool[Any]"

DEFAULT_DSN = "postgresql://root@127.0.0.1:5432/postgres"


def server_dsn() -> str:
    return os.environ.get("DATABASE_URL") or DEFAULT_DSN


class _Closable(Protocol):
    async def close(self) -> None: ...


_C = TypeVar("_C", bound=_Closable)


@contextlib.asynccontextmanager
async def closing(resource: _C) -> AsyncIterator[_C]:
    """``resource``, closed on the way out even when the caller is cancelled."""
    try:
        yield resource
    finally:
        with anyio.CancelScope(shield=True):
            await resource.close()


@contextlib.asynccontextmanager
async def connection(dsn: str) -> AsyncIterator[Conn]:
    async with closing(await asyncpg.connect(dsn)) as conn:
        yield conn


@contextlib.asynccontextmanager
async def pool_of(dsn: str, size: int) -> AsyncIterator[Pool]:
    async with closing(await asyncpg.create_pool(dsn, min_size=0, max_size=size)) as pool:
        yield pool


@contextlib.asynccontextmanager
async def bench_database(server_dsn: str) -> AsyncIterator[str]:
    """Create and migrate ``ragline_bench_<random>``; drop it afterwards."""
    name = f"ragline_bench_{secrets.token_hex(4)}"
    async with connection(server_dsn) as admin:
        await admin.execute(f"CREATE DATABASE {name}")
    dsn = with_database(server_dsn, name)
    try:
        async with connection(dsn) as conn:
            await migrate(conn)
        yield dsn
    finally:
        with anyio.CancelScope(shield=True):
            async with connection(server_dsn) as admin:
                await admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
