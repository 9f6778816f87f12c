"""Embedded shards are created with one search thread, with the keyword side or (as
before hybrid search, for benchmarks) without it."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import anyio
import pytest

from stages.adapters.vector_index.edge.index import EdgeIndex, EdgeIndexConfig
from stages.adapters.vector_index.edge.shard import SEARCH_THREADS, ensure_shard

# Loads the shard in a process of its own and prints how many qdrant-edge search pool
# threads (named ``edge-search-N``) it then has: in the test process, the pools of other
# tests' shards may still be winding down and be counted. The pool's threads start (and
# name themselves) after ``load`` returns, so the count is taken once the first is there
# and the others have had time to start (a count taken at once read 0 in a CI run).
_COUNT_SEARCH_THREADS = textwrap.dedent(
    """
    import sys
    import time
    from pathlib import Path
    import qdrant_edge as qe

    def count():
        tasks = Path("/proc/self/task")
        names = []
        for task in tasks.iterdir():
            try:
                names.append((task / "comm").read_text())
            except OSError:  # a thread that ended meanwhile
                pass
        return sum(name.startswith("edge-search") for name in names)

    shard = qe.EdgeShard.load(sys.argv[1])
    deadline = time.monotonic() + 10
    while count() == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.5)
    print(count())
    shard.close()
    """
)


def test_a_new_shard_is_configured_with_one_search_thread(tmp_path: Path) -> None:
    ensure_shard(tmp_path / "c", 4)
    config = json.loads((tmp_path / "c" / "edge_config.json").read_text())
    assert config["max_search_threads"] == SEARCH_THREADS == 1


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="threads read from /proc")
def test_loading_a_new_shard_starts_one_search_thread(tmp_path: Path) -> None:
    ensure_shard(tmp_path / "c", 4)
    out = subprocess.run(
        [sys.executable, "-c", _COUNT_SEARCH_THREADS, str(tmp_path / "c")],
        capture_output=True,
        text=True,
        check=True,
    )
    assert int(out.stdout.strip()) == SEARCH_THREADS


def test_a_shard_has_the_keyword_side_unless_made_without(tmp_path: Path) -> None:
    """The index stage asks, and reads and builds no keywords for a shard without them."""
    ensure_shard(tmp_path / "ragline_with", 4)
    ensure_shard(tmp_path / "ragline_dense", 4, keywords=False)
    index = EdgeIndex(EdgeIndexConfig(root=tmp_path))

    async def sides() -> tuple[bool, bool]:
        return (
            await index.has_keywords("ragline_with"),
            await index.has_keywords("ragline_dense"),
        )

    assert anyio.run(sides) == (True, False)
