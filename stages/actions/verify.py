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
from collections.abc import Sequence
from datetime import datetime

import msgspec

from runtime.api import Document, DocumentRepository, DocumentStatus, MissingInput, Pool
from stages.actions.documents import delete_points
from stages.db import checkpoints
from stages.ports.services import Services
from stages.ports.vector_index import PointRef, point_ids


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


#: Documents per page of the walk: a page's documents, chunks and points are what verify
#: holds in memory, so its peak stays flat however many documents there are.
PAGE = 1000


async def scan_index(
    services: Services, collection: str | None = None, tenant: str | None = None
) -> dict[str, list[PointRef]]:
    """Every point of a vector collection (of one tenant), by document: the whole index in
    memory (the chaos harness's view; verify reads a page of documents at a time)."""
    return await _scan(services, collection or services.vector_collection, tenant, None)


async def _scan(
    services: Services,
    collection: str,
    tenant: str | None,
    documents: Sequence[uuid.UUID] | None,
) -> dict[str, list[PointRef]]:
    try:
        refs = await services.index.scan(collection, tenant=tenant, documents=documents)
    except MissingInput:  # nothing was ever indexed with this model
        return {}
    by_doc: dict[str, list[PointRef]] = defaultdict(list)
    for ref in refs:
        by_doc[ref.document_id].append(ref)
    return by_doc


def check_points(
    doc: Document, ordinals: list[int], refs: list[PointRef], problem: Problem
) -> None:
    expected = set(point_ids(doc.id, ordinals))
    found = {r.id for r in refs}
    problem.missing_points = len(expected - found)
    problem.extra_points = len(found - expected)
    problem.stale_points = sum(1 for r in refs if r.generation != doc.generation)


async def check_files(
    services: Services, doc: Document, images: list[str], problem: Problem
) -> None:
    keys = [doc.asset_key] if doc.asset_key else []
    for key in keys + images:
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


class Walk(msgspec.Struct, kw_only=True):
    """What verify compares a page of documents against, and what it has found so far."""

    current: str
    #: Other models' vector collections (not a building migration's).
    others: list[str]
    tenant: str | None
    report: Report
    #: Points found per vector collection, summed over the pages: equal to the
    #: collection's count when no point belongs to a document the walk did not see.
    seen: dict[str, int] = msgspec.field(default_factory=dict)


async def verify(pool: Pool, services: Services, tenant: str | None = None) -> Report:
    """Walk the documents a page at a time (keyset on (created_at, id)); per page, read its
    chunks, images and points (the index scanned for those documents only), so memory
    stays flat and time linear. Points of documents that do not exist are looked for only
    when a collection holds more points than the walk found."""
    walk = await _start(pool, services, tenant)
    docs = DocumentRepository(pool)
    after: tuple[datetime, uuid.UUID] | None = None
    while page := await docs.page_after(tenant, after, PAGE):
        await check_page(pool, services, page, walk)
        after = (page[-1].created_at, page[-1].id)
    walk.report.problems += await find_orphans(pool, services, walk)
    if tenant is None:
        walk.report.store = await check_store(pool, services)
    return walk.report


async def _start(pool: Pool, services: Services, tenant: str | None) -> Walk:
    from stages.db import model_switch

    current = (await model_switch.live(pool, services)).vector_collection
    migration = await model_switch.open_migration(pool)
    skip = {current} | ({migration.to_collection} if migration is not None else set())
    others = [c for c in await services.index.vector_collections() if c not in skip]
    report = Report(
        documents=0, points=0, problems=[], vector_collection=current, collection=tenant
    )
    return Walk(current=current, others=others, tenant=tenant, report=report)


