"""The engine's commands are registered by importing the CLI's module alone."""

from __future__ import annotations

import subprocess
import sys


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
