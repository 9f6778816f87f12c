"""Local OCR's detection budget: passes over large pictures run one at a time, small ones
side by side (stages.adapters.vision.ocr.PixelBudget)."""

from __future__ import annotations

import threading

from stages.adapters.vision.ocr import PixelBudget


def test_small_passes_share_the_budget() -> None:
    budget = PixelBudget(1000)
    with budget.hold(400), budget.hold(500):
        assert budget.held == 900
    assert budget.held == 0


def test_a_pass_larger_than_the_budget_runs_alone() -> None:
    budget = PixelBudget(1000)
    with budget.hold(5000):
        assert budget.held == 5000
    assert budget.held == 0


def test_a_pass_waits_until_the_budget_has_room() -> None:
    budget = PixelBudget(1000)
    entered, release = threading.Event(), threading.Event()

    def second() -> None:
        with budget.hold(700):
            entered.set()
            release.wait(10)

    with budget.hold(700):
        waiter = threading.Thread(target=second)
        waiter.start()
        # Would the second pass (700 + 700 > 1000) start beside the first, this catches it.
        assert not entered.wait(0.3)
        assert budget.held == 700
    assert entered.wait(10)
    assert budget.held == 700
    release.set()
    waiter.join(10)
    assert budget.held == 0


def test_the_budget_is_released_when_a_pass_fails() -> None:
    budget = PixelBudget(1000)
    try:
        with budget.hold(800):
            raise RuntimeError("model failed")
    except RuntimeError:
        pass
    assert budget.held == 0