async def check_page(pool: Pool, services: Services, page: list[Document], walk: Walk) -> None:
    ids = [d.id for d in page]
    found = {c: await _scan(services, c, walk.tenant, ids) for c in [walk.current, *walk.others]}
    for collection, by_doc in found.items():
        points = sum(len(refs) for refs in by_doc.values())
        walk.seen[collection] = walk.seen.get(collection, 0) + points
        walk.report.points += points
    ordinals = await checkpoints.chunk_ordinals_of(pool, ids)
    images = await checkpoints.asset_keys_of(pool, ids)
    for doc in page:
        problem = Problem(document_id=str(doc.id), filename=doc.filename, status=doc.status)
        await check_files(services, doc, images.get(doc.id, []), problem)
        refs = found[walk.current].get(str(doc.id), [])
        if doc.status == DocumentStatus.READY:
            check_points(doc, ordinals.get(doc.id, []), refs, problem)
        else:
            check_unready(doc, refs, problem)
        problem.other_collections = [c for c in walk.others if str(doc.id) in found[c]]
        if has_problem(problem):
            walk.report.problems.append(problem)
    walk.report.documents += len(page)


async def find_orphans(pool: Pool, services: Services, walk: Walk) -> list[Problem]:
    """Points whose document does not exist. A collection whose count equals the points
    the walk found has none, and is not read again; one of a tenant cannot be counted (a
    count is per collection), so it is scanned."""
    orphans: dict[str, Problem] = {}
    for collection in [walk.current, *walk.others]:
        seen = walk.seen.get(collection, 0)
        if walk.tenant is None and await _count(services, collection) == seen:
            continue
        by_doc = await _scan(services, collection, walk.tenant, None)
        known = await _existing(pool, list(by_doc))
        for d, refs in by_doc.items():
            if d in known:
                continue
            p = orphans.setdefault(d, Problem(document_id=d, orphan=True))
            p.extra_points += len(refs)
            walk.report.points += len(refs)
            if collection != walk.current:
                p.other_collections.append(collection)
    return list(orphans.values())


async def _count(services: Services, collection: str) -> int:
    try:
        return await services.index.count(collection)
    except MissingInput:
        return 0


async def _existing(pool: Pool, documents: list[str]) -> set[str]:
    """Which of these document ids (as strings) are documents, asked a page at a time."""
    docs, known = DocumentRepository(pool), set()
    for first in range(0, len(documents), PAGE):
        ids = [_uuid(d) for d in documents[first : first + PAGE]]
        known |= {str(i) for i in await docs.existing([i for i in ids if i is not None])}
    return known


def _uuid(text: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(text)
    except ValueError:
        return None


async def check_store(pool: Pool, services: Services) -> list[StoreProblem]:
    """Objects under ``documents/`` that belong to no document, or are an original other
    than the document's own; temporary files and empty directories. The listing's keys
    are matched to their documents a page at a time."""
    keys = await services.assets.list("documents/")
    found: list[StoreProblem] = []
    for first in range(0, len(keys), PAGE):
        found += await _stray_objects(pool, services, keys[first : first + PAGE])
    found += [
        StoreProblem(path=left.path, kind=left.kind, age_s=left.age_s)
        for left in await services.assets.leftovers()
    ]
    for p in found:
        p.recent = p.age_s < ORPHAN_GRACE_S
    return found


async def _stray_objects(pool: Pool, services: Services, keys: list[str]) -> list[StoreProblem]:
    ids = {k.removeprefix("documents/").partition("/")[0] for k in keys}
    wanted = [i for i in (_uuid(d) for d in ids) if i is not None]
    originals = {str(d.id): d.asset_key for d in await DocumentRepository(pool).get_many(wanted)}
    found = []
    for key in keys:
        doc_id, _, rest = key.removeprefix("documents/").partition("/")
        own = originals.get(doc_id, "")
        if doc_id not in originals or (rest.startswith("original-") and key != own):
            age = await _age_s(services, key)
            found.append(StoreProblem(path=key, kind="orphan object", age_s=age))
    return found


async def _age_s(services: Services, key: str) -> float:
    try:
        return await services.assets.age_s(key)
    except MissingInput:  # deleted since it was listed
        return 0.0


def _document_of(key: str) -> str:
    return key.removeprefix("documents/").partition("/")[0]


async def _delete_orphan(services: Services, key: str, known: set[str]) -> None:
    doc_id = _document_of(key)
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
    strays = [d for p in report.store if (d := _uuid(_document_of(p.path))) is not None]
    await repair_store(services, report, grace_s, {str(i) for i in await docs.existing(strays)})
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
