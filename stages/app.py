"""ragline's RAG pipeline as a plugin of the engine (what ``python -m runtime`` loads)."""

from __future__ import annotations

from runtime.plugin import Plugin
from stages import cli
from stages.pipeline import DEFAULT_CONCURRENCY, STAGES, build
from stages.serve.cli import serve
from stages.settings import PIPELINE_SETTINGS

plugin = Plugin(
    stage_names=STAGES,
    build=build,
    default_concurrency=DEFAULT_CONCURRENCY,
    commands=[*cli.COMMANDS, serve],
    settings=PIPELINE_SETTINGS,
)
