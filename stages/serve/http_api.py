"""The JSON API under ``/v1``: documents, retry, reprocess, search, stages.

Documents carry the names ``status --json`` uses (``id``, ``filename``, ``status``,
``stage``, ...); search hits the fields of ``search --json``, and search takes the
filters of ``search``'s options, by the same names. Every route answers a caller with
principals only about documents it may read (:mod:`stages.serve.access`).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any

import msgspec
from litestar import Controller, Request, Response, delete, get, post
from litestar.datastructures import State
from litestar.di import Provide
from litestar.openapi.datastructures import ResponseSpec
from litestar.openapi.spec import (
    OpenAPIFormat,
    OpenAPIMediaType,
    OpenAPIType,
    Operation,
    RequestBody,
    Schema,
)
from litestar.openapi.spec import Parameter as ParameterSpec
from litestar.params import Parameter

from runtime.api import (
    ConfigurationError,
    DocumentRepository,
    MissingInput,
    annotate,
    document_span,
    retry_failed_jobs,
)
from stages.actions import browse, documents
from stages.actions.browse import STATUSES as STATUSES
from stages.actions.browse import encode_cursor as encode_cursor
from stages.actions.search import MODES, PAGES, Filters, ask, filters_of_words
from stages.actions.search import NO_WORDS as NO_WORDS
from stages.actions.search import SearchWords as SearchWords
from stages.pipeline import STAGES
from stages.ports.collections import check_collection_name
from stages.ports.http import Accepted as Accepted
from stages.ports.http import Answer as Answer
from stages.ports.http import Counts as Counts
from stages.ports.http import DocumentDetail as DocumentDetail
from stages.ports.http import DocumentOut as DocumentOut
from stages.ports.http import DocumentPage as DocumentPage
from stages.ports.http import Reprocessing as Reprocessing
from stages.ports.http import Requeued as Requeued
from stages.ports.http import StageOut as StageOut
from stages.serve import access, uploads
from stages.serve.auth import Caller, caller_of
from stages.serve.context import ServeContext, document_id
from stages.serve.problems import problem, problems

MAX_PAGE = 500
MAX_K = 100
#: A collection name as ``check_collection_name`` takes it (the OpenAPI schema's pattern).
COLLECTION = "^[a-z0-9][a-z0-9_-]{0,62}$"


class ReprocessRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    #: The stage to run again from (the schema's enum; the action checks it, saying so).
    from_: Annotated[str, msgspec.Meta(extra_json_schema={"extra": {"enum": list(STAGES)}})] = (
        msgspec.field(name="from")
    )
    ids: list[uuid.UUID] | None = None
    all: bool = False
    model: str | None = None
    #: Only documents of this collection (ids of others count as missing).
    collection: (
        Annotated[str, msgspec.Meta(extra_json_schema={"extra": {"pattern": COLLECTION}})] | None
    ) = None


def ctx_of(state: State) -> ServeContext:
    ctx: ServeContext = state.ctx
    return ctx


def decode_cursor(cursor: str) -> tuple[datetime, uuid.UUID]:
    """The (created_at, id) a cursor names; 400 for anything the API would not have
    written (:func:`browse.decode_cursor`)."""
    try:
        return browse.decode_cursor(cursor)
    except documents.InvalidRequest as exc:
        raise problem(400, exc.message) from None


async def query_documents(
    ctx: ServeContext,
    caller: Caller,
    status: str | None,
    stage: str | None,
    limit: int,
    cursor: str | None,
) -> DocumentPage:
    try:
        return await browse.documents_page(
            ctx.pool,
            ctx.stage_names,
            status=status,
            stage=stage,
            limit=limit,
            cursor=cursor,
            principals=caller.principals,
        )
    except documents.InvalidRequest as exc:
        raise problem(400, exc.message) from None


async def document_detail(ctx: ServeContext, caller: Caller, doc_id: uuid.UUID) -> DocumentDetail:
    await readable(ctx, caller, doc_id)
    found = await browse.document_detail(ctx.pool, ctx.services, doc_id)
    if found is None:
        raise problem(404, f"no document {doc_id}")
    return found


async def readable(ctx: ServeContext, caller: Caller, doc_id: uuid.UUID) -> None:
    """404 for a document the caller may not read: the answer a missing one gets."""
    if not await access.may_read(ctx.pool, caller, doc_id):
        raise problem(404, f"no document {doc_id}")


async def run_reprocess(ctx: ServeContext, caller: Caller, body: ReprocessRequest) -> Reprocessing:
    """Reprocess as asked; a caller with principals only by ids, and the documents it may
    not read count as missing."""
    tenant = None if body.collection is None else checked_collection(body.collection)
    ids, hidden = list(body.ids or ()), []
    if caller.restricted:
        if body.all or body.model:
            raise problem(403, "a token with principals reprocesses documents by id only")
        unseen = await access.hidden(ctx.pool, caller, ids)
        ids, hidden = [d for d in ids if d not in unseen], [d for d in ids if d in unseen]
        if hidden and not ids:  # nothing it may touch: all of them missing, to it
            if body.from_ not in STAGES:
                raise problem(400, f"'from' must be one of {', '.join(STAGES)}")
            return Reprocessing(reprocessing=[], missing=hidden)
    try:
        done = await documents.reprocess(
            ctx.pool,
            body.from_,
            ids=ids,
            every=body.all,
            missing_model=body.model,
            collection=tenant,
        )
    except documents.InvalidRequest as exc:
        raise problem(400, exc.message) from None
    if not hidden:
        return done
    return Reprocessing(reprocessing=done.reprocessing, missing=[*done.missing, *hidden])


_UUID = Schema(type=OpenAPIType.STRING, format=OpenAPIFormat.UUID)


#: What the upload's ``readers`` and ``meta`` take (query parameters or multipart fields).
READERS = (
    "Who may read the document: principals, comma-separated (`*`: every caller). "
    "Not given: every caller, or for a token with principals, its principals."
)
META = "The document's metadata: `KEY=VALUE` (repeat)."
#: Who is refused a reprocess.
REPROCESS_403 = (
    "a browser's write from another origin or without the CSRF token, or `all` or `model` "
    "asked by a token with principals"
)


def search_words(
    document: Annotated[
        list[str] | None,
        Parameter(description="Only this document (repeat)", schema_extra={"items": _UUID}),
    ] = None,
    source: Annotated[
        str | None,
        Parameter(description="Only documents of this sync source (its folder or s3://…)"),
    ] = None,
    path: Annotated[
        str | None,
        Parameter(
            description="Only documents whose path in their source (or whose file name) "
            "starts with this"
        ),
    ] = None,
    media_type: Annotated[
        list[str] | None,
        Parameter(
            query="type",
            description="Only documents of this media type, e.g. application/pdf (repeat)",
        ),
    ] = None,
    since: Annotated[
        str | None,
        Parameter(
            description="Only documents dated from this day or time (ISO; UTC without a "
            "zone; the file's modification time, else when it was submitted)"
        ),
    ] = None,
    until: Annotated[
        str | None, Parameter(description="Only documents dated before this day or time")
    ] = None,
    meta: Annotated[
        list[str] | None,
        Parameter(
            description="Only documents whose metadata has this value: KEY=VALUE "
            "(repeat: all must hold)"
        ),
    ] = None,
    pages: Annotated[
        str | None,
        Parameter(
            description="Only chunks on these pages: 7, 3-9, 3- or -9",
            schema_extra={"pattern": PAGES},
        ),
    ] = None,
    section: Annotated[
        str | None,
        Parameter(description="Only chunks of a section whose label starts with this"),
    ] = None,
) -> SearchWords:
    """Search's filter parameters (the API's and the web view's search page)."""
    return SearchWords(
        document=tuple(document or ()),
        source=source,
        path=path,
        type=tuple(media_type or ()),
        since=since,
        until=until,
        meta=tuple(meta or ()),
        pages=pages,
        section=section,
    )


