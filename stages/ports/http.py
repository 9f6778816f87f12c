"""The HTTP API's wire types: what ``serve`` answers and :mod:`stages.client` decodes.

One definition for both sides, so a field the server adds or renames is a field the
client sees at once (its tests decode live answers with these very structs). Plain
msgspec structs on the engine's face only: importing them loads no web framework, no
pipeline and no service client.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import TYPE_CHECKING, Any

import msgspec

from runtime.api import DocumentEvent, JobRow, ProviderState

if TYPE_CHECKING:
    from runtime.api import Document

__all__ = [
    "Accepted",
    "Answer",
    "Box",
    "Counts",
    "DocumentDetail",
    "DocumentEvent",
    "DocumentOut",
    "DocumentPage",
    "Problem",
    "Reprocessed",
    "Reprocessing",
    "Requeued",
    "StageOut",
]


class Problem(msgspec.Struct, frozen=True, kw_only=True):
    """An error as RFC 9457 problem details (``application/problem+json``)."""

    type: str = "about:blank"
    title: str
    status: int
    detail: str


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


class Reprocessed(msgspec.Struct, frozen=True, kw_only=True):
    document_id: uuid.UUID
    generation: int


class Reprocessing(msgspec.Struct, frozen=True, kw_only=True):
    #: Each document run again, with its new generation.
    reprocessing: list[Reprocessed]
    #: Ids asked for that name no document (of the collection, when one is given).
    missing: list[uuid.UUID]


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


class Box(msgspec.Struct, frozen=True):
    """Where part of a hit's text sits: a rectangle of a page in points, from the page's
    top left (PDFs)."""

    page: int
    x0: float
    y0: float
    x1: float
    y1: float


class Answer(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A hit as shown: its score in the mode's scale (cosine, BM25, or fused rank)."""

    score: float
    document_id: uuid.UUID
    filename: str
    #: The file's path or key in its sync source; absent for a submitted or uploaded one.
    uri: str | None = None
    collection: str
    media_type: str
    ordinal: int
    generation: int
    kind: str
    page_start: int
    page_end: int
    section: str | None = None
    text: str
    #: The document's metadata (the user's key/values), as PostgreSQL has it now.
    metadata: dict[str, Any] = {}
    #: PDFs: where the text sits on its pages (one rectangle per column run of blocks).
    boxes: list[Box] = []
    #: A piece of a table (Markdown rows, its header row first).
    table: bool = False

    @property
    def chunk_id(self) -> str:
        """The chunk's key, ``<document id>:<ordinal>`` (the ``chunks`` table's primary
        key; the vector point's id is derived from the same pair)."""
        return f"{self.document_id}:{self.ordinal}"
