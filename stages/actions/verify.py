"""Reconcile PostgreSQL's belief with the vector index and the asset store.

Per ready document: every chunk has exactly one point of the current generation (missing,
extra and stale points are reported) and the original and the images are stored. Failed,
pending and vanished documents' points, and other models' vector collections, are checked
too. ``repair`` enqueues the jobs that fix a document (index, or parse when stored files
are gone) and deletes the points no job would. The rules in full (model switches, one
collection): docs/architecture.md, "Side effects outside PostgreSQL".
"""

from __future__ import annotations

import uuid
from collections import defaultdict

import msgspec

from runtime.api import Document, DocumentRepository, DocumentStatus, MissingInput, Pool
from stages.actions.documents import delete_points
from stages.db import checkpoints
from stages.ports.services import Services
from stages.ports.vector_index import PointRef, point_id


class Problem(msgspec.Struct, kw_only=True):
    document_id: str
    filename: str = ""
    missing_points: int = 0
    extra_points: int = 0
    stale_points: int = 0
    missing_files: list[str] = msgspec.field(default_factory=list)
    orphan: bool = False
    #: Other models' collections holding points of this document.
    other_collections: list[str] = msgspec.field(default_factory=list)
    #: The document failed, yet these points of it are searchable.
    failed_points: int = 0
    status: str = ""
    repair: str | None = None


class StoreProblem(msgspec.Struct, kw_only=True):
    """Something in the asset store that no document accounts for."""

    #: An object key, or a path relative to the store's root for a leftover.
    path: str
    #: "orphan object" (no document has it), "temporary file", "empty directory".
    kind: str
    age_s: float
    #: Younger than the grace period: may be a write in flight. Reported, but it does not
    #: make the report unclean, and ``repair`` leaves it alone.
    recent: bool = False
    repair: str | None = None


class Report(msgspec.Struct, kw_only=True):
    documents: int
    points: int
    problems: list[Problem]
    store: list[StoreProblem] = msgspec.field(default_factory=list)
    #: The live vector collection that was checked.
    vector_collection: str = ""
    #: The collection (tenant) checked; None: every one.
    collection: str | None = None

    @property
    def clean(self) -> bool:
        return not self.problems and not self.settled_store

    @property
    def settled_store(self) -> list[StoreProblem]:
        return [p for p in self.store if not p.recent]


#: ``repair`` leaves younger orphans and leftovers alone: a submit in flight has stored
#: its original but not yet committed its row, a write in flight has a temporary file.
ORPHAN_GRACE_S = 600.0


async def scan_index(
    services: Services, collection: str | None = None, tenant: str | None = None
) -> dict[str, list[PointRef]]:
    try:
        refs = await services.index.scan(collection or services.vector_collection, tenant=tenant)
    except MissingInput:  # nothing was ever indexed with this model
        return {}
    by_doc: dict[str, list[PointRef]] = defaultdict(list)
    for ref in refs:
        by_doc[ref.document_id].append(ref)
    return by_doc


async def scan_others(
    services: Services, current: str, skip: set[str], tenant: str | None
) -> dict[str, dict[str, list[PointRef]]]:
    """``{collection: {document: points}}`` for every collection but the current one
    (and ``skip``: a building migration's)."""
    names = [c for c in await services.index.vector_collections() if c != current and c not in skip]
    return {name: await scan_index(services, name, tenant) for name in names}


async def check_points(pool: Pool, doc: Document, refs: list[PointRef], problem: Problem) -> None:
    chunks = await checkpoints.chunks(pool, doc.id)
    expected = {point_id(doc.id, c.ordinal) for c in chunks}
    found = {r.id for r in refs}
    problem.missing_points = len(expected - found)
    problem.extra_points = len(found - expected)
    problem.stale_points = sum(1 for r in refs if r.generation != doc.generation)


async def check_files(pool: Pool, services: Services, doc: Document, problem: Problem) -> None:
    keys = [doc.asset_key] if doc.asset_key else []
    keys += [a.object_key for a in await checkpoints.assets(pool, doc.id)]
    for key in keys:
        if not await services.assets.exists(key):
            problem.missing_files.append(key)


def check_unready(doc: Document, refs: list[PointRef], problem: Problem) -> None:
    """Points of a document that is not ready: none may be searchable once it failed;
    while it is pending or processing, older generations serve until index replaces
    them, but none may be newer than the document (a zombie's write)."""
    if doc.status == DocumentStatus.FAILED:
        problem.failed_points = len(refs)
    else:
        problem.stale_points = sum(1 for r in refs if r.generation > doc.generation)


def has_problem(p: Problem) -> bool:
    return bool(
        p.missing_points
        or p.extra_points
        or p.stale_points
        or p.missing_files
        or p.orphan
        or p.other_collections
        or p.failed_points
    )


