"""The JSON API under ``/v1``: documents, retry, reprocess, search, stages.

Documents carry the names ``status --json`` uses (``id``, ``filename``, ``status``,
``stage``, ...); search hits the fields of ``search --json``.
"""

from __future__ import annotations

import base64
import binascii
import uuid
from datetime import datetime
from typing import Annotated, Any

import msgspec
from litestar import Controller, Request, Response, delete, get, post
from litestar.datastructures import State
from litestar.params import Parameter

from runtime.api import (
    ConfigurationError,
    Document,
    DocumentRepository,
    JobRow,
    MissingInput,
    ProviderState,
    retry_failed_jobs,
    stage_table,
    timeline,
)
from stages.actions import documents
from stages.actions.documents import Reprocessing
from stages.actions.search import search_live
from stages.db import model_switch
from stages.db import serve as serve_db
from stages.ports.collections import check_collection_name
from stages.serve import uploads
from stages.serve.context import ServeContext, document_id
from stages.serve.problems import problem

STATUSES = ("pending", "processing", "ready", "failed")
MAX_PAGE = 500
MAX_K = 100


class DocumentOut(msgspec.Struct, kw_only=True):
    id: uuid.UUID
    filename: str
    status: str
    stage: str | None
    error: str | None
    generation: int
    byte_size: int
    sha256: str
    created_at: datetime
    updated_at: datetime
    url: str

    @classmethod
    def of(cls, d: Document) -> DocumentOut:
        return cls(
            id=d.id,
            filename=d.filename,
            status=str(d.status),
            stage=d.stage,
            error=d.error,
            generation=d.generation,
            byte_size=d.byte_size,
            sha256=d.sha256,
            created_at=d.created_at,
            updated_at=d.updated_at,
            url=f"/v1/documents/{d.id}",
        )


class DocumentPage(msgspec.Struct, kw_only=True):
    documents: list[DocumentOut]
    #: Pass as ``cursor`` for the next page; null on the last one.
    next_cursor: str | None


class Counts(msgspec.Struct, kw_only=True):
    pages: int
    images: int
    described_images: int
    chunks: int
    #: Points in the vector index (null when the index could not be asked).
    points: int | None


class DocumentDetail(DocumentOut, kw_only=True):
    #: Every job of every generation, oldest first: the stage timeline with attempts.
    jobs: list[JobRow]
    #: Why a live document is not done yet (one line), else null.
    waiting: str | None
    counts: Counts


class Accepted(msgspec.Struct, kw_only=True):
    id: uuid.UUID
    created: bool
    status_url: str


class ReprocessRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    from_: str = msgspec.field(name="from")
    ids: list[uuid.UUID] | None = None
    all: bool = False
    model: str | None = None
    #: Only documents of this collection (ids of others count as missing).
    collection: str | None = None


class Requeued(msgspec.Struct, kw_only=True):
    document_id: uuid.UUID
    stage: str


class StageOut(msgspec.Struct, kw_only=True):
    stage: str
    queued: int
    backing_off: int
    running: int
    failed: int
    oldest_queued_s: float
    oldest_running_s: float
    workers: int
    #: The providers this stage's jobs call, with their circuits (as in `status --json`).
    providers: list[ProviderState] = msgspec.field(default_factory=list)


def ctx_of(state: State) -> ServeContext:
    ctx: ServeContext = state.ctx
    return ctx


def encode_cursor(d: DocumentOut) -> str:
    raw = f"{d.created_at.isoformat()}|{d.id}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, uuid.UUID]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        at, _, doc = raw.partition("|")
        return datetime.fromisoformat(at), uuid.UUID(doc)
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise problem(400, "cursor is not one this API returned") from None


async def query_documents(
    ctx: ServeContext, status: str | None, stage: str | None, limit: int, cursor: str | None
) -> DocumentPage:
    if status is not None and status not in STATUSES:
        raise problem(400, f"status must be one of {', '.join(STATUSES)}")
    if stage is not None and stage not in ctx.stage_names:
        raise problem(400, f"stage must be one of {', '.join(ctx.stage_names)}")
    after = decode_cursor(cursor) if cursor else None
    found = await serve_db.documents_page(
        ctx.pool, status=status, stage=stage, after=after, limit=limit + 1
    )
    docs = [DocumentOut.of(d) for d in found[:limit]]
    more = len(found) > limit
    return DocumentPage(documents=docs, next_cursor=encode_cursor(docs[-1]) if more else None)


async def document_detail(ctx: ServeContext, doc_id: uuid.UUID) -> DocumentDetail:
    t = await timeline(ctx.pool, doc_id)
    if t is None:
        raise problem(404, f"no document {doc_id}")
    found = await serve_db.document_counts(ctx.pool, doc_id, t.document.generation)
    counts = Counts(points=await _points(ctx, doc_id), **msgspec.structs.asdict(found))
    base = msgspec.structs.asdict(DocumentOut.of(t.document))
    return DocumentDetail(**base, jobs=t.jobs, waiting=t.waiting, counts=counts)


async def _points(ctx: ServeContext, doc_id: uuid.UUID) -> int | None:
    services = ctx.services
    try:
        live = await model_switch.live(ctx.pool, services)
        return await services.index.count(live.vector_collection, doc_id)
    except MissingInput:  # nothing indexed with this model yet
        return 0
    except Exception:  # the index is another service: its outage must not hide the rest
        return None


