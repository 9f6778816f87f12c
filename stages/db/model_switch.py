"""Which embedding model answers search, and switching it without a half-built index.

The live vector collection is a row in PostgreSQL (``vector_aliases``, alias
:data:`ALIAS`): the embedding model, its dimension and the physical collection holding its
points. Search, the embed stage and the index stage read it for every query and job, so
the configured model (``RAGLINE_EMBEDDER`` …) only names the model of a database that has
no row yet. Qdrant also gets a real alias of that name, moved in one atomic request at the
swap, for clients that read Qdrant directly.

A migration (:mod:`stages.actions.migrate_model`) fills a new physical collection for a target
model while the row still names the old one. Meanwhile the embed stage embeds every
document with both models and the index stage writes both collections (and records the
document as migrated in its own commit), so new uploads are never missing after the swap;
what was ready before the migration is backfilled by the migrator. The swap changes the
row in one transaction once every ready document has its points, at its generation, in
the new collection; then the old collection is deleted.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any

import msgspec

import schema
from runtime.api import DbConn, Pool, TransientError
from stages.ports.vector_index import vector_collection_name
from stages.settings import LOCAL_EMBEDDER_KEY

if TYPE_CHECKING:
    from stages.ports.services import Services


Q = schema.load("model_switch")

#: The alias search reads (and the Qdrant alias ragline maintains).
ALIAS = "ragline"
#: pg_advisory_lock key: one migrator at a time on a database.
MIGRATION_LOCK = 0x7261676C_6D6D
#: The local model's key, also accepted as plain ``local``.
LOCAL_KEY = LOCAL_EMBEDDER_KEY


class Live(msgspec.Struct, frozen=True, kw_only=True):
    """The live vector collection: its embedding model, dimension and physical name."""

    model: str
    dimensions: int
    vector_collection: str


class Migration(msgspec.Struct, frozen=True, kw_only=True):
    id: int
    alias: str
    from_model: str
    from_collection: str
    to_model: str
    to_dimensions: int
    to_collection: str
    state: str
    started_at: datetime
    swapped_at: datetime | None
    finished_at: datetime | None

    @property
    def target(self) -> Live:
        return Live(
            model=self.to_model,
            dimensions=self.to_dimensions,
            vector_collection=self.to_collection,
        )


class Targets(msgspec.Struct, frozen=True, kw_only=True):
    """Where a job writes: the live collection, plus a migration's while it builds."""

    live: Live
    building: Migration | None = None

    @property
    def models(self) -> list[str]:
        models = [self.live.model]
        if self.building is not None and self.building.to_model not in models:
            models.append(self.building.to_model)
        return models


def live_of(record: Any) -> Live:
    return Live(
        model=record["model"],
        dimensions=record["dimensions"],
        vector_collection=record["collection"],
    )


def migration_of(record: Any) -> Migration:
    return msgspec.convert(dict(record), Migration)


async def live(pool: Pool, services: Services) -> Live:
    """The live collection; on a database without one, the configured model's (recorded)."""
    row = await pool.fetchrow(Q["get_alias"], ALIAS)
    if row is None:
        embedder = services.embedder
        await pool.execute(
            Q["init_alias"], ALIAS, embedder.model, embedder.dimensions, services.vector_collection
        )
        row = await pool.fetchrow(Q["get_alias"], ALIAS)
    return live_of(row)


async def open_migration(db: Pool | DbConn) -> Migration | None:
    row = await db.fetchrow(Q["open_migration"], ALIAS)
    return migration_of(row) if row is not None else None


async def targets(pool: Pool, services: Services) -> Targets:
    """The live collection and, while a migration builds, its target."""
    where, _ = await targets_and_tenant(pool, services, None)
    return where


async def targets_and_tenant(
    pool: Pool, services: Services, document_id: uuid.UUID | None
) -> tuple[Targets, str | None]:
    """:func:`targets` and the document's collection (None when its row is gone, or no
    document is asked for) in one query: the embed and index stages ask on every job."""
    row: Any = await pool.fetchrow(Q["targets"], ALIAS, document_id)
    if row is None:  # no alias row yet: record the configured model's, the slow way
        await live(pool, services)
        row = await pool.fetchrow(Q["targets"], ALIAS, document_id)
    building = None
    if row["m_id"] is not None:
        fields = {name: row[f"m_{name}"] for name in Migration.__struct_fields__}
        building = msgspec.convert(fields, Migration)
    return Targets(live=live_of(row), building=building), row["tenant"]


async def confirm_written(conn: DbConn, written: list[str]) -> Live:
    """In an index job's commit: wait for a swap in progress (share lock on the alias
    row) and check the job wrote the collection that is live now. A swap that committed
    first and moved search to a collection this job did not write makes it retry."""
    row = await conn.fetchrow(Q["share_alias"], ALIAS)
    if row is None:
        raise TransientError("vector alias row missing; retrying")
    now = live_of(row)
    if now.vector_collection not in written:
        raise TransientError(
            f"the embedding model switched to {now.model} while indexing; indexing again"
        )
    return now


