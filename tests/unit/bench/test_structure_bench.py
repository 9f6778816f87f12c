"""bench.structure on the made PDFs (no corpus): its floors hold, and its checks can fail."""

from __future__ import annotations

import pytest

from bench import structure
from bench.harness.made_pdfs import MadeTable
from stages.text.structure import StructuredChunk


def test_the_floors_hold_on_the_made_pdfs(capsys: pytest.CaptureFixture[str]) -> None:
    assert structure.main(["--docs", "0"]) == 0
    out = capsys.readouterr().out
    assert "(100.0%; floor 100%)" in out
    assert "table cells, ragline: precision 1.000, recall 1.000, F1 1.000" in out


def test_a_piece_without_its_header_is_counted_against() -> None:
    truth = {"t": MadeTable(["A", "B"], [["1", "2"]], [1])}
    piece = StructuredChunk(
        text="| 1 | 2 |", page_start=1, page_end=1, sha256="", tokens=1, section=None,
        boxes=[], table=True,
    )  # fmt: skip
    assert structure.header_share([piece], truth) == (0, 1)