async def verify(pool: Pool, services: Services, tenant: str | None = None) -> Report:
    from stages.db import model_switch

    current = (await model_switch.live(pool, services)).vector_collection
    migration = await model_switch.open_migration(pool)
    building = {migration.to_collection} if migration is not None else set()
    by_doc = await scan_index(services, current, tenant)
    others = await scan_others(services, current, building, tenant)
    docs = DocumentRepository(pool)
    problems: list[Problem] = []
    ids = await docs.all_ids(tenant)
    for doc in await docs.get_many(ids):
        problem = Problem(document_id=str(doc.id), filename=doc.filename, status=doc.status)
        await check_files(pool, services, doc, problem)
        refs = by_doc.get(str(doc.id), [])
        if doc.status == DocumentStatus.READY:
            await check_points(pool, doc, refs, problem)
        else:
            check_unready(doc, refs, problem)
        problem.other_collections = [c for c, found in others.items() if str(doc.id) in found]
        if has_problem(problem):
            problems.append(problem)
    known = {str(i) for i in ids}
    orphans: dict[str, Problem] = {}
    for collection, found in [(current, by_doc), *others.items()]:
        for d, refs in found.items():
            if d not in known:
                p = orphans.setdefault(d, Problem(document_id=d, orphan=True))
                p.extra_points += len(refs)
                if collection != current:
                    p.other_collections.append(collection)
    problems += orphans.values()
    points = sum(len(r) for found in [by_doc, *others.values()] for r in found.values())
    return Report(
        documents=len(ids),
        points=points,
        problems=problems,
        store=[] if tenant is not None else await check_store(services, await docs.get_many(ids)),
        vector_collection=current,
        collection=tenant,
    )


async def check_store(services: Services, docs: list[Document]) -> list[StoreProblem]:
    """Objects under ``documents/`` that belong to no document, or are an original other
    than the document's own; temporary files and empty directories."""
    assets = services.assets
    originals = {str(d.id): d.asset_key for d in docs}
    found: list[StoreProblem] = []
    for key in await assets.list("documents/"):
        doc_id, _, rest = key.removeprefix("documents/").partition("/")
        own = originals.get(doc_id, "")
        if doc_id not in originals or (rest.startswith("original-") and key != own):
            age = await _age_s(services, key)
            found.append(StoreProblem(path=key, kind="orphan object", age_s=age))
    found += [
        StoreProblem(path=left.path, kind=left.kind, age_s=left.age_s)
        for left in await assets.leftovers()
    ]
    for p in found:
        p.recent = p.age_s < ORPHAN_GRACE_S
    return found


async def _age_s(services: Services, key: str) -> float:
    try:
        return await services.assets.age_s(key)
    except MissingInput:  # deleted since it was listed
        return 0.0


async def _delete_orphan(services: Services, key: str, known: set[str]) -> None:
    doc_id = key.removeprefix("documents/").partition("/")[0]
    if doc_id in known:
        await services.assets.delete(key)  # a stray original of a live document
    else:  # the whole prefix, so no empty directory is left behind
        await services.assets.delete_prefix(f"documents/{doc_id}/")


async def repair_store(services: Services, report: Report, grace_s: float, known: set[str]) -> None:
    """Delete orphan objects and leftovers older than ``grace_s``."""
    for p in report.store:
        if p.age_s < grace_s:
            p.repair = f"left alone: younger than {grace_s:.0f} s (may be a write in flight)"
        elif p.kind == "orphan object":
            await _delete_orphan(services, p.path, known)
            p.repair = "deleted"
    await services.assets.remove_leftovers(grace_s)
    remaining = {left.path for left in await services.assets.leftovers()}
    for p in report.store:
        if p.repair is None:
            p.repair = "could not remove" if p.path in remaining else "removed"


async def repair(
    pool: Pool, services: Services, report: Report, grace_s: float = ORPHAN_GRACE_S
) -> None:
    docs = DocumentRepository(pool)
    await repair_store(services, report, grace_s, {str(i) for i in await docs.all_ids()})
    for p in report.problems:
        doc_id = uuid.UUID(p.document_id)
        deleted = await _delete_unwanted(services, p, doc_id, report.vector_collection)
        if p.orphan:
            continue
        if p.missing_files:
            p.repair = await _reparse(docs, doc_id, p)
        elif p.status == DocumentStatus.READY and (
            p.missing_points or p.extra_points or p.stale_points
        ):
            await docs.reprocess(doc_id, "index")
            p.repair = "reprocess from index"
        elif p.stale_points:
            p.repair = "none needed: its index job replaces every other generation's points"
        else:
            p.repair = deleted


async def _delete_unwanted(
    services: Services, p: Problem, doc_id: uuid.UUID, current: str
) -> str | None:
    """Delete points no job would remove: an orphan's, a failed document's, and those in
    other models' collections."""
    if p.orphan:
        await delete_points(services, doc_id)
        p.repair = "deleted orphan points"
        return p.repair
    done = []
    for collection in p.other_collections:
        await services.index.delete_document(collection, doc_id)
        done.append("deleted points in other models' collections")
    if p.failed_points:
        await services.index.delete_document(current or services.vector_collection, doc_id)
        done.append("deleted the failed document's points")
    return "; ".join(done) or None


async def _reparse(docs: DocumentRepository, doc_id: uuid.UUID, p: Problem) -> str:
    original = await docs.get(doc_id)
    if original is None or not original.asset_key or original.asset_key in p.missing_files:
        return "cannot repair: the original is gone; delete and submit it again"
    await docs.reprocess(doc_id, "parse")
    return "reprocess from parse"
