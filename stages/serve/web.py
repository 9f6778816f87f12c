"""The web view: server-rendered HTML pages plus ``static/app.js`` (live status over SSE,
upload, buttons). Nothing is built at install time and nothing comes from a CDN.

Every value that came from a user or a document (file names, errors, chunk text) goes
through :func:`html.escape`. A caller with principals (its token, in the login cookie)
sees only the documents it may read, on every page, as through the API.
"""

from __future__ import annotations

from html import escape
from http import HTTPStatus
from typing import Annotated, Any
from urllib.parse import quote

import anyio.to_thread
from litestar import Request, Response, get, post
from litestar.datastructures import State
from litestar.di import Provide
from litestar.enums import RequestEncodingType
from litestar.exceptions import HTTPException
from litestar.params import Body
from litestar.response import Redirect
from litestar.types import ExceptionHandlersMap

from runtime.api import ProviderState
from stages.actions import browse
from stages.actions.search import Answer
from stages.db import serve as serve_db
from stages.parsing.formats import FORMATS, SUFFIXES
from stages.ports.assets import document_prefix
from stages.serve import http_api as api
from stages.serve.auth import COOKIE, caller_of, presented_cookie, token_ok
from stages.serve.config import api_tokens
from stages.serve.context import ServeContext, document_id

HTML = "text/html; charset=utf-8"


def csrf_of(request: Request[Any, Any, Any]) -> str:
    """The CSRF token the page's scripts send with each write (:mod:`stages.serve.guard`)."""
    ctx: ServeContext = request.app.state.ctx
    return ctx.csrf.token(presented_cookie(request.headers.get("cookie")))


def page(
    title: str, body: str, *, csrf: str = "", active: str = "", status_code: int = 200
) -> Response[str]:
    nav = "".join(
        f'<a href="{href}"{" class=active" if name == active else ""}>{name}</a>'
        for name, href in (("documents", "/"), ("stages", "/stages"), ("search", "/search"))
    )
    html = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="csrf-token" content="{escape(csrf)}">
<title>{escape(title)} · ragline</title>
<link rel="stylesheet" href="/static/style.css">
<script src="/static/app.js" defer></script>
</head><body><header><strong>ragline</strong><nav>{nav}</nav></header>
<main><h1>{escape(title)}</h1><p id="message" role="status"></p>{body}</main></body></html>"""
    return Response(html, media_type=HTML, status_code=status_code)


def error_page(_request: Request[Any, Any, Any], exc: HTTPException) -> Response[str]:
    """The web view's errors are pages too (an unknown document, a bad filter, a wrong
    token): the status and its one-line detail, with the navigation."""
    status = exc.status_code
    detail = exc.detail or HTTPStatus(status).phrase
    body = f'<p class="error">{escape(detail)}</p><p><a href="/">back to the documents</a></p>'
    return page(HTTPStatus(status).phrase.lower(), body, status_code=status)


#: Every page handler's: errors as HTML, not the API's problem documents.
AS_PAGE: ExceptionHandlersMap = {HTTPException: error_page}


#: What the upload box offers: every format ragline reads (detected from content on upload).
ACCEPT = ",".join(sorted({f.media_type for f in FORMATS} | set(SUFFIXES)))


def _cell(value: object) -> str:
    return escape("" if value is None else str(value))


def document_row(d: api.DocumentOut) -> str:
    return (
        f'<tr id="doc-{d.id}" data-id="{d.id}" class="status-{_cell(d.status)}">'
        f'<td><a href="/documents/{d.id}">{_cell(d.filename)}</a></td>'
        f'<td class="status">{_cell(d.status)}</td><td class="stage">{_cell(d.stage)}</td>'
        f'<td class="error">{_cell(d.error)}</td>'
        f'<td class="when">{d.updated_at:%Y-%m-%d %H:%M:%S}</td></tr>'
    )


def _select(name: str, options: tuple[str, ...], chosen: str | None) -> str:
    opts = '<option value="">any</option>' + "".join(
        f"<option{' selected' if o == chosen else ''}>{escape(o)}</option>" for o in options
    )
    return f'<label>{name} <select name="{name}">{opts}</select></label>'


@get("/", include_in_schema=False, exception_handlers=AS_PAGE)
async def documents_page(
    request: Request[Any, Any, Any],
    state: State,
    status: str | None = None,
    stage: str | None = None,
    cursor: str | None = None,
) -> Response[str]:
    ctx: ServeContext = state.ctx
    caller = caller_of(request)
    listing = await api.query_documents(
        ctx, caller, status or None, stage or None, 100, cursor or None
    )
    rows = "".join(document_row(d) for d in listing.documents)
    more = ""
    if listing.next_cursor:
        query = f"status={quote(status or '')}&stage={quote(stage or '')}"
        more = f'<p><a href="/?{query}&cursor={quote(listing.next_cursor)}">older</a></p>'
    body = f"""
