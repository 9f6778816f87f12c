"""The migrator: fill a new model's vector collection, swap the alias, drop the old one.

:func:`migrate` runs one migration to its end (or resumes the unfinished one):

1. Start (or find) the migration row; create the target collection.
2. Backfill: every ready document that the migration does not yet have at its current
   generation gets the target model's vectors (cached ones reused, the rest embedded and
   stored in the embeddings cache) and its points upserted into the target collection;
   then a row in ``model_migration_documents`` records it. A document reprocessed
   meanwhile is done again at its new generation. New documents need no backfill when
   the pipeline indexed them into both collections.
3. Swap, in one transaction holding the alias row (``FOR UPDATE``; index commits hold it
   ``FOR SHARE``): only if no ready document is missing, the alias names the new model and
   collection and the migration is marked swapped. Otherwise back to 2.
4. Qdrant's alias is moved (one atomic request); the old collection is deleted; done.

One migrator runs at a time (a session advisory lock, released when its process dies).
Every step is idempotent and recorded in PostgreSQL, so a migrator killed anywhere
(SIGKILL included) resumes where it was when run again; until the swap, search answers
from the old collection, after it from the new one.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import anyio
import msgspec

from runtime.api import ConfigurationError, Pool, RaglineError, TransientError
from stages.db import checkpoints
from stages.db import model_switch as switch
from stages.db.model_switch import (
    Live,
    Migration,
    live,
    mark_migrated,
    open_migration,
    rebuilt,
    target_of,
)
from stages.pipeline.index import document_points

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from stages.ports.embedder import Embedder
    from stages.ports.services import Services

#: Documents fetched per round of the backfill.
BATCH = 32
#: Tries per embedding request before the migrator gives up (a rerun resumes).
EMBED_TRIES = 8

log = logging.getLogger(__name__)


class Busy(RaglineError):
    """Another migrator holds the lock."""

    kind = "busy"


class Progress(msgspec.Struct, frozen=True, kw_only=True):
    """A migration's state and how far its backfill is (for ``status``)."""

    id: int
    from_model: str
    to_model: str
    from_collection: str
    to_collection: str
    state: str
    ready: int
    migrated: int


async def progress(pool: Pool, migration: Migration | None = None) -> Progress | None:
    """The open migration's progress (or the given one's); None without one."""
    migration = migration or await open_migration(pool)
    if migration is None:
        return None
    counts = await switch.backfill(pool, migration.id)
    return Progress(
        id=migration.id,
        from_model=migration.from_model,
        to_model=migration.to_model,
        from_collection=migration.from_collection,
        to_collection=migration.to_collection,
        state=migration.state,
        ready=counts.ready,
        migrated=counts.migrated,
    )


@asynccontextmanager
async def migration_lock(pool: Pool) -> AsyncIterator[None]:
    """Hold the migrators' lock for the block; :class:`Busy` when another holds it."""
    try:
        async with switch.migration_lock(pool):
            yield
    except switch.MigrationBusy:
        raise Busy("another model migration is running on this database") from None


async def begin(pool: Pool, services: Services, model: str, *, rebuild: bool = False) -> Migration:
    """The unfinished migration to ``model``, or a new one. Refuses a second target.
    ``rebuild``: the live model again, into a new vector collection of today's layout
    (its keyword side included), from the cached vectors."""
    current = await live(pool, services)
    found = await open_migration(pool)
    target = rebuilt(current) if rebuild else target_of(services, model)
    if found is not None:
        if found.to_model != target.model:
            raise ConfigurationError(
                f"a migration to {found.to_model} is unfinished: run migrate-model "
                f"{found.to_model} to finish it, or migrate-model --cancel"
            )
        return found
    if target.vector_collection == current.vector_collection:
        raise ConfigurationError(f"{target.model} is already the live embedding model")
    return await switch.start_migration(pool, current, target)


async def migrate(
    pool: Pool,
    services: Services,
    model: str,
    *,
    rebuild: bool = False,
    batch: int = BATCH,
    on_progress: Callable[[Progress], None] | None = None,
) -> Progress:
    """Run (or resume) the migration to ``model`` (with ``rebuild``: the live model into
    a new collection) until the old collection is gone."""
    async with migration_lock(pool):
        migration = await begin(pool, services, model, rebuild=rebuild)
        target = migration.target
        if migration.state == "building":
            await services.index.ensure_vector_collection(
                target.vector_collection, target.dimensions
            )
            while not await _swap(pool, migration):
                while todo := await switch.pending(pool, migration.id, batch):
                    for doc in todo:
                        await migrate_document(pool, services, migration, doc)
                    if on_progress is not None:
                        current = await progress(pool, migration)
                        assert current is not None
                        on_progress(current)
        await _finish(pool, services, migration)
        last = await switch.last_migration(pool)
        done = await progress(pool, last)
        assert done is not None
        return done


