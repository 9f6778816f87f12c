"""Deleting and reprocessing documents, written once: the CLI, the HTTP API and sync call
these, so every door deletes and reprocesses the same way."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import msgspec

from runtime.api import DocumentRepository, MissingInput, Pool, RaglineError
from stages.db import checkpoints, sources
from stages.pipeline import STAGES
from stages.ports.assets import document_prefix
from stages.ports.http import Reprocessed as Reprocessed
from stages.ports.http import Reprocessing as Reprocessing
from stages.ports.services import Services


class InvalidRequest(RaglineError):
    """The request cannot be carried out as asked."""


class Deleted(msgspec.Struct, frozen=True, kw_only=True):
    deleted: list[uuid.UUID]
    #: Ids asked for that name no document (of the collection, when one is given).
    missing: list[uuid.UUID]


async def reprocess(
    pool: Pool,
    from_stage: str,
    *,
    ids: Sequence[uuid.UUID] = (),
    every: bool = False,
    missing_model: str | None = None,
    collection: str | None = None,
) -> Reprocessing:
    """Run documents again from ``from_stage``: the ``ids``, ``every`` document, or those
    with chunks that have no vector of ``missing_model`` (exactly one of the three), of
    ``collection`` only when given. Each gets a new generation; live jobs of the old one
    are cancelled and the checkpoints of the stages before ``from_stage`` are reused.

    :raises InvalidRequest: an unknown stage, or not exactly one way of choosing.
    """
    if from_stage not in STAGES:
        raise InvalidRequest(f"'from' must be one of {', '.join(STAGES)}, not {from_stage!r}")
    if sum(bool(x) for x in (ids, every, missing_model)) != 1:
        raise InvalidRequest("give document ids, all, or a model (one of them)")
    docs = DocumentRepository(pool)
    if every:
        targets = await docs.all_ids(collection)
    elif missing_model:
        targets = await checkpoints.documents_missing_model(pool, missing_model)
    else:
        targets = list(ids)
    chosen, missing = await _of_collection(docs, targets, collection)
    done = []
    for doc_id in chosen:
        generation = await docs.reprocess(doc_id, from_stage)
        if generation is None:  # deleted meanwhile
            missing.append(doc_id)
        else:
            done.append(Reprocessed(document_id=doc_id, generation=generation))
    return Reprocessing(reprocessing=done, missing=missing)


async def delete(
    pool: Pool, services: Services, ids: Sequence[uuid.UUID], *, collection: str | None = None
) -> Deleted:
    """Delete documents (of ``collection`` only, when given): see :func:`delete_document`."""
    docs = DocumentRepository(pool)
    chosen, missing = await _of_collection(docs, ids, collection)
    deleted = []
    for doc_id in chosen:
        if await delete_document(pool, services, doc_id):
            deleted.append(doc_id)
        else:
            missing.append(doc_id)
    return Deleted(deleted=deleted, missing=missing)


async def delete_document(
    pool: Pool, services: Services, document_id: uuid.UUID, source: sources.Source | None = None
) -> bool:
    """Delete one document everywhere; False when there is none (of ``source``).

    First its workers are stopped (a new generation with no job), then what lives outside
    PostgreSQL goes (its points in every model's vector collection, its stored objects),
    and its rows last: killed midway, the document is still there to delete again, and
    nothing is left behind that no row names. A document of a ``source`` (a file deleted
    from it) leaves a tombstone for ``status``.
    """
    docs = DocumentRepository(pool)
    if source is None:
        stopped = await docs.retire(document_id)
    else:
        stopped = await sources.retire(pool, source, document_id)
    if not stopped:
        return False
    await delete_points(services, document_id)
    await services.assets.delete_prefix(document_prefix(document_id))
    if source is None:
        await docs.delete([document_id])
    else:
        await sources.bury(pool, source, document_id)
    return True


async def delete_points(services: Services, document_id: uuid.UUID) -> None:
    """Remove a document's points from every vector collection (every model's)."""
    for vector_collection in await services.index.vector_collections():
        try:
            await services.index.delete_document(vector_collection, document_id)
        except MissingInput:
            continue


async def _of_collection(
    docs: DocumentRepository, ids: Sequence[uuid.UUID], collection: str | None
) -> tuple[list[uuid.UUID], list[uuid.UUID]]:
    """``ids`` split into those of existing documents (of ``collection``, when given) and
    the others, each in the order asked."""
    found = {d.id for d in await docs.get_many(ids) if collection in (None, d.collection)}
    return [i for i in ids if i in found], [i for i in ids if i not in found]