<form id="upload-form" class="bar"><input type="file" id="upload-file" name="file"
 accept="{ACCEPT}" multiple>
<button type="submit" id="upload-button">upload</button></form>
<form class="bar" method="get" action="/">{_select("status", api.STATUSES, status)}
{_select("stage", ctx.stage_names, stage)}<button type="submit">filter</button></form>
<table id="documents" data-status="{_cell(status)}" data-stage="{_cell(stage)}">
<thead><tr><th>file</th><th>status</th><th>stage</th><th>error</th><th>updated</th></tr></thead>
<tbody>{rows}</tbody></table>{more}"""
    return page("documents", body, csrf=csrf_of(request), active="documents")


def job_rows(detail: browse.DocumentDetail) -> str:
    out = []
    for j in detail.jobs:
        took = ""
        if j.started_at and j.finished_at:
            took = f"{(j.finished_at - j.started_at).total_seconds():.2f} s"
        out.append(
            f'<tr class="job state-{_cell(j.state)}"><td>{_cell(j.stage)}</td>'
            f"<td>{j.generation}</td><td>{_cell(j.state)}</td>"
            f"<td>{j.attempts}/{j.max_attempts}</td><td>{took}</td>"
            f"<td>{_cell(j.error_kind)}</td><td>{_cell(j.last_error)}</td></tr>"
        )
    return "".join(out)


def stage_choice(ctx: ServeContext) -> str:
    return "".join(f"<option>{escape(s)}</option>" for s in ctx.stage_names)


@get("/documents/{doc:str}", include_in_schema=False, exception_handlers=AS_PAGE)
async def document_page(request: Request[Any, Any, Any], state: State, doc: str) -> Response[str]:
    ctx: ServeContext = state.ctx
    d = await api.document_detail(ctx, caller_of(request), document_id(doc))
    c = d.counts
    points = "unknown" if c.points is None else c.points
    body = f"""
<section id="document" data-id="{d.id}">
<dl><dt>file</dt><dd id="filename">{_cell(d.filename)}</dd>
<dt>status</dt><dd id="doc-status" class="status-{_cell(d.status)}">{_cell(d.status)}</dd>
<dt>stage</dt><dd id="doc-stage">{_cell(d.stage)}</dd>
<dt>error</dt><dd id="doc-error">{_cell(d.error)}</dd>
<dt>waiting</dt><dd id="doc-waiting">{_cell(d.waiting)}</dd>
<dt>generation</dt><dd>{d.generation}</dd><dt>bytes</dt><dd>{d.byte_size}</dd>
<dt>pages</dt><dd id="count-pages">{c.pages}</dd><dt>images</dt><dd>{c.images}
 ({c.described_images} described)</dd><dt>chunks</dt><dd id="count-chunks">{c.chunks}</dd>
