"""Errors as RFC 9457 problem details (``application/problem+json``).

Every error body is ``{type, title, status, detail}``; ``detail`` is one line written for
the client and never carries a token, a database URL or a traceback.
"""

from __future__ import annotations

import logging
import traceback
from http import HTTPStatus
from pathlib import PurePath
from typing import Any

from litestar import Request, Response
from litestar.exceptions import HTTPException, ValidationException
from litestar.openapi.datastructures import ResponseSpec

from runtime.api import is_database_unreachable
from stages.ports.http import Problem as Problem

log = logging.getLogger(__name__)

PROBLEM_JSON = "application/problem+json"
#: Seconds a client is told to wait when PostgreSQL is out of reach: about what a
#: restarting server, or the embedded one coming back under its supervisor, takes.
DATABASE_RETRY_AFTER_S = 2
#: What a request that finds PostgreSQL out of reach is told (HTTP's 503, MCP's tools).
UNAVAILABLE = "database unavailable; try again shortly"


class ApiError(HTTPException):
    """An error the API answers with a problem document."""


def problem_response(
    status: int, detail: str, headers: dict[str, str] | None = None
) -> Response[Problem]:
    title = HTTPStatus(status).phrase
    return Response(
        Problem(title=title, status=status, detail=detail),
        status_code=status,
        media_type=PROBLEM_JSON,
        headers=headers,
    )


def problem(status: int, detail: str, headers: dict[str, str] | None = None) -> ApiError:
    return ApiError(status_code=status, detail=detail, headers=headers)


#: What a problem status means on any route of this API, for the OpenAPI schema.
MEANINGS: dict[int, str] = {
    400: "a parameter or body the route cannot take, or a Host the server does not serve",
    401: "RAGLINE_API_TOKENS is set and no bearer token, or a wrong one, came with it",
    403: "a browser's write from another origin, or without the web view's CSRF token",
    404: "no such document",
    409: "the request conflicts with the document's state",
    413: "the body is over the route's limit",
    415: "a body of a type the route does not take",
    422: "an Idempotency-Key used before for another request",
    503: "the database out of reach: ask again after Retry-After",
}


def problems(
    *statuses: int, said: dict[int, str] | None = None, database: bool = True
) -> dict[int, ResponseSpec]:
    """The problem documents a route answers with, for its OpenAPI ``responses`` (which
    replace Litestar's own 400, a body this API never sends). ``said``: a route's own
    words for a status; ``database``: the route reads PostgreSQL, so it answers 503 when
    that is out of reach (:func:`on_unexpected`)."""
    words = {**MEANINGS, **(said or {})}
    answered = dict.fromkeys((*statuses, 503) if database else statuses)
    return {
        status: ResponseSpec(
            Problem, description=words[status], media_type=PROBLEM_JSON, generate_examples=False
        )
        for status in answered
    }


def on_http_error(_request: Request[Any, Any, Any], exc: HTTPException) -> Response[Problem]:
    detail = exc.detail or HTTPStatus(exc.status_code).phrase
    if isinstance(exc, ValidationException) and exc.extra:
        detail = f"{detail}: {_first_problem(exc.extra)}"
    return problem_response(exc.status_code, detail, dict(exc.headers or {}))


def _first_problem(extra: Any) -> str:
    items = extra if isinstance(extra, list) else [extra]
    parts = []
    for item in items[:3]:
        if isinstance(item, dict):
            parts.append(f"{item.get('key', '')} {item.get('message', '')}".strip())
        else:
            parts.append(str(item))
    return "; ".join(parts)[:300]


def on_unexpected(request: Request[Any, Any, Any], exc: Exception) -> Response[Problem]:
    # Logged with its type only: an exception's text may quote a connection string.
    what = type(exc).__name__
    if is_database_unreachable(exc):
        # Asking again is safe: an upload of the same bytes finds the document it made,
        # and the other writes set a state rather than add one.
        log.warning("%s %s: database unavailable (%s)", request.method, request.url.path, what)
        return problem_response(503, UNAVAILABLE, {"Retry-After": str(DATABASE_RETRY_AFTER_S)})
    log.error("%s %s failed: %s at %s", request.method, request.url.path, what, raised_at(exc))
    return problem_response(500, "internal error; the server log has the details")


#: Directories a logged frame's path is shortened to (the first one in it).
_ROOTS = ("site-packages", "stages", "runtime", "tests", "bench")


def raised_at(exc: BaseException, frames: int = 3) -> str:
    """Where ``exc`` was raised, innermost frame first (``stages/db/search.py:88 in
    hits < ...``): code locations only, never the error's text or a variable's value."""
    # Positions only: no source line is read for a log line that prints none.
    walked = traceback.walk_tb(exc.__traceback__)
    stack = traceback.StackSummary.extract(walked, lookup_lines=False)[-frames:]
    return " < ".join(f"{_short(f.filename)}:{f.lineno} in {f.name}" for f in reversed(stack))


def _short(filename: str) -> str:
    parts = PurePath(filename).parts
    for i in range(len(parts)):
        if parts[i] in _ROOTS:
            start = i + 1 if parts[i] == "site-packages" else i
            return "/".join(parts[start:])
    return "/".join(parts[-2:])
