"""runtime.process.interpreter: a worker's CPython settings."""

from __future__ import annotations

import gc
import sys

from runtime.process.interpreter import (
    YOUNG_THRESHOLD,
    freeze_startup_objects,
    tune_worker_interpreter,
)


def test_start_up_objects_are_frozen_out_of_collections() -> None:
    class Alive:
        pass

    alive = Alive()
    try:
        frozen = freeze_startup_objects()
        # (A frozen object freed since leaves the count: no exact equality.)
        assert frozen > 0
        assert gc.get_freeze_count() > 0
        # What was alive at the freeze is no longer tracked by any generation.
        assert not any(o is alive for o in gc.get_objects())
    finally:
        gc.unfreeze()


def test_a_worker_keeps_cpythons_gil_turns_and_freezes_its_start_up() -> None:
    before = sys.getswitchinterval()
    thresholds = gc.get_threshold()
    try:
        tune_worker_interpreter()
        assert sys.getswitchinterval() == before
        assert gc.get_freeze_count() > 0
        # Young collections less often; the older generations as CPython set them.
        assert gc.get_threshold() == (YOUNG_THRESHOLD, *thresholds[1:])
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)
