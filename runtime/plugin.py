"""How a pipeline plugs into the engine's CLI without the engine importing it.

The CLI loads ``RAGLINE_PIPELINE`` (``module:attribute``, default ``stages.app:plugin``)
with importlib; the attribute is a :class:`Plugin`. This keeps ``runtime/`` free of
pipeline imports while ``python -m runtime`` still runs the RAG pipeline by default.
"""

from __future__ import annotations

import importlib
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path

import click
import msgspec

from runtime.errors import ConfigurationError
from runtime.jobs.postgres import Pool
from runtime.settings import Setting
from runtime.stage import Pipeline

DEFAULT_PIPELINE = "stages.app:plugin"


class BuildContext(msgspec.Struct, frozen=True, kw_only=True):
    """What a pipeline factory gets: where to keep local state and the environment."""

    data_dir: Path
    env: Mapping[str, str]


class Plugin(msgspec.Struct, frozen=True, kw_only=True):
    #: The stage names in order, known without building services.
    stage_names: tuple[str, ...]
    build: Callable[[BuildContext], Pipeline]
    default_concurrency: Mapping[str, int] = msgspec.field(default_factory=dict)
    #: The pipeline's commands (submit, ingest, search, ...), registered by the CLI next to
    #: the engine's. They get the :class:`runtime.cli.common.App` as their click object.
    commands: Sequence[click.Command] = ()
    #: The pipeline's rows of the settings table (:class:`runtime.settings.Setting`),
    #: checked with the engine's before anything starts.
    settings: Sequence[Setting] = ()
    #: Extra lines for ``status``: ``(pool, None)`` for the overview, ``(pool, document
    #: id)`` for one document's timeline (facts only the pipeline knows).
    status_notes: Callable[[Pool, uuid.UUID | None], Awaitable[list[str]]] | None = None


def load_plugin(spec: str) -> Plugin:
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ConfigurationError(f"pipeline must look like 'module:attribute', got {spec!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigurationError(f"cannot import pipeline module {module_name!r}: {exc}") from exc
    plugin = getattr(module, attr, None)
    if not isinstance(plugin, Plugin):
        raise ConfigurationError(f"{spec} is not a runtime.plugin.Plugin")
    return plugin
