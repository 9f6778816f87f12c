"""The pipeline's commands as the engine CLI takes them: click commands with names of
their own, and reprocess offering the pipeline's stages."""

from __future__ import annotations

import click

from runtime.cli.main import main
from stages.app import plugin
from stages.pipeline import STAGES


def test_plugin_commands_are_click_commands_with_distinct_names() -> None:
    names = [c.name for c in plugin.commands]
    assert all(isinstance(c, click.Command) for c in plugin.commands)
    assert len(set(names)) == len(names)
    assert not set(names) & set(main.commands)


def test_reprocess_offers_the_pipelines_stages() -> None:
    [reprocess] = [c for c in plugin.commands if c.name == "reprocess"]
    [from_stage] = [p for p in reprocess.params if p.name == "from_stage"]
    assert isinstance(from_stage.type, click.Choice)
    assert tuple(from_stage.type.choices) == STAGES
