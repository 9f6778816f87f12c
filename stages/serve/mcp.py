"""The MCP server: ragline's index as tools an agent calls (search, documents, their text,
submit, the pipeline's status), on the official ``mcp`` SDK; over stdio (``ragline mcp``)
or streamable HTTP under ``serve``'s ``/mcp`` (its tokens and its readers' rule).

Every tool calls the use case the HTTP API calls (:mod:`stages.actions.browse`,
:func:`stages.actions.search.ask`, :func:`stages.serve.uploads.store`,
:func:`stages.actions.submit.submit`) and trims by the caller's principals as it does
(:mod:`stages.serve.access`): a document the caller may not read is one that does not
exist. Results are small and cited (file, pages, section, document id); a failure is a
tool error of one line, never a traceback.
"""

from __future__ import annotations

import base64
import binascii
import functools
import io
import sys
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any, Literal, ParamSpec, TypeVar

import anyio
import anyio.to_thread
import asyncpg
import msgspec
from litestar.exceptions import HTTPException
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.server.stdio import stdio_server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import CallToolResult, InputRequiredResult, ToolAnnotations
from pydantic import Field, ValidationError

from runtime.api import (
    DocumentRepository,
    JobRow,
    MissingInput,
    Pool,
    RaglineError,
    Submitted,
    is_database_unreachable,
    one_line,
)
from stages.actions import browse
from stages.actions.metadata import labels_of
from stages.actions.search import Answer, SearchWords, ask
from stages.actions.submit import submit as submit_path
from stages.ports.collections import check_collection_name
from stages.ports.services import Services
from stages.serve import access, uploads
from stages.serve.auth import MCP_PATH, NOBODY, Caller, caller_in
from stages.serve.problems import UNAVAILABLE

#: A hit's text in a search result, at most (``read_chunk`` gives it whole).
MAX_HIT_CHARS = 1200
#: A page's text in ``read_page``, at most.
MAX_PAGE_CHARS = 20_000
MAX_K = 50

P = ParamSpec("P")
T = TypeVar("T")

INSTRUCTIONS = """\
ragline is a document index (PDF, Office, HTML, text...). To answer from the documents:
call `search` with a question or keywords (filters narrow it), then `read_chunk` on a hit
for its whole text and the chunks around it, or `read_page` for a page. Cite what you use
by its `cite` field (file, pages, section, document id). `submit` adds a document;
`get_document` says whether it is ready and, if not, why; `pipeline_status` shows the
queues. Documents you may not read do not exist for you."""


class Door:
    """What the tools reach: the pool, the services, who asks, and what submit may do."""

    def __init__(
        self,
        pool: Callable[[], Pool],
        services: Services,
        stage_names: tuple[str, ...],
        *,
        upload_dir: Path,
        max_upload_bytes: int,
        caller: Caller | None = None,
        paths: bool = False,
    ) -> None:
        self.pool = pool
        self.services = services
        self.stage_names = stage_names
        self.upload_dir = upload_dir
        self.max_upload_bytes = max_upload_bytes
        #: The one caller of a stdio server; None: each HTTP request's (its token's).
        self.caller = caller
        #: Whether ``submit`` takes a path on the server's disk (stdio: the user's own).
        self.paths = paths

    def caller_of(self, ctx: Context) -> Caller:
        if self.caller is not None:
            return self.caller
        request = ctx.request_context.request
        scope = getattr(request, "scope", None)
        return caller_in(scope) if isinstance(scope, dict) else NOBODY


class RaglineMcp(MCPServer[Any]):
    """The SDK's server, with an argument that fails the tool's schema reported in one
    line (pydantic's own message spans several)."""

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context | None = None
    ) -> CallToolResult | InputRequiredResult:
        try:
            return await super().call_tool(name, arguments, context)
        except UnexpectedToolError:
            raise  # one line already; the SDK logs its traceback on the server's side
        except ToolError as exc:
            cause = exc.__cause__
            if isinstance(cause, ValidationError):
                raise ToolError(f"{name}: {invalid_arguments(cause)}") from None
            if type(cause) is ToolError:  # one of ours, under the SDK's "Error executing"
                raise ToolError(one_line(f"{name}: {cause}")) from None
            raise ToolError(one_line(str(exc))) from None


def invalid_arguments(exc: ValidationError) -> str:
    """Each wrong argument and why, on one line."""
    parts = []
    for err in exc.errors()[:3]:
        where = ".".join(str(p) for p in err["loc"]) or "arguments"
        parts.append(f"{where}: {err['msg']}")
    return one_line("; ".join(parts))


