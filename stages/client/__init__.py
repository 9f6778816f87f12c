"""ragline's Python client: the HTTP API of ``ragline serve``, blocking or for asyncio.

``Client`` (:mod:`stages.client.sync`) and ``AsyncClient`` (:mod:`stages.client.aio`)
upload (streamed, under an Idempotency-Key), wait until a document is ready (over the
server's event stream, else polling), search with search's filters, list, retry,
reprocess, delete, and follow document events across reconnects (``Last-Event-ID``).
Answers are the server's own structs (:mod:`stages.ports.http`); errors are one exception
per problem kind (:mod:`stages.client.errors`). The LangChain and LlamaIndex retrievers
(extras ``ragline[langchain]``, ``ragline[llamaindex]``) wrap it:
:mod:`stages.client.langchain_retriever`, :mod:`stages.client.llamaindex_retriever`.
"""

from stages.client._core import DocumentRef, RetryPolicy, citation
from stages.client.aio import AsyncClient, AsyncEventStream
from stages.client.errors import (
    ApiError,
    BadRequest,
    ClientError,
    Conflict,
    ConnectionFailed,
    DocumentDeleted,
    DocumentFailed,
    EventsPruned,
    Forbidden,
    IdempotencyKeyReused,
    NotFound,
    RateLimited,
    ServerError,
    StreamEnded,
    TooLarge,
    Unauthorized,
    Unavailable,
    UnsupportedType,
    WaitTimeout,
)
from stages.client.sync import Client, EventStream
from stages.ports.http import (
    Accepted,
    Answer,
    DocumentDetail,
    DocumentEvent,
    DocumentOut,
    DocumentPage,
    Reprocessing,
    Requeued,
    StageOut,
)

__all__ = [
    "Accepted",
    "Answer",
    "ApiError",
    "AsyncClient",
    "AsyncEventStream",
    "BadRequest",
    "Client",
    "ClientError",
    "Conflict",
    "ConnectionFailed",
    "DocumentDeleted",
    "DocumentDetail",
    "DocumentEvent",
    "DocumentFailed",
    "DocumentOut",
    "DocumentPage",
    "DocumentRef",
    "EventStream",
    "EventsPruned",
    "Forbidden",
    "IdempotencyKeyReused",
    "NotFound",
    "RateLimited",
    "Reprocessing",
    "Requeued",
    "RetryPolicy",
    "ServerError",
    "StageOut",
    "StreamEnded",
    "TooLarge",
    "Unauthorized",
    "Unavailable",
    "UnsupportedType",
    "WaitTimeout",
    "citation",
]