def search_filters(words: SearchWords) -> Filters:
    """:class:`Filters` from the query's words, or a 400 with the one line saying which
    is wrong."""
    try:
        return filters_of_words(words)
    except ConfigurationError as exc:
        raise problem(400, exc.message) from None


async def run_search(
    ctx: ServeContext,
    caller: Caller,
    q: str,
    k: int,
    collection: str | None = None,
    mode: str = MODES[0],
    words: SearchWords = NO_WORDS,
) -> list[Answer]:
    if not q.strip():
        raise problem(400, "q must not be empty")
    try:
        found = await ask(
            ctx.pool,
            ctx.services,
            q,
            k,
            mode=mode,
            collection=collection,
            words=words,
            principals=caller.principals,
        )
    except ConfigurationError as exc:
        raise problem(400, exc.message) from None
    except MissingInput as exc:  # a vector collection without the keyword side
        raise problem(409, exc.message) from None
    return found.hits


def upload_collection(given: str | None, field: str | None) -> str:
    """The collection of an upload: ``?collection=`` (checked already), the multipart
    field ``collection`` or ``default``. A bad field is a 400 even beside a good query
    parameter, and so are the two naming different collections (neither silently wins)."""
    named = checked_collection(field) if field else None
    if given and named and given != named:
        raise problem(
            400, f"?collection={given} and the multipart field collection={named} disagree"
        )
    return given or named or "default"