async def migrate_document(
    pool: Pool, services: Services, migration: Migration, doc: switch.Pending
) -> None:
    """The document's points, at its current generation, into the target collection."""
    target = migration.target
    rows = await _vectors(pool, services, target, doc.id)
    if rows is None:  # deleted meanwhile
        return
    points = document_points(rows, doc.id, doc.generation, doc.filename, doc.collection)
    where = target.vector_collection
    await services.index.replace_document(where, doc.id, doc.generation, points)
    if not await mark_migrated(pool, migration.id, doc.id, doc.generation, len(points)):
        # Reprocessed (or deleted) while we wrote: the points just written may have
        # replaced a newer generation's. Forget this document; the next round redoes it
        # at its new generation once it is ready.
        await services.index.delete_generation(where, doc.id, doc.generation)
        await switch.unmark_migrated(pool, migration.id, doc.id)


async def _vectors(
    pool: Pool, services: Services, target: Live, document_id: uuid.UUID
) -> list[checkpoints.ChunkVector] | None:
    """The document's chunks with the target model's vectors, embedding what the cache
    lacks (stored in the cache, so a resumed migration does not pay twice)."""
    rows = await checkpoints.chunk_vectors(pool, document_id, target.model)
    if not rows:
        return None
    if all(r.vector is not None for r in rows):
        return rows
    embedder = services.embedder_for(target.model)
    found = await checkpoints.texts_to_embed(pool, document_id, target.model)
    todo = list(found.misses.items())
    for start in range(0, len(todo), embedder.max_batch):
        part = todo[start : start + embedder.max_batch]
        vectors = await _embed(embedder, [t for _, t in part])
        async with pool.acquire() as conn:
            items = [(sha, vec) for (sha, _), vec in zip(part, vectors, strict=True)]
            await checkpoints.insert_embeddings(conn, target.model, items)
    rows = await checkpoints.chunk_vectors(pool, document_id, target.model)
    if not rows:
        return None
    if any(r.vector is None for r in rows):  # its chunks changed under us: a reprocess
        raise TransientError(f"document {document_id}: chunks changed while migrating")
    return rows


async def _embed(embedder: Embedder, texts: list[str]) -> list[list[float]]:
    """Embed, retrying the provider's transient faults (5xx, 429, timeouts) with capped
    backoff; after :data:`EMBED_TRIES` the error ends the run (running it again resumes)."""
    for attempt in range(EMBED_TRIES):
        try:
            return await embedder.embed(texts, "search_document")
        except TransientError as exc:
            if attempt == EMBED_TRIES - 1:
                raise
            delay = exc.retry_after_s or min(2.0**attempt, 60.0)
            log.warning("model migration: %s; retrying in %.1f s", exc.message, delay)
            await anyio.sleep(delay)
    raise AssertionError("unreachable")


async def _swap(pool: Pool, migration: Migration) -> bool:
    """Move the alias to the target if every ready document is there; True when swapped
    (now or before)."""
    async with pool.acquire() as conn, conn.transaction():
        locked = await switch.lock_alias(conn)
        if locked.vector_collection == migration.to_collection:
            return True
        if await switch.pending(conn, migration.id, 1):
            return False
        await switch.swap(conn, migration)
        return True


async def _finish(pool: Pool, services: Services, migration: Migration) -> None:
    """After the swap: Qdrant's alias follows, the old collection goes, the row is done."""
    await services.index.point_alias(switch.ALIAS, migration.to_collection)
    if migration.from_collection != migration.to_collection:
        await services.index.drop_vector_collection(migration.from_collection)
    await switch.finish_migration(pool, migration.id)


async def cancel(pool: Pool, services: Services) -> Migration | None:
    """Give up the unfinished migration before its swap: its collection is deleted and
    search never noticed. After the swap there is nothing to cancel (run it to the end)."""
    async with migration_lock(pool):
        found = await open_migration(pool)
        if found is None:
            return None
        if found.state != "building":
            raise ConfigurationError(
                f"the migration to {found.to_model} has swapped already: run migrate-model "
                f"{found.to_model} to delete the old collection"
            )
        await switch.cancel_migration(pool, found.id)
        await services.index.drop_vector_collection(found.to_collection)
        return found
