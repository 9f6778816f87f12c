"""The engine's one face for pipelines: everything ``stages/`` (or any other pipeline) may
use from ``runtime/``, and nothing else.

An import-linter contract in ``pyproject.toml`` forbids ``stages/`` every other
``runtime`` module; the engine's rooms behind this face can move without breaking a
pipeline. Tests and benchmarks may import anything.

Names are imported on first use (PEP 562): a process that needs only the errors (the
parser process, ``stages.parser_child``) does not import the worker, asyncpg and the
CLI with them (0.17 s of its start-up).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

_HOMES: dict[str, str] = {
    "metrics": "runtime.metrics",
    "EXIT_FAILED": "runtime.cli_app",
    "EXIT_INTERRUPTED": "runtime.cli_app",
    "EXIT_OK": "runtime.cli_app",
    "EXIT_UNAVAILABLE": "runtime.cli_app",
    "EXIT_USAGE": "runtime.cli_app",
    "App": "runtime.cli_app",
    "guarded": "runtime.cli_app",
    "json_option": "runtime.cli_app",
    "parse_ids": "runtime.cli_app",
    "run_async": "runtime.cli_app",
    "WorkerOptions": "runtime.cli_options",
    "env_option": "runtime.cli_options",
    "worker_config": "runtime.cli_options",
    "stage_table": "runtime.commands",
    "timeline": "runtime.commands",
    "open_pool": "runtime.database",
    "CONNECTION_ERRORS": "runtime.dberrors",
    "is_storage_full": "runtime.dberrors",
    "DocumentRepository": "runtime.documents",
    "Submitted": "runtime.documents",
    "ConfigurationError": "runtime.errors",
    "InvalidDocument": "runtime.errors",
    "LeaseLost": "runtime.errors",
    "MissingInput": "runtime.errors",
    "PermanentError": "runtime.errors",
    "RaglineError": "runtime.errors",
    "RateLimited": "runtime.errors",
    "Snooze": "runtime.errors",
    "StageError": "runtime.errors",
    "StorageFull": "runtime.errors",
    "TransientError": "runtime.errors",
    "one_line": "runtime.errors",
    "DocumentEvent": "runtime.events",
    "EventHub": "runtime.events",
    "pending": "runtime.migrate",
    "Document": "runtime.models",
    "DocumentStatus": "runtime.models",
    "Job": "runtime.models",
    "JobRow": "runtime.models",
    "NewDocument": "runtime.models",
    "NewJob": "runtime.models",
    "escape_name": "runtime.names",
    "BuildContext": "runtime.plugin",
    "Plugin": "runtime.plugin",
    "ProviderSpec": "runtime.providers",
    "ProviderState": "runtime.providers",
    "JobRepository": "runtime.repository",
    "Pool": "runtime.repository",
    "to_struct": "runtime.repository",
    "MAX_SECONDS": "runtime.settings",
    "EnvReader": "runtime.settings",
    "Setting": "runtime.settings",
    "DbConn": "runtime.stage",
    "JobContext": "runtime.stage",
    "Pipeline": "runtime.stage",
    "Stage": "runtime.stage",
    "StageStatus": "runtime.status",
    "progress": "runtime.status",
    "Worker": "runtime.worker",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = importlib.import_module(home)
    value = module if home == f"runtime.{name}" else getattr(module, name)
    globals()[name] = value  # the next lookup is a plain one
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


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