def one_line_errors(fn: Callable[P, Awaitable[T]]) -> Callable[P, Awaitable[T]]:
    """ragline's errors, the HTTP API's refusals and bad input as a one-line tool error."""

    @functools.wraps(fn)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return await fn(*args, **kwargs)
        except _SAID as exc:
            raise ToolError(tool_error(exc)) from None

    return wrapper


#: Errors a tool answers with their one line (any other is the SDK's "unexpected").
_SAID = (
    HTTPException,
    RaglineError,
    MissingInput,
    ValueError,
    OSError,
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
)


def tool_error(exc: BaseException) -> str:
    """A tool error's line: PostgreSQL out of reach as the HTTP API's 503 says it (not
    the socket's own words), the upload's checks as the HTTP API answers them."""
    if is_database_unreachable(exc):
        return UNAVAILABLE
    if isinstance(exc, HTTPException):
        return one_line(str(exc.detail))
    if isinstance(exc, asyncpg.PostgresError | asyncpg.InterfaceError):
        return one_line(f"database: {type(exc).__name__}: {exc}")
    return one_line(str(exc) or type(exc).__name__)


# -- what the tools answer ---------------------------------------------------------------


def cite(filename: str, doc_id: uuid.UUID, first: int, last: int, section: str | None) -> str:
    """``report.pdf, pp. 3-4, § Results [document 1b2c…]``: what a model quotes."""
    pages = f"p. {first}" if first == last else f"pp. {first}-{last}"
    where = f", § {section}" if section else ""
    return f"{filename}, {pages}{where} [document {doc_id}]"


def clipped(text: str, limit: int) -> tuple[str, bool]:
    return (text, False) if len(text) <= limit else (text[:limit].rstrip() + " …", True)


def hit_out(hit: Answer) -> dict[str, Any]:
    text, cut = clipped(hit.text, MAX_HIT_CHARS)
    out: dict[str, Any] = {
        "cite": cite(hit.filename, hit.document_id, hit.page_start, hit.page_end, hit.section),
        "document_id": str(hit.document_id),
        "filename": hit.filename,
        "pages": [hit.page_start, hit.page_end],
        "section": hit.section,
        "ordinal": hit.ordinal,
        "score": hit.score,
        "text": text,
    }
    if hit.uri:
        out["uri"] = hit.uri
    if cut:
        out["truncated"] = True
    if hit.metadata:
        out["metadata"] = hit.metadata
    return out


def job_line(job: JobRow) -> str:
    took = ""
    if job.finished_at and job.started_at:
        took = f" {(job.finished_at - job.started_at).total_seconds():.1f}s"
    error = f": {job.last_error}" if job.last_error else ""
    return (
        f"{job.stage} (generation {job.generation}) {job.state}, attempt "
        f"{job.attempts}/{job.max_attempts}{took}{error}"
    )


def detail_out(d: browse.DocumentDetail) -> dict[str, Any]:
    return {
        "document_id": str(d.id),
        "filename": d.filename,
        "status": d.status,
        "stage": d.stage,
        "error": d.error,
        "waiting": d.waiting,
        "generation": d.generation,
        "byte_size": d.byte_size,
        "counts": msgspec.to_builtins(d.counts),
        "timeline": [job_line(j) for j in d.jobs],
        "updated_at": d.updated_at.isoformat(),
    }


def document_row(d: browse.DocumentOut) -> dict[str, Any]:
    return {
        "document_id": str(d.id),
        "filename": d.filename,
        "status": d.status,
        "stage": d.stage,
        "error": d.error,
        "updated_at": d.updated_at.isoformat(),
    }


def document_uuid(text: str) -> uuid.UUID:
    try:
        return uuid.UUID(text)
    except ValueError:
        raise ToolError(
            f"not a document id (a UUID from search or list_documents): {text:.80}"
        ) from None


# -- the tools ---------------------------------------------------------------------------

READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)
SUBMIT = ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False
)