def checked_collection(name: str) -> str:
    """A valid collection name, or a 400 naming the rule."""
    try:
        return check_collection_name(name)
    except ConfigurationError as exc:
        raise problem(400, exc.message) from None


async def stages_overview(ctx: ServeContext) -> list[StageOut]:
    return await browse.stages_overview(ctx.pool, ctx.stage_names)


_BINARY = Schema(type=OpenAPIType.STRING, format=OpenAPIFormat.BINARY)

#: What the upload route takes; it streams the body itself, so Litestar, which sees no
#: ``data`` parameter, cannot describe it.
UPLOAD_BODY = RequestBody(
    required=True,
    description="The file: multipart (field `file`, at most one; optional fields "
    "`collection`, `readers`, `meta`) or the raw bytes (any type but multipart; name in "
    "Content-Disposition).",
    content={
        "multipart/form-data": OpenAPIMediaType(
            schema=Schema(
                type=OpenAPIType.OBJECT,
                required=["file"],
                properties={
                    "file": _BINARY,
                    "collection": Schema(
                        type=OpenAPIType.STRING,
                        pattern=f"^$|{COLLECTION}",
                        description="The collection (empty: `?collection=`'s, else `default`)",
                    ),
                    "readers": Schema(type=OpenAPIType.STRING, description=READERS),
                    "meta": Schema(
                        type=OpenAPIType.ARRAY,
                        items=Schema(type=OpenAPIType.STRING),
                        description=META,
                    ),
                },
            )
        ),
        "application/octet-stream": OpenAPIMediaType(schema=_BINARY),
    },
)
_DISPOSITION = ParameterSpec(
    name="Content-Disposition",
    param_in="header",
    required=False,
    schema=Schema(type=OpenAPIType.STRING),
    description='A raw upload\'s file name: `attachment; filename="report.pdf"`.',
)


#: The upload's answers besides its 202.
UPLOAD_ANSWERS = {
    200: ResponseSpec(
        Accepted,
        description="The same bytes were already there, or the same request came with this "
        "Idempotency-Key before",
    ),
    **problems(
        *(400, 401, 403, 409, 413, 415, 422),
        said={
            400: "empty, a malformed multipart body, two `file`, `collection` or `readers` "
            "parts, a bad collection, principal or metadata, or the query's and the form's "
            "collections, readers or metadata disagreeing",
            409: "the upload this Idempotency-Key answered was deleted meanwhile",
            413: "over RAGLINE_MAX_UPLOAD_MB",
            415: "not a type ragline reads",
        },
    ),
}
#: A document id in a path: anything but a UUID names no document (404).
DOC_ID = Parameter(schema_extra={"format": "uuid"})


