"""The real-PDF corpus (:mod:`bench.harness.corpus`) for tests.

Each accessor skips the calling test with the command to run when the corpus is missing,
so a fresh checkout's test run still passes and says what it did not check.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.harness.corpus import BROKEN_KINDS, CORPUS_DIR, corpus_ready

_FETCH_HINT = "corpus not fetched: run tests/corpus/fetch.sh"


def corpus_pdfs(min_count: int = 1) -> list[Path]:
    """The distinct real PDFs, sorted by name; skip unless there are at least ``min_count``."""
    pdfs = sorted((CORPUS_DIR / "pdfs").glob("*.pdf")) if corpus_ready() else []
    if len(pdfs) < min_count:
        pytest.skip(f"{_FETCH_HINT} (found {len(pdfs)} PDFs, need {min_count})")
    return pdfs


def broken_pdfs() -> dict[str, Path]:
    """Broken variants by kind: truncated, zero-byte, encrypted, not-a-pdf, garbage, corrupt."""
    found = {kind: CORPUS_DIR / "broken" / f"{kind}.pdf" for kind in BROKEN_KINDS}
    if not corpus_ready() or not all(p.is_file() for p in found.values()):
        pytest.skip(_FETCH_HINT)
    return found


def big_pdf() -> Path:
    """A 2,000-page PDF concatenated from corpus documents, for memory tests."""
    path = CORPUS_DIR / "big" / "big-2000.pdf"
    if not corpus_ready() or not path.is_file():
        pytest.skip(_FETCH_HINT)
    return path
