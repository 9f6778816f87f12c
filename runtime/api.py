"""The engine's one face for pipelines: everything ``stages/`` (or any other pipeline) may
use from ``runtime/``, and nothing else.

Each name is written once, in the ``TYPE_CHECKING`` block below: type checkers read the
imports there, and at run time :func:`_lazy_table` reads the same block (this module's
own source) into ``__all__`` and the table that imports each name on first use (PEP 562).
So a process that needs only the errors (the parser process) does not import the worker,
asyncpg and the CLI with them. An import-linter contract forbids ``stages/`` every other
``runtime`` module; the rooms behind this face can move without breaking a pipeline.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from runtime.cli.commands import stage_table, timeline
    from runtime.cli.common import (
        EXIT_FAILED,
        EXIT_INTERRUPTED,
        EXIT_OK,
        EXIT_UNAVAILABLE,
        EXIT_USAGE,
        App,
        guarded,
        json_option,
        run_async,
    )
    from runtime.cli.options import WorkerOptions, env_option, worker_config
    from runtime.cli.refs import parse_refs, resolve_refs
    from runtime.db.connect import open_pool
    from runtime.db.errors import CONNECTION_ERRORS, is_database_unreachable, is_storage_full
    from runtime.db.migrate import pending
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
        first_leaf,
        one_line,
    )
    from runtime.jobs.documents import DocumentRepository, Submitted
    from runtime.jobs.events import DocumentEvent, EventHub
    from runtime.jobs.postgres import (
        Pool,
        cancel_document_jobs,
        document_transaction,
        enqueue_jobs,
        retry_failed_jobs,
        to_struct,
    )
    from runtime.jobs.status import StageStatus, progress
    from runtime.models import Document, DocumentStatus, Job, JobRow, NewDocument, NewJob
    from runtime.plugin import BuildContext, Plugin
    from runtime.process import metrics
    from runtime.process.cpu import inference_limiter, inference_slots, usable_cores
    from runtime.process.heap import release_free_heap
    from runtime.process.names import escape_name
    from runtime.process.tracing import annotate, document_span, traceparent_of
    from runtime.providers.backoff import parse_retry_after
    from runtime.providers.gate import Providers
    from runtime.providers.specs import ProviderSpec, ProviderState
    from runtime.settings import MAX_SECONDS, EnvReader, Setting
    from runtime.stage import DbConn, JobContext, Pipeline, Stage
    from runtime.worker.worker import Worker


def _lazy_table() -> dict[str, tuple[str, str]]:
    """Each exported name → (its module, its name there), read from the block above."""
    tree = ast.parse(Path(__file__).read_text(encoding="utf-8"))
    block = next(
        node
        for node in tree.body
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
    )
    return {
        alias.asname or alias.name: (stmt.module or "", alias.name)
        for stmt in block.body
        if isinstance(stmt, ast.ImportFrom)
        for alias in stmt.names
    }


_TABLE = _lazy_table()
if not TYPE_CHECKING:  # type checkers take the exports from the block above
    __all__ = sorted(_TABLE)


def __getattr__(name: str) -> Any:
    home = _TABLE.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module_name, attribute = home
    module = importlib.import_module(module_name)
    value = getattr(module, attribute, None)
    if value is None:  # a submodule exported by name, not yet imported
        value = importlib.import_module(f"{module_name}.{attribute}")
    globals()[name] = value  # the next lookup is a plain one
    return value


def __dir__() -> list[str]:
    return sorted(_TABLE)
