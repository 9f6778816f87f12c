"""runtime.process.heap: the malloc arena cap of worker processes."""

from __future__ import annotations

import subprocess
import sys

import pytest

from runtime.process.heap import limit_malloc_arenas


def test_the_environment_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert limit_malloc_arenas() is False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc only")
def test_the_cap_is_set_in_a_fresh_process() -> None:
    code = "from runtime.process.heap import limit_malloc_arenas as f; print(f())"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True,
        env={"PATH": "/usr/bin:/bin"},
    ).stdout.strip()  # fmt: skip
    assert out == "True"