class Tools:
    """The tools, as methods over one :class:`Door` (the SDK reads each one's signature
    for its input schema and its docstring for its description)."""

    def __init__(self, door: Door) -> None:
        self.door = door

    @one_line_errors
    async def search(
        self,
        ctx: Context,
        query: Annotated[str, Field(description="What to find: a question or keywords.")],
        k: Annotated[int, Field(ge=1, le=MAX_K, description="How many passages.")] = 5,
        mode: Annotated[
            Literal["hybrid", "dense", "keyword"],
            Field(description="hybrid (default): meaning and exact words; keyword: exact terms."),
        ] = "hybrid",
        collection: Annotated[
            str | None, Field(description="Only this collection (a tenant); default: all.")
        ] = None,
        document_ids: Annotated[
            list[str] | None, Field(description="Only these documents (ids).")
        ] = None,
        source: Annotated[
            str | None, Field(description="Only documents of this sync source (folder or s3://…).")
        ] = None,
        path: Annotated[
            str | None,
            Field(
                description="Only documents whose path in their source (or file name) starts so."
            ),
        ] = None,
        media_types: Annotated[
            list[str] | None, Field(description="Only these media types, e.g. application/pdf.")
        ] = None,
        since: Annotated[
            str | None, Field(description="Only documents dated from this ISO day or time.")
        ] = None,
        until: Annotated[
            str | None, Field(description="Only documents dated before this ISO day or time.")
        ] = None,
        metadata: Annotated[
            list[str] | None,
            Field(description="Only documents whose metadata has each KEY=VALUE given."),
        ] = None,
        pages: Annotated[
            str | None, Field(description="Only passages on these pages: 7, 3-9, 3- or -9.")
        ] = None,
        section: Annotated[
            str | None, Field(description="Only passages of a section whose title starts so.")
        ] = None,
    ) -> dict[str, Any]:
        """Search the indexed documents for passages relevant to a query; the best first, each
        with a `cite` (file, pages, section, document id) to quote, its text (clipped; use
        read_chunk with its document_id and ordinal for all of it and its neighbours) and its
        score. Filters narrow by document, source, path, type, date, metadata, pages or
        section. Use this first for any question about the documents' content."""
        words = SearchWords(
            document=tuple(document_ids or ()),
            source=source,
            path=path,
            type=tuple(media_types or ()),
            since=since,
            until=until,
            meta=tuple(metadata or ()),
            pages=pages,
            section=section,
        )
        caller = self.door.caller_of(ctx)
        found = await ask(
            self.door.pool(),
            self.door.services,
            query,
            k,
            mode=mode,
            collection=collection,
            words=words,
            principals=caller.principals,
        )
        out: dict[str, Any] = {"hits": [hit_out(h) for h in found.hits]}
        if found.note:
            out["note"] = found.note
        return out

    @one_line_errors
    async def get_document(
        self,
        ctx: Context,
        document_id: Annotated[str, Field(description="The document's id.")],
    ) -> dict[str, Any]:
        """One document: its status (pending, processing, ready, failed), the stage it is at,
        its error if it failed, why it is waiting if it is not done (a queue, a provider
        outage, no worker), its stage timeline with attempts, and its counts (pages, chunks,
        images, indexed points). Use it after submit, or to explain a missing answer."""
        doc_id = document_uuid(document_id)
        pool = self.door.pool()
        await _readable(self.door, ctx, pool, doc_id)
        found = await browse.document_detail(pool, self.door.services, doc_id)
        if found is None:
            raise ToolError(f"no document {doc_id}")
        return detail_out(found)

    @one_line_errors
    async def list_documents(
        self,
        ctx: Context,
        status: Annotated[
            Literal["pending", "processing", "ready", "failed"] | None,
            Field(description="Only documents in this status."),
        ] = None,
        stage: Annotated[
            str | None, Field(description="Only documents at this stage (parse, chunk, ...).")
        ] = None,
        limit: Annotated[int, Field(ge=1, le=100, description="How many, newest first.")] = 20,
        cursor: Annotated[
            str | None, Field(description="The next_cursor of the previous page.")
        ] = None,
    ) -> dict[str, Any]:
        """List documents, newest first: id, file name, status, stage, error; filter by status
        or stage; page with next_cursor. Use it to find a document's id or what failed."""
        caller = self.door.caller_of(ctx)
        page = await browse.documents_page(
            self.door.pool(),
            self.door.stage_names,
            status=status,
            stage=stage,
            limit=limit,
            cursor=cursor,
            principals=caller.principals,
        )
        return {
            "documents": [document_row(d) for d in page.documents],
            "next_cursor": page.next_cursor,
        }

    @one_line_errors
    async def read_chunk(
        self,
        ctx: Context,
        document_id: Annotated[str, Field(description="The document's id (from a search hit).")],
        ordinal: Annotated[int, Field(ge=0, description="The chunk's ordinal (from a hit).")],
        around: Annotated[
            int,
            Field(ge=0, le=browse.MAX_AROUND, description="Chunks to add on each side."),
        ] = 1,
    ) -> dict[str, Any]:
        """A passage's whole text with the passages before and after it, in reading order,
        each cited. Use it on a search hit to read its context before answering."""
        doc_id = document_uuid(document_id)
        pool = self.door.pool()
        filename = await _readable(self.door, ctx, pool, doc_id)
        chunks = await browse.passage(pool, doc_id, ordinal, around)
        return {
            "document_id": str(doc_id),
            "filename": filename,
            "chunks": [
                {
                    "cite": cite(filename, doc_id, c.page_start, c.page_end, c.section),
                    "ordinal": c.ordinal,
                    "kind": c.kind,
                    "pages": [c.page_start, c.page_end],
                    "section": c.section,
                    "text": c.text,
                }
                for c in chunks
            ],
        }

    @one_line_errors
    async def read_page(
        self,
        ctx: Context,
        document_id: Annotated[str, Field(description="The document's id.")],
        page: Annotated[
            int,
            Field(
                ge=1, description="The page (1-based; a section number for formats without pages)."
            ),
        ],
    ) -> dict[str, Any]:
        """A document's text on one page as parsed (a section, for formats without pages),
        cited. Use it to read a page a hit points to, or a page asked about by number."""
        doc_id = document_uuid(document_id)
        pool = self.door.pool()
        filename = await _readable(self.door, ctx, pool, doc_id)
        found = await browse.page_text(pool, doc_id, page)
        text, cut = clipped(found.text, MAX_PAGE_CHARS)
        out: dict[str, Any] = {
            "cite": cite(filename, doc_id, found.page, found.page, found.section),
            "document_id": str(doc_id),
            "page": found.page,
            "section": found.section,
            "text": text,
        }
        if cut:
            out["truncated"] = True
        return out

    @one_line_errors
    async def submit(
        self,
        ctx: Context,
        path: Annotated[
            str | None,
            Field(description="A file on the server's disk (stdio only); or give content_base64."),
        ] = None,
        content_base64: Annotated[
            str | None, Field(description="The file's bytes, base64; name it with filename.")
        ] = None,
        filename: Annotated[str | None, Field(description="The uploaded file's name.")] = None,
        collection: Annotated[
            str, Field(description="The collection (a tenant) it goes into.")
        ] = "default",
        readers: Annotated[
            list[str] | None,
            Field(description="Principals who may read it; ['*']: everyone. Default: yours."),
        ] = None,
        metadata: Annotated[
            list[str] | None, Field(description="KEY=VALUE pairs to filter searches on.")
        ] = None,
    ) -> dict[str, Any]:
        """Add a document (PDF, Office, HTML, Markdown, text, image...) to the index: by path
        or by content. It is queued and processed by ragline's workers; call get_document
        with the returned document_id until its status is ready (or failed, with why). The
        same bytes again return the same document (created: false)."""
        if (path is None) == (content_base64 is None):
            raise ToolError("give either path or content_base64 (one of them)")
        caller = self.door.caller_of(ctx)
        if path is not None:
            where = Path(path).expanduser()  # noqa: ASYNC240 (no I/O: a home directory's name)
            done = await _submit_path(self.door, caller, where, collection, readers, metadata)
        else:
            assert content_base64 is not None
            done = await _upload(
                self.door, caller, content_base64, filename, collection, readers, metadata
            )
        doc = await DocumentRepository(self.door.pool()).get(done.document_id)
        return {
            "document_id": str(done.document_id),
            "created": done.created,
            "status": None if doc is None else str(doc.status),
            "filename": None if doc is None else doc.filename,
        }

    @one_line_errors
    async def pipeline_status(self) -> dict[str, Any]:
        """The pipeline's state: per stage the documents queued, backing off, running and
        failed, the oldest waits, the live workers, and the providers (embedding, vision)
        with their circuits. Use it when documents stay pending or to see if ragline is busy."""
        rows = await browse.stages_overview(self.door.pool(), self.door.stage_names)
        return {"stages": [msgspec.to_builtins(r) for r in rows]}


