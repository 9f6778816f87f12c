"""Apply schema/migrations in order, once, under an advisory lock.

Several processes may start at once and all call :func:`migrate`: the session-level
advisory lock makes them take turns, and the ``ragline_migrations`` table makes each
migration run exactly once, in its own transaction.
"""

from __future__ import annotations

import logging
from typing import Any

import asyncpg

import schema

log = logging.getLogger(__name__)

_Q = schema.load("migrations")


async def migrate(conn: asyncpg.Connection[Any]) -> list[int]:
    """Apply pending migrations; returns the versions applied by this call."""
    await conn.execute(_Q["lock_migrations"])
    try:
        await conn.execute(_Q["create_migrations_table"])
        done = {r["version"] for r in await conn.fetch(_Q["applied_migrations"])}
        applied: list[int] = []
        for version, name, sql in schema.migrations():
            if version in done:
                continue
            async with conn.transaction():
                await conn.execute(sql)
                await conn.execute(_Q["record_migration"], version, name)
            log.info("applied migration %04d_%s", version, name)
            applied.append(version)
        return applied
    finally:
        await conn.execute(_Q["unlock_migrations"])


async def pending(conn: asyncpg.Connection[Any]) -> list[int]:
    """Versions not applied yet (all of them on an empty database)."""
    exists = await conn.fetchval(_Q["migrations_table_exists"])
    done = {r["version"] for r in await conn.fetch(_Q["applied_migrations"])} if exists else set()
    return [v for v, _, _ in schema.migrations() if v not in done]
