"""Where a data dir's cluster lives, and the directories it needs, made with the right owner."""

from __future__ import annotations

import contextlib
import logging
import os
import stat
from pathlib import Path

from runtime.db.embedded._accounts import RunAs
from runtime.db.embedded._binaries import pgserver_dir
from runtime.db.embedded._paths import (
    barrier,
    check_reachable,
    check_shell_safe,
    make_var_tmp,
    relocated_dir,
    short_socket_dir,
    socket_fits,
)
from runtime.errors import ConfigurationError

LOCATION_NAME = "pg.location"

logger = logging.getLogger(__name__)
# Cluster directories outside their data dir already logged by this process.
announced: set[Path] = set()


class ClusterDir:
    """The cluster's directory for ``data_dir``: ``<data_dir>/pg`` or where ``pg.location`` says.

    ``pg_dir`` holds ``data/`` (PGDATA), ``log`` and usually ``sock/``; call :meth:`locate`
    before reading them, since another process may have relocated the cluster.
    """

    def __init__(self, data_dir: Path, port: int) -> None:
        self.data_dir = data_dir
        self.port = port
        self.location_file = data_dir / LOCATION_NAME
        self._use(data_dir / "pg")

    def _use(self, pg_dir: Path) -> None:
        self.pg_dir = pg_dir
        self.pgdata = pg_dir / "data"
        self.log = pg_dir / "log"

    def locate(self) -> None:
        """Point at the cluster that ``pg.location`` records, else at ``<data_dir>/pg``."""
        self._use(self._recorded_location() or self.data_dir / "pg")

    def _recorded_location(self) -> Path | None:
        try:
            text = self.location_file.read_text().strip()
        except (FileNotFoundError, NotADirectoryError):
            return None
        if not text.startswith("/"):
            raise ConfigurationError(
                f"{self.location_file} must hold the absolute path of the embedded "
                f"PostgreSQL's directory, not {text!r}: fix or remove it"
            )
        return Path(text)

    def settle(self, run_as: RunAs) -> None:
        """Decide where the cluster lives (under the lock: every process must agree)."""
        recorded = self._recorded_location()
        default = self.data_dir / "pg"
        if recorded is None and not default.exists() and barrier(self.data_dir, run_as):
            recorded = self._relocate()
        elif recorded is not None and not recorded.exists():
            logger.warning(
                "%s names %s, which no longer exists (removed by a /var/tmp cleaner?): "
                "creating a new, empty cluster there",
                self.location_file,
                recorded,
            )
        self._use(recorded or default)
        check_shell_safe(self.pg_dir)
        check_reachable(self.pg_dir.parent, run_as, "the embedded PostgreSQL's directory")
        if recorded is not None and recorded not in announced:
            announced.add(recorded)
            logger.info(
                "the embedded PostgreSQL for %s lives in %s (recorded in %s)",
                self.data_dir,
                recorded,
                self.location_file,
            )

    def _relocate(self) -> Path:
        """Record a cluster directory outside the data dir, which the server cannot enter."""
        make_var_tmp()
        location = relocated_dir(self.data_dir)
        # Written whole, then renamed: a crash leaves no half-written path behind.
        partial = self.location_file.with_name(f".{LOCATION_NAME}.{os.getpid()}")
        partial.write_text(f"{location}\n")
        partial.replace(self.location_file)
        return location

    def prepare(self, run_as: RunAs) -> None:
        """Make the data dir (not the cluster): fails early on a missing pgserver or no access."""
        pgserver_dir()
        self._make_data_dir(run_as)
        if not os.access(self.data_dir, os.W_OK | os.X_OK):
            raise ConfigurationError(self._unwritable("permission denied"))

    def prepare_pg_dir(self, run_as: RunAs) -> None:
        # Under the lock: a racing process must not see pg/ between mkdir and chown.
        self.make_owned_dir(self.pg_dir, run_as)
        if not self.log.exists():
            # Created here so that it belongs to the server's user, who appends to it.
            self.log.touch(mode=0o600)
            os.chown(self.log, run_as.uid, run_as.gid)

    def _make_data_dir(self, run_as: RunAs) -> None:
        if self.data_dir.is_dir():
            return
        try:
            self.data_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigurationError(self._unwritable(exc.strerror or str(exc))) from exc
        if run_as.switch:
            # Let only the service user's group in: it needs to reach pg/, nothing more.
            os.chown(self.data_dir, -1, run_as.gid)
            self.data_dir.chmod(0o710)

    def _unwritable(self, reason: str) -> str:
        return (
            f"ragline cannot create or write its data dir {self.data_dir} ({reason}): "
            f"choose a RAGLINE_DATA_DIR this user can write, or set DATABASE_URL"
        )

    def make_owned_dir(self, path: Path, run_as: RunAs) -> None:
        with contextlib.suppress(FileExistsError):
            path.mkdir(mode=0o700)
            os.chown(path, run_as.uid, run_as.gid)
        st = path.lstat()
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != run_as.uid or st.st_mode & 0o077:
            raise ConfigurationError(
                f"{path} must be a directory owned by user '{run_as.name}' with mode 0700 "
                f"(the embedded PostgreSQL runs as that user): fix or remove it"
            )

    def socket_dir(self) -> Path:
        preferred = self.pg_dir / "sock"
        return preferred if socket_fits(preferred, self.port) else short_socket_dir(self.pg_dir)
