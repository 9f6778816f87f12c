"""bench.default_path's pure parts: the process tree it sums, the embed loop's batches, the
share it reports, its flags."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from bench.default_path import DEFAULT_DOCS, QUICK_DOCS, parse_args, share
from bench.harness.default_path_loop import embed_batches
from bench.harness.default_path_rss import TreeRss, descendants, tree_rss_kb

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc")


def test_descendants_are_the_whole_subtree_below_the_root() -> None:
    parents = {2: 1, 3: 2, 4: 3, 5: 2, 6: 1, 7: 99, 2000: 7}
    assert descendants(parents, 2) == {3, 4, 5}
    assert descendants(parents, 1) == {2, 3, 4, 5, 6}
    assert descendants(parents, 4) == set()


# ``holder.py MB [CHILD_MB]``: holds MB, starts itself holding CHILD_MB, says "ready"
# once all memory is touched, and waits for stdin to close.
_HOLDER = textwrap.dedent(
    """
    import subprocess, sys
    held = bytearray(int(sys.argv[1]) << 20)
    held[::4096] = b"1" * len(held[::4096])
    child = None
    if len(sys.argv) > 2:
        child = subprocess.Popen([sys.executable, __file__, sys.argv[2]],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        child.stdout.readline()
    print("ready", flush=True)
    sys.stdin.read()
    if child:
        child.stdin.close()
        child.wait()
    """
)


@linux
def test_tree_rss_sums_every_process_below_the_root(tmp_path: Path) -> None:
    holder = tmp_path / "holder.py"
    holder.write_text(_HOLDER)
    # root: a plain interpreter running the 40 MB holder, which runs the 80 MB one.
    with subprocess.Popen(
        [sys.executable, "-c", "import subprocess, sys; subprocess.run(sys.argv[1:])",
         sys.executable, str(holder), "40", "80"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
    ) as root:  # fmt: skip
        assert root.stdin is not None and root.stdout is not None
        try:
            assert root.stdout.readline().strip() == b"ready"
            total_mb = tree_rss_kb(root.pid) / 1024
            with TreeRss(root.pid, every_s=0.01) as peak:
                pass
        finally:
            root.stdin.close()
            root.wait(30)
    # 40 + 80 MB held below the root (plus two interpreters); the larger alone is < 110.
    assert 120 <= total_mb < 400
    assert peak.max_mb >= 120
    # Where the peak was: each kind of process's share (the two holders, summed).
    assert set(peak.max_parts) == {"holder.py"}
    assert peak.max_parts["holder.py"] / 1024 >= 120
    assert peak.started <= peak.max_at


def test_embed_batches_are_per_document_distinct_texts_cut_at_max_batch() -> None:
    a, b = uuid.uuid4(), uuid.uuid4()
    rows = [
        (a, "s1", "one"),
        (a, "s2", "two"),
        (a, "s1", "one"),
        (a, "s3", "three"),
        (b, "s2", "two"),
        (b, "s4", "four"),
    ]
    assert embed_batches(rows, 2) == [["one", "two"], ["three"], ["four"]]
    assert embed_batches([], 64) == []


def test_share_is_a_fraction_of_the_loop_and_zero_without_one() -> None:
    assert share(17.0, 20.0) == pytest.approx(0.85)
    assert share(5.0, 0.0) == 0.0


def test_flags() -> None:
    assert parse_args([]).docs == DEFAULT_DOCS
    assert parse_args(["--quick"]).docs == QUICK_DOCS
    assert parse_args(["--quick", "--docs", "7"]).docs == 7
    with pytest.raises(SystemExit):
        parse_args(["--docs", "0"])