<dt>points</dt><dd id="count-points">{points}</dd></dl>
<div class="bar"><button id="retry" data-id="{d.id}">retry</button>
<label>reprocess from <select id="reprocess-from">{stage_choice(ctx)}</select></label>
<button id="reprocess" data-id="{d.id}">reprocess</button>
<button id="delete" data-id="{d.id}" class="danger">delete</button></div>
<h2>timeline</h2><table id="jobs"><thead><tr><th>stage</th><th>gen</th><th>state</th>
<th>attempts</th><th>took</th><th>kind</th><th>last error</th></tr></thead>
<tbody>{job_rows(d)}</tbody></table></section>"""
    return page(d.filename, body, csrf=csrf_of(request))


def provider_cell(providers: list[ProviderState]) -> str:
    """Each provider with its circuit: "cohere/embed-v4.0: closed", or why it waits."""
    if not providers:
        return "—"
    return "<br>".join(
        escape(p.name + ": " + (p.state if p.state == "closed" else p.waiting_line()))
        for p in providers
    )


def stage_rows(rows: list[browse.StageOut]) -> str:
    return "".join(
        f'<tr id="stage-{escape(r.stage)}"><td>{escape(r.stage)}</td><td>{r.queued}</td>'
        f"<td>{r.backing_off}</td><td>{r.running}</td><td>{r.failed}</td>"
        f"<td>{r.oldest_queued_s:.0f} s</td><td>{r.workers}</td>"
        f'<td class="provider">{provider_cell(r.providers)}</td></tr>'
        for r in rows
    )


@get("/stages", include_in_schema=False, exception_handlers=AS_PAGE)
async def stages_page(request: Request[Any, Any, Any], state: State) -> Response[str]:
    rows = await api.stages_overview(state.ctx)
    body = f"""<table id="stages"><thead><tr><th>stage</th><th>queued</th><th>backing off</th>
<th>running</th><th>failed</th><th>oldest queued</th><th>live workers</th><th>provider</th>
</tr></thead><tbody>{stage_rows(rows)}</tbody></table>
<p class="note">a provider's circuit opens after repeated transient failures; its stages
wait queued until a probe succeeds.</p>"""
    return page("stages", body, csrf=csrf_of(request), active="stages")


def hit_rows(hits: list[Answer]) -> str:
    out = []
    for h in hits:
        text = " ".join(h.text.split())[:300]
        section = f"· {_cell(h.section)} " if h.section else ""
        out.append(
            f'<li class="hit"><a href="/documents/{h.document_id}">{_cell(h.filename)}</a> '
            f"p.{h.page_start}–{h.page_end} {section}{_where(h)}"
            f'<span class="score">{h.score:.3f}</span>'
            f"<p>{escape(text)}</p></li>"
        )
    return "".join(out)


def _where(h: Answer) -> str:
    """A link to the hit's first page rendered with its text highlighted (PDFs)."""
    if not h.boxes:
        return ""
    page = h.boxes[0].page
    href = f"/documents/{h.document_id}/pages/{page}?chunk={h.ordinal}"
    return f'<a class="where" href="{href}">see it on the page</a> '


@get("/documents/{doc:str}/pages/{page:int}", include_in_schema=False, exception_handlers=AS_PAGE)
async def highlighted_page(
    request: Request[Any, Any, Any], state: State, doc: str, page: int, chunk: int
) -> Response[bytes]:
    """Page ``page`` of a PDF as a PNG with chunk ``chunk``'s boxes on it highlighted,
    rendered once and kept as an asset of the document (it goes with it)."""
    ctx: ServeContext = state.ctx
    doc_id = document_id(doc)
    await api.readable(ctx, caller_of(request), doc_id)
    found = await serve_db.chunk_boxes(ctx.pool, doc_id, chunk)
    if found is None or not found.asset_key or found.media_type != "application/pdf":
        raise HTTPException(status_code=404, detail=f"no PDF chunk {chunk} of document {doc_id}")
    flat = found.boxes or []
    boxes = [flat[i + 1 : i + 5] for i in range(0, len(flat) - 4, 5) if int(flat[i]) == page]
    key = f"{document_prefix(doc_id)}renders/g{found.generation}-c{chunk}-p{page}.png"
    assets = ctx.services.assets
    if await assets.exists(key):
        return Response(await assets.get(key), media_type="image/png")
    from stages.parsing.formats.render import highlighted_page as render  # PyMuPDF: lazily

    async with assets.local_file(found.asset_key) as path:
        try:
            data = await anyio.to_thread.run_sync(render, path, page, boxes)
        except ValueError as exc:
            raise HTTPException(status_code=404, detail=str(exc)) from None
    await assets.put(key, data, "image/png")
    return Response(data, media_type="image/png")


