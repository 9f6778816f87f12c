"""The engine's one face for pipelines: everything ``stages/`` (or any other pipeline) may
use from ``runtime/``, and nothing else.

An import-linter contract in ``pyproject.toml`` forbids ``stages/`` every other
``runtime`` module; the engine's rooms behind this face can move without breaking a
pipeline. Tests and benchmarks may import anything.
"""

from __future__ import annotations

from runtime import metrics
from runtime.cli_app import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    App,
    guarded,
    json_option,
    parse_ids,
    run_async,
)
from runtime.cli_options import WorkerOptions, env_option, worker_config
from runtime.commands import stage_table, timeline
from runtime.database import open_pool
from runtime.dberrors import CONNECTION_ERRORS, is_storage_full
from runtime.documents import DocumentRepository, Submitted
from runtime.errors import (
    ConfigurationError,
    InvalidDocument,
    LeaseLost,
    MissingInput,
    PermanentError,
    RaglineError,
    RateLimited,
    Snooze,
    StageError,
    StorageFull,
    TransientError,
    one_line,
)
from runtime.events import DocumentEvent, EventHub
from runtime.migrate import pending
from runtime.models import Document, DocumentStatus, Job, JobRow, NewDocument, NewJob
from runtime.names import escape_name
from runtime.plugin import BuildContext, Plugin
from runtime.providers import ProviderSpec, ProviderState
from runtime.repository import JobRepository, Pool, to_struct
from runtime.settings import MAX_SECONDS, EnvReader, Setting
from runtime.stage import DbConn, JobContext, Pipeline, Stage
from runtime.status import StageStatus, progress
from runtime.worker import Worker

__all__ = [
    "CONNECTION_ERRORS",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_UNAVAILABLE",
    "EXIT_USAGE",
    "MAX_SECONDS",
    "App",
    "BuildContext",
    "ConfigurationError",
    "DbConn",
    "Document",
    "DocumentEvent",
    "DocumentRepository",
    "DocumentStatus",
    "EnvReader",
    "EventHub",
    "InvalidDocument",
    "Job",
    "JobContext",
    "JobRepository",
    "JobRow",
    "LeaseLost",
    "MissingInput",
    "NewDocument",
    "NewJob",
    "PermanentError",
    "Pipeline",
    "Plugin",
    "Pool",
    "ProviderSpec",
    "ProviderState",
    "RaglineError",
    "RateLimited",
    "Setting",
    "Snooze",
    "Stage",
    "StageError",
    "StageStatus",
    "StorageFull",
    "Submitted",
    "TransientError",
    "Worker",
    "WorkerOptions",
    "env_option",
    "escape_name",
    "guarded",
    "is_storage_full",
    "json_option",
    "metrics",
    "one_line",
    "open_pool",
    "parse_ids",
    "pending",
    "progress",
    "run_async",
    "stage_table",
    "timeline",
    "to_struct",
    "worker_config",
]
