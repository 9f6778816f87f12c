"""Which embedding model answers search, and switching it without a half-built index.

The live vector collection is a row in PostgreSQL (``vector_aliases``, alias
:data:`ALIAS`): the embedding model, its dimension and the physical collection holding its
points. Search, the embed stage and the index stage read it for every query and job, so
the configured model (``RAGLINE_EMBEDDER`` …) only names the model of a database that has
no row yet. Qdrant also gets a real alias of that name, moved in one atomic request at the
swap, for clients that read Qdrant directly.

A migration (:mod:`stages.migrate_model`) fills a new physical collection for a target
model while the row still names the old one. Meanwhile the embed stage embeds every
document with both models and the index stage writes both collections (and records the
document as migrated in its own commit), so new uploads are never missing after the swap;
what was ready before the migration is backfilled by the migrator. The swap changes the
row in one transaction once every ready document has its points, at its generation, in
the new collection; then the old collection is deleted.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

import msgspec

import schema
from runtime.api import ConfigurationError, DbConn, MissingInput, Pool, TransientError
from stages.vector_index import Hit, collection_name

if TYPE_CHECKING:
    from stages.embedder_protocol import Embedder
    from stages.vector_index import VectorIndex


class Services(Protocol):
    """What this module needs of the worker's or the server's services."""

    @property
    def env(self) -> dict[str, str]: ...

    @property
    def embedder(self) -> Embedder: ...

    @property
    def index(self) -> VectorIndex: ...

    @property
    def collection(self) -> str: ...

    def embedder_for(self, model: str) -> Embedder: ...


Q = schema.load("model_switch")

#: The alias search reads (and the Qdrant alias ragline maintains).
ALIAS = "ragline"
#: pg_advisory_lock key: one migrator at a time on a database.
MIGRATION_LOCK = 0x7261676C_6D6D
#: The local model's key, also accepted as plain ``local``.
LOCAL_KEY = "local/all-MiniLM-L6-v2-int8"


class Live(msgspec.Struct, frozen=True, kw_only=True):
    """The live vector collection: its embedding model, dimension and physical name."""

    model: str
    dimensions: int
    collection: str


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
            model=self.to_model, dimensions=self.to_dimensions, collection=self.to_collection
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
        model=record["model"], dimensions=record["dimensions"], collection=record["collection"]
    )


def migration_of(record: Any) -> Migration:
    return msgspec.convert(dict(record), Migration)


async def live(pool: Pool, services: Services) -> Live:
    """The live collection; on a database without one, the configured model's (recorded)."""
    row = await pool.fetchrow(Q["get_alias"], ALIAS)
    if row is None:
        embedder = services.embedder
        await pool.execute(
            Q["init_alias"], ALIAS, embedder.model, embedder.dimensions, services.collection
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
    if now.collection not in written:
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


# -- embedders by model key --------------------------------------------------------------


def embedder_for_key(env: Mapping[str, str], key: str) -> Embedder:
    """An embedder for a model key as :attr:`Embedder.model` spells it:
    ``local/all-MiniLM-L6-v2-int8`` (or ``local``) or ``cohere/<model>@<dimensions>``
    (Cohere's key and URL come from the environment)."""
    from stages.embedder import LocalEmbedder, embedder_for
    from stages.settings import PipelineSettings

    if key in ("local", LOCAL_KEY):
        return LocalEmbedder()
    provider, _, rest = key.partition("/")
    model, _, dims = rest.rpartition("@")
    if provider != "cohere" or not model or not dims.isdigit():
        raise ConfigurationError(
            f"unknown embedding model {key!r}: use local or cohere/<model>@<dimensions>"
        )
    if not env.get("COHERE_API_KEY", "").strip():
        raise ConfigurationError(f"embedding model {key} needs COHERE_API_KEY")
    configured = PipelineSettings.from_env(env).embed
    return embedder_for(
        msgspec.structs.replace(configured, kind="cohere", model=model, dimensions=int(dims))
    )


def embedder_for(services: Any, model: str) -> Embedder:
    """``services.embedder`` when it is of ``model``, else one built for ``model`` once and
    kept on ``services`` (closed by :func:`close_embedders`)."""
    if services.embedder.model == model:
        embedder: Embedder = services.embedder
        return embedder
    extra: dict[str, Embedder] = services.__dict__.setdefault("_embedders", {})
    if model not in extra:
        extra[model] = embedder_for_key(services.env, model)
    return extra[model]


async def close_embedders(services: Any) -> None:
    for extra in services.__dict__.pop("_embedders", {}).values():
        await extra.aclose()


def normalized_key(key: str) -> str:
    return LOCAL_KEY if key == "local" else key


def target_of(services: Services, key: str) -> Live:
    """The live-collection description a migration to model ``key`` builds."""
    embedder = services.embedder_for(normalized_key(key))
    return Live(
        model=embedder.model,
        dimensions=embedder.dimensions,
        collection=collection_name(embedder.model, embedder.dimensions),
    )


async def search_live(
    pool: Pool, services: Services, query: str, limit: int, tenant: str | None
) -> tuple[Live, list[Hit]]:
    """Embed ``query`` with the live model and search the live collection (only the
    ``tenant`` collection's points when given). If the collection is deleted between
    reading the alias and searching it (a swap finished), the alias is read again: an
    answer always comes whole from the one collection that was live."""
    where = await live(pool, services)
    for _ in range(3):
        [vector] = await services.embedder_for(where.model).embed([query], "search_query")
        try:
            hits = await services.index.search(where.collection, vector, limit, tenant=tenant)
            return where, hits
        except MissingInput:
            again = await live(pool, services)
            if again == where:  # nothing indexed yet with this model
                return where, []
            where = again
    return where, []
