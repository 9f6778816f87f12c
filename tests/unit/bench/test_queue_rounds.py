"""bench.queue's order of runs and its flags: a warm-up run each, then rounds whose order
turns, so each contender goes first in turn."""

from __future__ import annotations

from collections import Counter

from bench.queue import TRACE_REPEAT, parse_args, warm_up_then_turns


def test_each_contender_warms_up_once_unmeasured_then_runs_every_round() -> None:
    order = warm_up_then_turns(4, 5)
    assert order[:4] == [(0, False), (1, False), (2, False), (3, False)]
    measured = [i for i, m in order[4:] if m]
    assert len(measured) == len(order) - 4 == 20
    assert Counter(measured) == dict.fromkeys(range(4), 5)


def test_rounds_turn_so_every_contender_goes_first_once() -> None:
    rounds = [[i for i, _ in warm_up_then_turns(3, 3)[3 + 3 * r : 6 + 3 * r]] for r in range(3)]
    assert [r[0] for r in rounds] == [0, 1, 2]
    assert all(sorted(r) == [0, 1, 2] for r in rounds)


def test_repeat_sets_the_tracing_rounds_too_and_quick_keeps_them_short() -> None:
    assert parse_args(["--parts", "trace"]).trace_repeat == TRACE_REPEAT
    assert parse_args(["--repeat", "3"]).trace_repeat == 3
    assert parse_args(["--quick"]).trace_repeat == 1