#: The tools, and whether each only reads.
TOOLS = (
    ("search", True),
    ("get_document", True),
    ("list_documents", True),
    ("read_chunk", True),
    ("read_page", True),
    ("submit", False),
    ("pipeline_status", True),
)


def build_server(door: Door) -> RaglineMcp:
    """The MCP server over ``door``: its tools, described for a model to choose well."""
    server = RaglineMcp(name="ragline", instructions=INSTRUCTIONS)
    tools = Tools(door)
    for name, read_only in TOOLS:
        server.add_tool(
            getattr(tools, name),
            name=name,
            annotations=READ_ONLY if read_only else SUBMIT,
            structured_output=True,
        )
    return server


async def _readable(door: Door, ctx: Context, pool: Pool, doc_id: uuid.UUID) -> str:
    """The document's file name; a tool error when there is none or the caller may not
    read it (the same words: to it, there is none)."""
    if await access.may_read(pool, door.caller_of(ctx), doc_id):
        doc = await DocumentRepository(pool).get(doc_id)
        if doc is not None:
            return doc.filename
    raise ToolError(f"no document {doc_id}")


async def _submit_path(
    door: Door,
    caller: Caller,
    path: Path,
    collection: str,
    readers: list[str] | None,
    metadata: list[str] | None,
) -> Submitted:
    if not door.paths:
        raise ToolError("submit by path is for a local (stdio) server; send content_base64")
    pairs = uploads.metadata_of(metadata or (), "metadata")
    given = _readers(readers, caller)
    labels = labels_of(pairs, given)
    return await submit_path(
        door.pool(), door.services.assets, path, collection=collection, labels=labels
    )


