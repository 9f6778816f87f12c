"""Private by default: what ragline keeps under its data dir is its user's alone.

Every ``python -m runtime`` / ``ragline`` process sets umask 077 at start
(:func:`private_umask`, from ``runtime/__main__.py``; not when the CLI runs in-process), so
what it creates (originals, images, the vector index and its WAL, logs) is 0600 and its
directories 0700. An existing data dir with looser bits is narrowed at start to 0700, or
0710 with the embedded PostgreSQL user's group when that user runs a cluster inside it (as
root): nothing inside is reachable by others, files made earlier included.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

log = logging.getLogger(__name__)

UMASK = 0o077


def private_umask() -> None:
    os.umask(UMASK)


def make_private(data_dir: Path) -> None:
    """Narrow ``data_dir``'s mode if it exists and belongs to this user (see above)."""
    try:
        st = data_dir.stat()
    except FileNotFoundError:
        return  # created later, under the umask (or 0710 by the embedded PostgreSQL)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        return
    mode, group = _wanted(data_dir)
    if stat.S_IMODE(st.st_mode) & ~mode or (group is not None and st.st_gid != group):
        if group is not None:
            os.chown(data_dir, -1, group)
        data_dir.chmod(stat.S_IMODE(st.st_mode) & mode | 0o700)
        log.info("made the data dir %s private (mode %o)", data_dir, mode)


def _wanted(data_dir: Path) -> tuple[int, int | None]:
    """0700; as root with a cluster owned by another user inside, 0710 and its group."""
    try:
        owner = (data_dir / "pg").stat()
    except (FileNotFoundError, NotADirectoryError):
        return 0o700, None
    if os.geteuid() == 0 and owner.st_uid != 0:
        return 0o710, owner.st_gid
    return 0o700, None