async def run_reprocess(ctx: ServeContext, body: ReprocessRequest) -> Reprocessing:
    tenant = None if body.collection is None else checked_collection(body.collection)
    try:
        return await documents.reprocess(
            ctx.pool,
            body.from_,
            ids=body.ids or (),
            every=body.all,
            missing_model=body.model,
            collection=tenant,
        )
    except documents.InvalidRequest as exc:
        raise problem(400, exc.message) from None


async def run_search(
    ctx: ServeContext, q: str, k: int, collection: str | None = None
) -> list[dict[str, Any]]:
    if not q.strip():
        raise problem(400, "q must not be empty")
    tenant = None if collection is None else checked_collection(collection)
    _, hits = await search_live(ctx.pool, ctx.services, q, k, tenant)
    return [{"score": round(h.score, 4), **h.payload} for h in hits]


def checked_collection(name: str) -> str:
    """A valid collection name, or a 400 naming the rule."""
    try:
        return check_collection_name(name)
    except ConfigurationError as exc:
        raise problem(400, exc.message) from None


async def stages_overview(ctx: ServeContext) -> list[StageOut]:
    rows = await stage_table(ctx.pool, ctx.stage_names)
    return [StageOut(**msgspec.structs.asdict(r)) for r in rows]


class DocumentsApi(Controller):
    path = "/v1"
    tags = ["documents"]  # noqa: RUF012 (litestar reads it as a class attribute)

    @post("/documents", status_code=202, request_max_body_size=None)
    async def upload(
        self,
        state: State,
        request: Request[Any, Any, Any],
        idempotency_key: Annotated[str | None, Parameter(header="Idempotency-Key")] = None,
        collection: str | None = None,
    ) -> Response[Accepted]:
        """Upload a PDF: multipart (field ``file``) or a raw body (name in
        Content-Disposition), into ``collection`` (query parameter or multipart field;
        default ``default``). 202 for a new document, 200 when the same bytes (or the
        same Idempotency-Key) were already there."""
        ctx = ctx_of(state)
        key = uploads.check_idempotency_key(idempotency_key)
        headers = {k.lower(): v for k, v in request.headers.items()}
        spooled = await uploads.receive(
            request.stream(), headers, ctx.config.upload_dir, ctx.config.max_upload_bytes
        )
        try:
            tenant = checked_collection(collection or spooled.collection or "default")
            stored = await uploads.store(ctx.pool, ctx.services.assets, spooled, key, tenant)
        finally:
            spooled.path.unlink(missing_ok=True)
        url = f"/v1/documents/{stored.document_id}"
        body = Accepted(id=stored.document_id, created=stored.created, status_url=url)
        return Response(body, status_code=202 if stored.created else 200, headers={"Location": url})

    @get("/documents")
    async def documents(
        self,
        state: State,
        status: str | None = None,
        stage: str | None = None,
        limit: Annotated[int, Parameter(ge=1, le=MAX_PAGE)] = 50,
        cursor: str | None = None,
    ) -> DocumentPage:
        """Documents, newest first; filter by status and stage; cursor pagination."""
        return await query_documents(ctx_of(state), status, stage, limit, cursor)

    @get("/documents/{doc:str}")
    async def get_document(self, state: State, doc: str) -> DocumentDetail:
        """A document: status, stage timeline with attempts and errors, counts, why it waits."""
        return await document_detail(ctx_of(state), document_id(doc))

    @delete("/documents/{doc:str}", status_code=204)
    async def delete_document(self, state: State, doc: str) -> None:
        """Delete a document: rows, stored files, vector points."""
        doc_id = document_id(doc)
        ctx = ctx_of(state)
        if not await documents.delete_document(ctx.pool, ctx.services, doc_id):
            raise problem(404, f"no document {doc_id}")

    @post("/documents/{doc:str}/retry", status_code=200)
    async def retry(self, state: State, doc: str) -> list[Requeued]:
        """Requeue a failed document at the stage that failed (a fresh attempt budget)."""
        ctx = ctx_of(state)
        doc_id = document_id(doc)
        if await DocumentRepository(ctx.pool).get(doc_id) is None:
            raise problem(404, f"no document {doc_id}")
        requeued = await retry_failed_jobs(ctx.pool, [doc_id])
        if not requeued:
            raise problem(409, f"document {doc_id} has no failed job to retry")
        return [Requeued(document_id=d, stage=s) for d, s in requeued]

    @post("/reprocess", status_code=202)
    async def reprocess(self, state: State, data: ReprocessRequest) -> Reprocessing:
        """Run documents again from a stage: ``from`` plus ``ids``, ``all`` or ``model``
        (only ``collection``'s documents when given)."""
        return await run_reprocess(ctx_of(state), data)

    @get("/search")
    async def search(
        self,
        state: State,
        q: str,
        k: Annotated[int, Parameter(ge=1, le=MAX_K)] = 5,
        collection: str | None = None,
    ) -> list[dict[str, Any]]:
        """The closest chunks to ``q``: score, document_id, filename, pages, text (only
        ``collection``'s when given)."""
        return await run_search(ctx_of(state), q, k, collection)

    @get("/stages")
    async def stages(self, state: State) -> list[StageOut]:
        """Per stage: queue depth, backing off, running, failed, oldest ages, live workers."""
        return await stages_overview(ctx_of(state))