@dataclass
class UploadOperation(Operation):
    """The upload's operation, with its request body and Content-Disposition header."""

    def __post_init__(self) -> None:
        self.request_body = UPLOAD_BODY
        self.parameters = [*(self.parameters or []), _DISPOSITION]


def uploaded(
    upload: uploads.Upload, doc_id: uuid.UUID, created: bool
) -> dict[str, str | int | bool]:
    """What the upload's span says about it."""
    spooled = upload.spooled
    return {
        "document.id": str(doc_id),
        "created": created,
        "filename": spooled.filename,
        "bytes": spooled.byte_size,
        "media_type": spooled.media_type,
        "collection": upload.collection,
    }


class DocumentsApi(Controller):
    path = "/v1"
    tags = ["documents"]  # noqa: RUF012 (litestar reads it as a class attribute)

    @post(
        "/documents",
        status_code=202,
        request_max_body_size=None,
        operation_class=UploadOperation,
        response_description="A new document, queued",
        responses=UPLOAD_ANSWERS,
    )
    async def upload(
        self,
        state: State,
        request: Request[Any, Any, Any],
        idempotency_key: Annotated[
            str | None,
            Parameter(header="Idempotency-Key", schema_extra={"pattern": "^[!-~]{1,200}$"}),
        ] = None,
        collection: Annotated[
            str | None,
            Parameter(
                description="The collection (empty: the multipart field's, else `default`)",
                schema_extra={"pattern": f"^$|{COLLECTION}"},
            ),
        ] = None,
        readers: Annotated[str | None, Parameter(description=READERS)] = None,
        meta: Annotated[list[str] | None, Parameter(description=META)] = None,
    ) -> Response[Accepted]:
        """Upload a document: multipart (field ``file``) or a raw body (name in
        Content-Disposition), into ``collection`` (query parameter or multipart field;
        default ``default``), with ``readers`` and ``meta`` (query parameters or
        multipart fields). 202 for a new document, 200 when the same bytes (or the same
        Idempotency-Key) were already there: that document, unchanged. The document's
        trace starts here (a request's ``traceparent`` header continues the caller's)."""
        ctx = ctx_of(state)
        caller = caller_of(request)
        key = uploads.check_idempotency_key(idempotency_key)
        given = checked_collection(collection) if collection else None  # before the body
        said = uploads.readers_of(readers, "readers")
        pairs = uploads.metadata_of(meta or (), "meta")
        headers = {k.lower(): v for k, v in request.headers.items()}
        with document_span(
            "upload", {"idempotency_key": key is not None}, traceparent=headers.get("traceparent")
        ) as span:
            spooled = await uploads.receive(
                request.stream(), headers, ctx.config.upload_dir, ctx.config.max_upload_bytes
            )
            try:
                upload = uploads.Upload(
                    spooled=spooled,
                    key=key,
                    collection=upload_collection(given, spooled.collection),
                    about=uploads.about_upload(caller, said, pairs, spooled),
                    caller=caller,
                )
                stored = await uploads.store(ctx.pool, ctx.services.assets, upload)
            finally:
                spooled.path.unlink(missing_ok=True)
            annotate(span, uploaded(upload, stored.document_id, stored.created))
        url = f"/v1/documents/{stored.document_id}"
        body = Accepted(id=stored.document_id, created=stored.created, status_url=url)
        return Response(body, status_code=202 if stored.created else 200, headers={"Location": url})

    @get("/documents", responses=problems(400, 401))
    async def documents(
        self,
        state: State,
        request: Request[Any, Any, Any],
        status: Annotated[str | None, Parameter(schema_extra={"enum": list(STATUSES)})] = None,
        stage: Annotated[str | None, Parameter(description="One of GET /v1/stages")] = None,
        limit: Annotated[int, Parameter(ge=1, le=MAX_PAGE)] = 50,
        cursor: Annotated[str | None, Parameter(description="A page's `next_cursor`")] = None,
    ) -> DocumentPage:
        """Documents, newest first (those the caller may read); filter by status and
        stage; cursor pagination."""
        caller = caller_of(request)
        return await query_documents(ctx_of(state), caller, status, stage, limit, cursor)

    @get("/documents/{doc:str}", responses=problems(400, 401, 404))
    async def get_document(
        self, state: State, request: Request[Any, Any, Any], doc: Annotated[str, DOC_ID]
    ) -> DocumentDetail:
        """A document: status, stage timeline with attempts and errors, counts, why it waits."""
        return await document_detail(ctx_of(state), caller_of(request), document_id(doc))

    @delete("/documents/{doc:str}", status_code=204, responses=problems(400, 401, 403, 404))
    async def delete_document(
        self, state: State, request: Request[Any, Any, Any], doc: Annotated[str, DOC_ID]
    ) -> None:
        """Delete a document: rows, stored files, vector points."""
        doc_id = document_id(doc)
        ctx = ctx_of(state)
        await readable(ctx, caller_of(request), doc_id)
        if not await documents.delete_document(ctx.pool, ctx.services, doc_id):
            raise problem(404, f"no document {doc_id}")

    @post(
        "/documents/{doc:str}/retry",
        status_code=200,
        responses=problems(400, 401, 403, 404, 409, said={409: "nothing failed to retry"}),
    )
    async def retry(
        self, state: State, request: Request[Any, Any, Any], doc: Annotated[str, DOC_ID]
    ) -> list[Requeued]:
        """Requeue a failed document at the stage that failed (a fresh attempt budget)."""
        ctx = ctx_of(state)
        doc_id = document_id(doc)
        await readable(ctx, caller_of(request), doc_id)
        if await DocumentRepository(ctx.pool).get(doc_id) is None:
            raise problem(404, f"no document {doc_id}")
        requeued = await retry_failed_jobs(ctx.pool, [doc_id])
        if not requeued:
            raise problem(409, f"document {doc_id} has no failed job to retry")
        return [Requeued(document_id=d, stage=s) for d, s in requeued]

    @post(
        "/reprocess",
        status_code=202,
        responses=problems(*(400, 401, 403, 413, 415), said={403: REPROCESS_403}),
    )
    async def reprocess(
        self, state: State, request: Request[Any, Any, Any], data: ReprocessRequest
    ) -> Reprocessing:
        """Run documents again from a stage: ``from`` plus ``ids``, ``all`` or ``model``
        (only ``collection``'s documents when given). A token with principals: by ids
        only; the documents it may not read count as ``missing``."""
        return await run_reprocess(ctx_of(state), caller_of(request), data)

    @get(
        "/search",
        responses=problems(400, 401, 409),
        dependencies={"words": Provide(search_words, sync_to_thread=False)},
    )
    async def search(
        self,
        state: State,
        request: Request[Any, Any, Any],
        q: str,
        words: SearchWords,
        k: Annotated[int, Parameter(ge=1, le=MAX_K)] = 5,
        collection: str | None = None,
        mode: Annotated[str, Parameter(description="hybrid, dense or keyword")] = MODES[0],
    ) -> list[Answer]:
        """The best chunks for ``q`` (``mode``: hybrid, dense or keyword), as PostgreSQL
        has them now: score, document_id, filename, uri, pages, section, text, metadata;
        only ``collection``'s when given, only what every filter allows (the names of
        ``search``'s options), only documents the caller may read."""
        caller = caller_of(request)
        return await run_search(ctx_of(state), caller, q, k, collection, mode, words)

    @get("/stages", responses=problems(400, 401))
    async def stages(self, state: State) -> list[StageOut]:
        """Per stage: queue depth, backing off, running, failed, oldest ages, live workers."""
        return await stages_overview(ctx_of(state))
