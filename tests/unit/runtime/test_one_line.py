"""runtime.errors.one_line: an error message is one line of bounded length."""

from __future__ import annotations

from runtime.errors import one_line


def test_one_line_collapses_and_truncates() -> None:
    assert one_line("a\n  b\tc") == "a b c"
    assert len(one_line("x" * 1000, limit=50)) == 50
