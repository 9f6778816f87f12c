"""The engine's face for pipelines: typed worker options, explicit command registration,
the CLI's case-insensitive choices."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import click
import pytest

from runtime.cli.main import main
from runtime.cli.options import WorkerOptions
from stages.app import plugin
from stages.pipeline import STAGES


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No RAGLINE_* variable from the caller's shell changes a flag's default."""
    for name in list(os.environ):
        if name.startswith("RAGLINE_") or name == "DATABASE_URL":
            monkeypatch.delenv(name)


def parse(*args: str) -> click.Context:
    """main's parameters as click parses them (the command itself does not run)."""
    return main.make_context("ragline", list(args), resilient_parsing=False)


@pytest.mark.usefixtures("clean_env")
def test_worker_options_defaults_are_the_flags_defaults() -> None:
    assert WorkerOptions.from_params(parse().params) == WorkerOptions()


@pytest.mark.usefixtures("clean_env")
def test_worker_options_carry_the_flags_typed() -> None:
    ctx = parse(
        "--stages", "embed,index", "--lease", "60", "--retry-for", "30m", "--exit-when-idle"
    )
    options = WorkerOptions.from_params(ctx.params)
    assert options.stages == "embed,index"
    assert options.lease_s == 60.0
    assert options.retry_for_s == 1800.0
    assert options.exit_when_idle is True


@pytest.mark.usefixtures("clean_env")
@pytest.mark.parametrize("given", ["DEBUG", "Warning", "error"])
def test_log_level_is_case_insensitive(given: str) -> None:
    assert parse("--log-level", given).params["log_level"] == given.lower()


@pytest.mark.usefixtures("clean_env")
def test_log_level_from_the_environment_is_case_insensitive(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RAGLINE_LOG_LEVEL", "INFO")
    monkeypatch.setenv("RAGLINE_LOG_FORMAT", "JSON")
    params = parse().params
    assert (params["log_level"], params["log_format"]) == ("info", "json")


def test_engine_commands_need_no_side_effect_import() -> None:
    # A fresh interpreter that imports only the CLI's module sees every engine command.
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "from runtime.cli.main import main; print(' '.join(sorted(main.commands)))",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.split()
    assert out == ["db", "failures", "migrate", "retry", "status"]


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


def test_every_name_of_the_engines_face_resolves() -> None:
    import runtime.api as api

    assert api.__all__ == sorted(api._TABLE)  # the exports are the TYPE_CHECKING block's
    for name in api.__all__:
        assert getattr(api, name) is not None, name
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        api.Nope  # noqa: B018


def test_the_face_writes_each_name_once() -> None:
    """Each exported name appears once in runtime/api.py: in the block that both the type
    checker and the lazy table read, nowhere else."""
    import re

    import runtime.api as api

    source = Path(api.__file__).read_text()
    twice = [n for n in api.__all__ if len(re.findall(rf"\b{re.escape(n)}\b", source)) != 1]
    assert not twice, f"written more than once in runtime/api.py: {twice}"


def test_the_face_exports_functions_not_the_job_repository() -> None:
    import runtime.api as api

    assert "JobRepository" not in api.__all__
    assert {"enqueue_jobs", "cancel_document_jobs", "retry_failed_jobs"} <= set(api.__all__)
