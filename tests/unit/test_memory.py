"""runtime.memory: the malloc arena cap of worker processes."""

from __future__ import annotations

import subprocess
import sys

import pytest

from runtime.memory import limit_malloc_arenas


def test_the_environment_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert limit_malloc_arenas() is False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc only")
def test_the_cap_is_set_in_a_fresh_process() -> None:
    code = "from runtime.memory import limit_malloc_arenas as f; print(f())"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True,
        env={"PATH": "/usr/bin:/bin"},
    ).stdout.strip()  # fmt: skip
    assert out == "True"


def test_start_up_objects_are_frozen_out_of_collections() -> None:
    import gc

    from runtime.memory import freeze_startup_objects

    class Alive:
        pass

    alive = Alive()
    try:
        frozen = freeze_startup_objects()
        assert frozen == gc.get_freeze_count() > 0
        # What was alive at the freeze is no longer tracked by any generation.
        assert not any(o is alive for o in gc.get_objects())
    finally:
        gc.unfreeze()
