"""The engine's commands answer in one line at their doors (issue 39, items 14 and 15):
``failures --stage`` with a stage the pipeline lacks is a usage error naming the
stages, ``status`` still answers on the embedded defaults when the disk under the data
dir is full (a real full tmpfs; needs root to mount it), and ``--help`` says what
ragline reads."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.harness.cli import Cli
from runtime.cli.common import EXIT_OK, EXIT_USAGE
from tests.support.embedded_helpers import Child, EmbeddedCli

STAGES = "parse, chunk, vision, embed, index"


def test_failures_of_an_unknown_stage_is_a_usage_error(dsn: str, tmp_path: Path) -> None:
    cli = Cli(dsn, tmp_path / "data", tmp_path / "logs")
    result = cli.run("failures", "--stage", "bogus")
    assert result.code == EXIT_USAGE, result
    [line] = result.err_lines
    assert "bogus" in line and STAGES in line and "Traceback" not in result.err
    assert cli.run("failures", "--stage", "embed").code == EXIT_OK


def test_help_says_ragline_reads_more_than_pdfs() -> None:
    shown = subprocess.run(
        [sys.executable, "-m", "runtime", "--help"], capture_output=True, text=True, check=True
    ).stdout
    assert "PDFs to a vector index" not in shown
    assert all(kind in shown for kind in ("PDF", "DOCX", "HTML", "Markdown")), shown


@contextlib.contextmanager
def full_tmpfs(path: Path, size: str) -> Iterator[Path]:
    """A tmpfs at ``path`` (postgres may enter it); unmounted afterwards."""
    path.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(directory: Path) -> Path:
    filler = directory / "filler"
    with contextlib.suppress(OSError), filler.open("wb") as f:
        while True:
            f.write(b"\0" * 65536)
            f.flush()
    return filler


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
def test_status_answers_when_the_data_dir_disk_is_full(embedded_base: Path) -> None:
    with full_tmpfs(embedded_base / "disk", "64m") as disk:
        cli = EmbeddedCli("", disk / "data", embedded_base / "logs")
        cli.data_dir.mkdir()
        worker = Child(cli.data_dir)  # a process using the cluster, as a worker would
        try:
            assert cli.run("status").code == EXIT_OK  # migrated; its catalogs cached
            filler = fill(disk)
            full = cli.run("status")
            as_json = cli.run("status", "--json")
            filler.unlink()
            worker.release()
        finally:
            worker.close()
    assert full.code == EXIT_OK, full
    assert full.out_lines[0].startswith("stage") and "parse" in full.out
    assert [s["stage"] for s in as_json.json()][:1] == ["parse"], as_json
    assert "Traceback" not in full.err
    # It says once why it did not register as a user of the cluster.
    assert len(full.err_lines) == 1 and "no space" in full.err_lines[0].lower(), full
