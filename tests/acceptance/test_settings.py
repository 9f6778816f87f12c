"""Every setting in the README's configuration table is checked before anything starts.

Table-driven: each row of :data:`runtime.settings.ENGINE_SETTINGS` and of the pipeline's
table carries the values it must refuse; every one of them, and an empty value, must end
the command with exit 2 and one line naming the variable, no traceback, before the
database starts or a job is claimed. The CLI runs in-process here (one subprocess per
case would cost minutes); ``test_real_processes`` runs a sample as real subprocesses.
"""

from __future__ import annotations

import os
import re
import socket
from pathlib import Path

import pytest
from click.testing import CliRunner

from bench.harness.cli import Cli
from bench.harness.db import sql
from bench.harness.procs import REPO
from runtime.cli.common import EXIT_USAGE
from runtime.cli.main import main
from runtime.settings import ENGINE_SETTINGS, Setting
from stages.settings import PIPELINE_SETTINGS

TABLE: tuple[Setting, ...] = (*ENGINE_SETTINGS, *PIPELINE_SETTINGS)
CASES = [
    pytest.param(s.name, value, id=f"{s.name}={value!r}")
    for s in TABLE
    for value in (*s.bad_examples, *(() if s.empty_ok else ("",)))
]


def readme_variables() -> set[str]:
    text = (REPO / "README.md").read_text()
    section = text.split("## Configuration", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    return {name for row in rows for name in re.findall(r"`([A-Z][A-Z0-9_]+)`", row.split("|")[1])}


def run_in_process(tmp_path: Path, env: dict[str, str], *args: str) -> tuple[int, str]:
    clean: dict[str, str | None] = {
        k: None for k in os.environ if k.startswith(("RAGLINE_", "COHERE_", "MINIO_", "QDRANT_"))
    }
    clean["DATABASE_URL"] = None
    result = CliRunner().invoke(
        main, ["--data-dir", str(tmp_path / "data"), *args], env={**clean, **env}
    )
    return result.exit_code, result.stderr


def test_the_table_covers_every_variable_in_the_readme() -> None:
    names = {s.name for s in TABLE}
    missing = readme_variables() - names
    assert not missing, f"README variables without a row in the settings table: {missing}"
    assert len(readme_variables()) >= 30


def test_every_row_refuses_something() -> None:
    for setting in TABLE:
        assert setting.bad_examples or not setting.empty_ok, setting.name


@pytest.mark.parametrize(("name", "value"), CASES)
def test_bad_value_is_one_line_and_exit_2(tmp_path: Path, name: str, value: str) -> None:
    code, err = run_in_process(tmp_path, {name: value}, "status")
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == EXIT_USAGE, (code, err)
    assert len(lines) == 1, err
    assert name in lines[0] and "Traceback" not in err
    assert not (tmp_path / "data").exists(), "nothing may start before the settings are checked"


@pytest.mark.parametrize(
    ("env", "args", "expected"),
    [
        ({"RAGLINE_EMBEDDER": "cohere"}, (), "COHERE_API_KEY"),
        ({"RAGLINE_VISION": "cohere"}, ("--stages", "vision"), "COHERE_API_KEY"),
        ({"RAGLINE_HEARTBEAT_S": "90"}, (), "RAGLINE_HEARTBEAT_S"),
        (
            {"RAGLINE_CHUNK_TOKENS": "100", "RAGLINE_CHUNK_OVERLAP_TOKENS": "80"},
            (),
            "RAGLINE_CHUNK_OVERLAP_TOKENS",
        ),
        ({"RAGLINE_STAGES": "parse,bogus"}, (), "RAGLINE_STAGES"),
        ({"RAGLINE_CONCURRENCY": "vision=2", "RAGLINE_STAGES": "parse"}, (), "CONCURRENCY"),
        ({}, ("--lease", "nan"), "--lease (RAGLINE_LEASE_S)"),
        ({}, ("--concurrency", "99999999"), "RAGLINE_CONCURRENCY"),
    ],
)
def test_combinations_and_services_are_checked_at_start(
    tmp_path: Path, env: dict[str, str], args: tuple[str, ...], expected: str
) -> None:
    """Worker mode: services that cannot be built stop the worker before the database
    starts (no data dir appears), instead of failing every document it claims."""
    code, err = run_in_process(tmp_path, env, *args)
    assert code == EXIT_USAGE, (code, err)
    assert len(err.strip().splitlines()) == 1 and expected in err, err
    assert not (tmp_path / "data" / "pg").exists()


def test_real_processes(tmp_path: Path, dsn: str) -> None:
    """As a user meets them: subprocesses, exit 2, one line; a metrics port in use too.
    Documents are queued first: a misconfigured worker must not claim any of them."""
    cli = Cli(dsn, tmp_path / "data", tmp_path / "logs")
    assert cli.run("submit", "samples/").code == 0
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = str(busy.getsockname()[1])
        cases = [
            (cli.start("--metrics-port", port, "--exit-when-idle"), f"127.0.0.1:{port}"),
            (cli.start("ingest", "samples/", RAGLINE_EMBEDDER="cohere"), "COHERE_API_KEY"),
            (cli.start("status", RAGLINE_LEASE_S="nan"), "RAGLINE_LEASE_S"),
            (cli.start("--exit-when-idle", RAGLINE_RESCUE_S="0"), "RAGLINE_RESCUE_S"),
            (cli.start("--exit-when-idle", RAGLINE_EMBEDDER="cohere"), "COHERE_API_KEY"),
            (cli.start("--exit-when-idle", RAGLINE_VISION="foo"), "RAGLINE_VISION"),
        ]
        for running, expected in cases:
            result = running.wait()
            assert result.code == EXIT_USAGE, result
            assert len(result.err_lines) == 1 and expected in result.err, result
            assert "Traceback" not in result.err
    # None of them touched the queue: a typo fails no document.
    assert sql(dsn, "SELECT count(*) FROM stage_jobs WHERE attempts > 0")[0][0] == 0