async def mark_migrated(
    db: Pool | DbConn, migration_id: int, document_id: Any, generation: int, points: int
) -> bool:
    """Record the document's points (of ``generation``) as present in the new collection."""
    found = await db.fetchval(Q["mark_migrated"], migration_id, document_id, generation, points)
    return found is not None


def normalized_key(key: str) -> str:
    return LOCAL_KEY if key == "local" else key


def target_of(services: Services, key: str) -> Live:
    """The live-collection description a migration to model ``key`` builds."""
    embedder = services.embedder_for(normalized_key(key))
    return Live(
        model=embedder.model,
        dimensions=embedder.dimensions,
        vector_collection=vector_collection_name(embedder.model, embedder.dimensions),
    )


#: The other name a rebuilt vector collection takes (a rebuild alternates between two).
REBUILT_SUFFIX = "_rebuilt"


def rebuilt(current: Live) -> Live:
    """Where a rebuild of the live collection goes: the same model and dimension under
    the name it does not have now (made with today's layout: its keyword side)."""
    base = vector_collection_name(current.model, current.dimensions)
    name = base + REBUILT_SUFFIX if current.vector_collection == base else base
    return Live(model=current.model, dimensions=current.dimensions, vector_collection=name)


# -- the migrator's queries ------------------------------------------------------------


class Backfill(msgspec.Struct, frozen=True, kw_only=True):
    """Ready documents, and those of them a migration has at their generation."""

    ready: int
    migrated: int


class Pending(msgspec.Struct, frozen=True, kw_only=True):
    """A ready document a migration does not have yet at its generation."""

    id: uuid.UUID
    generation: int
    filename: str
    collection: str


class CollectionCount(msgspec.Struct, frozen=True, kw_only=True):
    """Documents of one collection (a tenant) in one status."""

    collection: str
    status: str
    n: int


class MigrationBusy(Exception):
    """Another migrator holds the lock (the caller says it in its own words)."""


@asynccontextmanager
async def migration_lock(pool: Pool) -> AsyncIterator[None]:
    """Hold the migrators' session lock on a connection of its own for the block.

    :raises MigrationBusy: another migrator holds it.
    """
    async with pool.acquire() as conn:
        if not await conn.fetchval(Q["try_migration_lock"], MIGRATION_LOCK):
            raise MigrationBusy
        try:
            yield
        finally:
            await conn.fetchval(Q["release_migration_lock"], MIGRATION_LOCK)


async def start_migration(pool: Pool, current: Live, target: Live) -> Migration:
    row = await pool.fetchrow(
        Q["start_migration"],
        ALIAS,
        current.model,
        current.vector_collection,
        target.model,
        target.dimensions,
        target.vector_collection,
    )
    return migration_of(row)


async def last_migration(pool: Pool) -> Migration | None:
    row = await pool.fetchrow(Q["last_migration"], ALIAS)
    return migration_of(row) if row is not None else None


async def backfill(pool: Pool, migration_id: int) -> Backfill:
    row = await pool.fetchrow(Q["migration_progress"], migration_id)
    assert row is not None  # an aggregate: always one row
    return Backfill(ready=int(row["ready"]), migrated=int(row["migrated"]))


async def pending(db: Pool | DbConn, migration_id: int, limit: int) -> list[Pending]:
    """Up to ``limit`` ready documents the migration does not have yet, oldest first."""
    rows = await db.fetch(Q["migration_todo"], migration_id, limit)
    return [msgspec.convert(dict(r), Pending) for r in rows]


async def unmark_migrated(pool: Pool, migration_id: int, document_id: uuid.UUID) -> None:
    await pool.execute(Q["unmark_migrated"], migration_id, document_id)


async def lock_alias(conn: DbConn) -> Live:
    """The live collection, its row locked for this transaction (the swap's lock)."""
    row = await conn.fetchrow(Q["lock_alias"], ALIAS)
    assert row is not None  # the alias row exists once a migration has begun
    return live_of(row)


async def swap(conn: DbConn, migration: Migration) -> None:
    """In the swap's transaction: the alias names the target; the migration is swapped."""
    target = migration.target
    await conn.execute(
        Q["set_alias"], ALIAS, target.model, target.dimensions, target.vector_collection
    )
    await conn.execute(Q["swap_migration"], migration.id)


async def finish_migration(pool: Pool, migration_id: int) -> None:
    await pool.execute(Q["finish_migration"], migration_id)


async def cancel_migration(pool: Pool, migration_id: int) -> None:
    await pool.execute(Q["cancel_migration"], migration_id)


async def collection_counts(pool: Pool) -> list[CollectionCount]:
    """Documents per collection (tenant) and status."""
    rows = await pool.fetch(Q["collection_counts"])
    return [
        CollectionCount(collection=r["collection"], status=r["status"], n=int(r["n"])) for r in rows
    ]
