"""Where ``tests/corpus/fetch.sh`` puts the real-PDF corpus, for tests and benchmarks."""

from __future__ import annotations

from bench.harness.procs import REPO

CORPUS_DIR = REPO / "tests" / "corpus" / "cache"
BROKEN_KINDS = ("truncated", "zero-byte", "encrypted", "not-a-pdf", "garbage", "corrupt")


def corpus_ready() -> bool:
    return (CORPUS_DIR / ".complete").is_file()
