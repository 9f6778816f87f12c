"""bench.harness.rusage: a benchmark's child reports its own peak RSS, not its parent's."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux rusage")

REPO = Path(__file__).resolve().parents[3]

# A parent holding 200 MB starts a child that holds 20 MB, directly and through the
# launcher, and prints what wait4 and the launcher said of the child's peak (MB).
_PARENT = textwrap.dedent(
    """
    import json, os, subprocess, sys, tempfile
    held = bytearray(200 * 1024 * 1024)
    held[::4096] = b"1" * len(held[::4096])
    child = [sys.executable, "-c", "x = bytearray(20 << 20); x[::4096] = b'1' * len(x[::4096])"]
    proc = subprocess.Popen(child)
    direct = os.wait4(proc.pid, 0)[2].ru_maxrss // 1024
    fd, out = tempfile.mkstemp(); os.close(fd)
    subprocess.run([sys.executable, "-m", "bench.harness.rusage", out, *child], check=True)
    report = json.load(open(out)); os.unlink(out)
    print(json.dumps([direct, report["max_rss_kb"] // 1024, report["exit_code"]]))
    """
)


def test_the_launcher_reports_the_childs_own_peak() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _PARENT], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    direct, launched, code = json.loads(out)
    assert direct >= 200  # the kernel carries the parent's peak over to its child
    assert 20 <= launched < 100  # the child's own: its 20 MB and an interpreter
    assert code == 0


def test_the_launcher_exits_as_its_command_did(tmp_path: Path) -> None:
    report = tmp_path / "rusage.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench.harness.rusage", str(report), sys.executable, "-c",
         "raise SystemExit(3)"],
        cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 3
    assert json.loads(report.read_text())["exit_code"] == 3