#: The media types the search form offers (every format ragline reads).
MEDIA_TYPES = tuple(sorted({f.media_type for f in FORMATS}))


def _field(name: str, value: str | None, hint: str) -> str:
    return (
        f'<label>{name} <input name="{name}" id="filter-{name}" value="{_cell(value)}" '
        f'placeholder="{escape(hint)}"></label>'
    )


def filter_form(words: api.SearchWords) -> str:
    """The search page's filters, by the API's names (one value each; the API repeats)."""
    chosen = words.type[0] if words.type else None
    return (
        f'<div class="bar filters">{_select("type", MEDIA_TYPES, chosen)}'
        f"{_field('path', words.path, 'path or name starts with')}"
        f"{_field('meta', words.meta[0] if words.meta else None, 'key=value')}"
        f"{_field('pages', words.pages, '3-9')}"
        f"{_field('section', words.section, 'section starts with')}</div>"
    )


@get(
    "/search",
    include_in_schema=False,
    exception_handlers=AS_PAGE,
    dependencies={"words": Provide(api.search_words, sync_to_thread=False)},
)
async def search_page(
    request: Request[Any, Any, Any],
    state: State,
    words: api.SearchWords,
    q: str = "",
    k: int = 10,
) -> Response[str]:
    results = ""
    if q.strip():
        caller = caller_of(request)
        hits = await api.run_search(state.ctx, caller, q, max(1, min(k, api.MAX_K)), words=words)
        results = f'<ol id="hits">{hit_rows(hits)}</ol>' if hits else "<p>no results</p>"
    body = f"""<form class="bar" method="get" action="/search"><input type="search" name="q"
 id="q" value="{escape(q)}" placeholder="ask something"><button type="submit">search</button>
{filter_form(words)}</form>{results}"""
    return page("search", body, csrf=csrf_of(request), active="search")


@get("/login", include_in_schema=False, exception_handlers=AS_PAGE)
async def login_form(next: str = "/") -> Response[str]:
    body = f"""<form method="post" action="/login" class="bar">
<input type="hidden" name="next" value="{escape(next)}">
<input type="password" name="token" id="token" placeholder="API token" autofocus>
<button type="submit">sign in</button></form>"""
    return page("sign in", body)


@post("/login", include_in_schema=False, status_code=303, exception_handlers=AS_PAGE)
async def login(
    request: Request[Any, Any, Any],
    data: Annotated[dict[str, str], Body(media_type=RequestEncodingType.URL_ENCODED)],
) -> Redirect:
    ctx: ServeContext = request.app.state.ctx
    if ctx.config.tokens and not token_ok(data.get("token"), api_tokens(ctx.config.tokens)):
        raise HTTPException(status_code=401, detail="wrong token")
    target = data.get("next", "/")
    if not target.startswith("/") or target.startswith("//"):
        target = "/"  # never redirect off this site
    response = Redirect(target, status_code=303)
    response.set_cookie(
        COOKIE, data.get("token", ""), httponly=True, samesite="strict", path="/", max_age=2592000
    )
    return response


HANDLERS = [
    documents_page,
    document_page,
    highlighted_page,
    stages_page,
    search_page,
    login_form,
    login,
]
