"""Typed rows the engine reads and writes (msgspec structs; asyncpg records stay in
:mod:`runtime.jobs.postgres`)."""

from __future__ import annotations

import enum
import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import msgspec


def fields_of(kind: type[msgspec.Struct], values: Mapping[str, Any]) -> dict[str, Any]:
    """The entries of ``values`` that are fields of ``kind``: one row's struct built from
    another's."""
    return {k: v for k, v in values.items() if k in kind.__struct_fields__}


class JobState(enum.StrEnum):
    """Mirrors the ``ragline_job_state`` PostgreSQL enum."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


class DocumentStatus(enum.StrEnum):
    """Mirrors the ``ragline_document_status`` PostgreSQL enum."""

    PENDING = "pending"
    PROCESSING = "processing"
    READY = "ready"
    FAILED = "failed"


class Job(msgspec.Struct, frozen=True, kw_only=True):
    """A claimed stage job, as the worker and the stage see it."""

    id: int
    document_id: uuid.UUID
    stage: str
    generation: int
    attempts: int
    max_attempts: int
    lease_token: uuid.UUID
    lease_expires_at: datetime
    created_at: datetime
    filename: str = ""
    #: The W3C ``traceparent`` of its document's trace (None: untraced; docs/tracing.md).
    trace_context: str | None = None


class NewJob(msgspec.Struct, frozen=True, kw_only=True):
    """A job to enqueue."""

    document_id: uuid.UUID
    stage: str
    generation: int = 1
    priority: int = 0
    max_attempts: int = 3
    #: The trace it belongs to (W3C ``traceparent``); None: :func:`runtime.jobs.postgres.
    #: enqueue_jobs` takes the current span's, or starts a trace of its own.
    trace_context: str | None = None


class NewDocument(msgspec.Struct, frozen=True, kw_only=True):
    filename: str
    media_type: str
    byte_size: int
    sha256: str
    asset_key: str | None = None
    forced: bool = False
    id: uuid.UUID = msgspec.field(default_factory=uuid.uuid4)
    #: The collection (tenant) the document belongs to.
    collection: str = "default"

    def leading_values(self) -> tuple[uuid.UUID, str, str, int, str, str | None]:
        """$1-$6 of every query that inserts a document: id, filename, media type, byte
        size, sha256, asset key."""
        return (
            self.id,
            self.filename,
            self.media_type,
            self.byte_size,
            self.sha256,
            self.asset_key,
        )


class Document(msgspec.Struct, frozen=True, kw_only=True):
    id: uuid.UUID
    filename: str
    media_type: str
    byte_size: int
    sha256: str
    asset_key: str | None
    status: DocumentStatus
    stage: str | None
    error: str | None
    generation: int
    created_at: datetime
    updated_at: datetime
    collection: str = "default"


class JobRow(msgspec.Struct, frozen=True, kw_only=True):
    """A ``stage_jobs`` row in full, for status and tests."""

    id: int
    document_id: uuid.UUID
    stage: str
    generation: int
    state: JobState
    attempts: int
    max_attempts: int
    lost: int
    priority: int
    run_after: datetime
    lease_owner: str | None
    lease_token: uuid.UUID | None
    lease_expires_at: datetime | None
    last_error: str | None
    error_kind: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    trace_context: str | None = None


class Failure(msgspec.Struct, frozen=True, kw_only=True):
    """How a job's attempt failed, as the worker reports it."""

    message: str
    kind: str
    permanent: bool
    retry_after_s: float | None = None