def _readers(readers: list[str] | None, caller: Caller) -> list[str] | None:
    """Who may read a submitted document: as given (``*``: everyone), else the caller's
    principals (everyone for a caller who may read everything)."""
    if not readers:
        return None if caller.principals is None else list(caller.principals)
    return None if readers == ["*"] else readers


async def _upload(
    door: Door,
    caller: Caller,
    content: str,
    filename: str | None,
    collection: str,
    readers: list[str] | None,
    metadata: list[str] | None,
) -> Submitted:
    """The bytes through the HTTP upload's own path: spooled, checked, stored once."""
    about = uploads.About(
        readers=None if readers == ["*"] else tuple(readers) if readers else caller.principals,
        metadata=uploads.metadata_of(metadata or (), "metadata"),
    )
    if readers and readers != ["*"]:
        uploads.readers_of(",".join(readers), "readers")  # a bad name: one line
    spooled = await _spool(door, content, filename)
    try:
        upload = uploads.Upload(
            spooled=spooled,
            collection=check_collection_name(collection),
            about=about,
            caller=caller,
        )
        return await uploads.store(door.pool(), door.services.assets, upload)
    finally:
        spooled.path.unlink(missing_ok=True)


async def _spool(door: Door, content: str, filename: str | None) -> uploads.Spooled:
    if len(content) > (door.max_upload_bytes // 3 + 1) * 4:
        raise ToolError(f"upload larger than {door.max_upload_bytes // (1 << 20)} MB")
    try:
        data = base64.b64decode(content, validate=True)
    except (binascii.Error, ValueError):
        raise ToolError("content_base64 is not base64") from None
    spool = uploads.Spool(door.upload_dir, door.max_upload_bytes)
    try:
        await spool.write(data)
        name = uploads.clean_filename(filename) if filename else uploads.DEFAULT_NAME
        return await spool.finish(name)
    except BaseException:
        spool.discard()
        raise


# -- transports --------------------------------------------------------------------------


async def run_stdio(door: Door) -> None:
    """Serve ``door`` over stdin/stdout until the client closes stdin (or the caller
    cancels: a blocked read of stdin does not hold the cancellation up)."""
    server = build_server(door)._lowlevel_server  # what run_stdio_async runs, with our stdin
    stdin = _Stdin(io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="replace"))
    async with door.services.lifespan(), stdio_server(stdin=stdin) as (read, write):
        await server.run(read, write, server.create_initialization_options())


class _Stdin(anyio.AsyncFile[str]):
    """stdin read in a thread that a cancellation abandons: SIGTERM stops the server even
    while its client keeps the pipe open (anyio's own file waits for the read to return)."""

    async def readline(self) -> str:
        line: str = await anyio.to_thread.run_sync(self.wrapped.readline, abandon_on_cancel=True)
        return line


def http_app(door: Door, max_body_bytes: int) -> StreamableHTTPSessionManager:
    """The server's streamable HTTP session manager, stateless, JSON answers: what
    ``serve`` mounts at :data:`MCP_PATH` (its own middleware checks the host and the
    token, so the SDK's DNS-rebinding check is off)."""
    server = build_server(door)
    server.streamable_http_app(
        streamable_http_path=MCP_PATH,
        json_response=True,
        stateless_http=True,
        max_request_body_size=max_body_bytes,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    return server.session_manager
