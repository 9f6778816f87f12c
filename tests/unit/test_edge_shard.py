"""Embedded shards are created with one search thread."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import qdrant_edge as qe

from stages.edge_shard import SEARCH_THREADS, ensure_shard


def search_threads() -> int:
    """This process's qdrant-edge search pool threads (named ``edge-search-N``)."""
    tasks = Path("/proc/self/task")
    return sum((t / "comm").read_text().startswith("edge-search") for t in tasks.iterdir())


def test_a_new_shard_searches_with_one_thread(tmp_path: Path) -> None:
    ensure_shard(tmp_path / "c", 4)
    config = json.loads((tmp_path / "c" / "edge_config.json").read_text())
    assert config["max_search_threads"] == SEARCH_THREADS == 1
    before = search_threads() if sys.platform.startswith("linux") else 0
    shard = qe.EdgeShard.load(str(tmp_path / "c"))
    try:
        if sys.platform.startswith("linux"):
            assert search_threads() - before == 1
    finally:
        shard.close()
