"""A folder as a sync source: what its listing takes, skips (one line each) and says of
the folder itself, and that a read stops when its caller is cancelled."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest

from bench.harness.procs import REPO
from runtime.api import ConfigurationError, InvalidDocument
from stages.adapters.sources.folder import FolderScanner

GiB = 1 << 30


def listing_of(root: Path) -> tuple[list[str], list[str], FolderScanner]:
    scanner = FolderScanner(root)
    listing = anyio.run(scanner.list)
    return sorted(listing.entries), listing.skipped, scanner


def test_special_files_are_skipped_saying_what_they_are(tmp_path: Path) -> None:
    (tmp_path / "a.pdf").write_bytes(b"%PDF-1.7\n")
    os.mkfifo(tmp_path / "pipe.pdf")
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(tmp_path / "sock.md"))
    (tmp_path / "null.txt").symlink_to("/dev/null")
    (tmp_path / "folder.pdf").symlink_to(tmp_path)
    entries, skipped, _ = listing_of(tmp_path)
    assert entries == ["a.pdf"]
    assert sorted(skipped) == [
        "folder.pdf: a link to a folder (not followed)",
        "null.txt: a character device, not a file",
        "pipe.pdf: a FIFO (named pipe), not a file",
        "sock.md: a socket, not a file",
    ]


def test_a_fifo_listed_as_a_file_is_never_opened_to_wait(tmp_path: Path) -> None:
    """A file replaced by a FIFO after the listing: reading it fails at once, in one
    line, instead of waiting for a writer forever."""
    os.mkfifo(tmp_path / "late.pdf")
    scanner = FolderScanner(tmp_path)

    async def read() -> None:
        async for _ in scanner.chunks("late.pdf"):
            pass

    async def hashed() -> None:
        await scanner.sha256("late.pdf")

    for attempt in (hashed, read):

        async def within_seconds() -> None:
            with anyio.fail_after(5):
                await attempt()  # noqa: B023 - run before the loop moves on

        with pytest.raises(InvalidDocument, match=r"late\.pdf: a FIFO \(named pipe\)"):
            anyio.run(within_seconds)


#: The listing, printed as JSON by a process that may not bypass file modes.
_LIST = """
import json, sys
from pathlib import Path
import anyio
from stages.adapters.sources.folder import FolderScanner
listing = anyio.run(FolderScanner(Path(sys.argv[1])).list)
print(json.dumps([sorted(listing.entries), listing.skipped, listing.unread]))
"""


def without_dac_override(*argv: str) -> list[str]:
    """``argv`` run without root's power to read what its modes refuse (as a user)."""
    if os.geteuid() != 0:
        return list(argv)
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is needed to drop root's DAC override")
    caps = "-dac_override,-dac_read_search"
    return ["setpriv", f"--inh-caps={caps}", f"--bounding-set={caps}", *argv]


def test_an_unreadable_folder_is_skipped_and_remembered(tmp_path: Path) -> None:
    """A folder of mode 000, listed by a process that modes stop: one line, and the
    folder is remembered as unread (its documents stay)."""
    (tmp_path / "a.pdf").write_bytes(b"%PDF-1.7\n")
    (tmp_path / "locked" / "deeper").mkdir(parents=True)
    (tmp_path / "locked" / "b.pdf").write_bytes(b"%PDF-1.7\n")
    (tmp_path / "locked").chmod(0)
    try:
        argv = without_dac_override(sys.executable, "-c", _LIST, str(tmp_path))
        done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=60)
    finally:
        (tmp_path / "locked").chmod(0o755)
    assert done.returncode == 0, done.stderr
    entries, skipped, unread = json.loads(done.stdout)
    assert entries == ["a.pdf"]
    assert skipped == ["locked: cannot read the folder: Permission denied (its documents stay)"]
    assert unread == ["locked"]


def test_the_listing_says_the_device_and_whether_the_root_is_empty(tmp_path: Path) -> None:
    listing = anyio.run(FolderScanner(tmp_path).list)
    assert listing.empty and listing.device == os.stat(tmp_path).st_dev
    (tmp_path / "notes.csv").write_text("a,b\n")  # not a document, but not empty
    listing = anyio.run(FolderScanner(tmp_path).list)
    assert not listing.empty and listing.entries == {}


def test_a_folder_gone_is_one_line(tmp_path: Path) -> None:
    scanner = FolderScanner(tmp_path / "gone")
    with pytest.raises(ConfigurationError, match=r"gone.*cannot read the folder"):
        anyio.run(scanner.list)


def _open_on(path: Path) -> bool:
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == str(path):
                return True
        except OSError:
            continue
    return False


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="reads /proc")
def test_a_cancelled_hash_stops_reading_within_a_second(tmp_path: Path) -> None:
    big = tmp_path / "big.pdf"
    with big.open("wb") as f:
        f.truncate(40 * GiB)  # sparse: tens of seconds of hashing
    scanner = FolderScanner(tmp_path)

    async def hash_briefly() -> None:
        with anyio.move_on_after(0.3):
            await scanner.sha256("big.pdf")

    started = time.monotonic()
    anyio.run(hash_briefly)
    while _open_on(big) and time.monotonic() - started < 5:
        time.sleep(0.02)
    assert not _open_on(big)
    assert time.monotonic() - started < 1.5
