"""The client's exceptions: one per problem kind the API answers, and the client's own.

The server answers every error as RFC 9457 problem details (``{type, title, status,
detail}``, :class:`stages.ports.http.Problem`) with one line in ``detail``; the client
raises the class of its status with that line as the message. Each docstring doubles as
the message when the server gave none (a proxy's bare 502, say).
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from stages.ports.http import DocumentDetail, Problem


class ClientError(Exception):
    """ragline's client failed."""

    def __init__(self, message: str | None = None) -> None:
        self.message = message or (type(self).__doc__ or "").strip()
        super().__init__(self.message)


class ApiError(ClientError):
    """The server answered with an error."""

    #: The status this class stands for (0: any other).
    status = 0

    def __init__(self, message: str | None = None, *, problem: Problem | None = None) -> None:
        super().__init__(message)
        #: The problem document as the server sent it (None when it sent another body).
        self.problem = problem
        if problem is not None:
            self.status = problem.status


class BadRequest(ApiError, ValueError):
    """A parameter or body the route cannot take (400)."""

    status = 400


class Unauthorized(ApiError):
    """No bearer token, or a wrong one, while the server has RAGLINE_API_TOKENS (401)."""

    status = 401


class Forbidden(ApiError):
    """The caller may not do this (403)."""

    status = 403


class NotFound(ApiError, LookupError):
    """No such document, or none the caller may read (404)."""

    status = 404


class Conflict(ApiError):
    """The request conflicts with the document's state (409)."""

    status = 409


class TooLarge(ApiError):
    """The body is over the server's limit (413; RAGLINE_MAX_UPLOAD_MB for uploads)."""

    status = 413


class UnsupportedType(ApiError):
    """A file of a type ragline does not read, or a body the route does not take (415)."""

    status = 415


class IdempotencyKeyReused(ApiError):
    """The Idempotency-Key was used before for another request: other bytes or another
    collection (422)."""

    status = 422


class RateLimited(ApiError):
    """Too many requests, still after the client's retries (429)."""

    status = 429


class ServerError(ApiError):
    """The server failed; its log has the details (500)."""

    status = 500


class Unavailable(ApiError):
    """The server is not ready, still after the client's retries (503)."""

    status = 503


#: The class of each status the API answers with a problem document.
BY_STATUS: dict[int, type[ApiError]] = {
    cls.status: cls
    for cls in (
        BadRequest,
        Unauthorized,
        Forbidden,
        NotFound,
        Conflict,
        TooLarge,
        UnsupportedType,
        IdempotencyKeyReused,
        RateLimited,
        ServerError,
        Unavailable,
    )
}


class ConnectionFailed(ClientError, ConnectionError):
    """The server could not be reached, still after the client's retries."""


class WaitTimeout(ClientError, TimeoutError):
    """The document was not ready in time."""


class DocumentFailed(ClientError):
    """The document failed in the pipeline (``retry`` runs its failed stage again)."""

    def __init__(self, document: DocumentDetail) -> None:
        super().__init__(f"document {document.id} failed: {document.error or 'no error given'}")
        #: The document as the server had it when it failed.
        self.document = document


class DocumentDeleted(NotFound):
    """The document was deleted while the client waited for it."""

    def __init__(self, document_id: uuid.UUID) -> None:
        super().__init__(f"document {document_id} was deleted")


class EventsPruned(ClientError):
    """The server no longer has the events after the last one seen: list the documents
    again, then follow the events from now (``events()`` without ``last_event_id``)."""


class StreamEnded(ClientError):
    """The events stream ended and the client was asked not to reconnect."""
