"""The server of one cluster: initdb, start, stop and the bundled programs, run as its user."""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
import urllib.parse
from pathlib import Path

from runtime.db.embedded._accounts import RunAs
from runtime.db.embedded._binaries import bin_dir
from runtime.db.embedded._cluster import ClusterDir
from runtime.db.embedded._paths import SHORT_SOCKET_PARENT
from runtime.db.embedded._proc import (
    Postmaster,
    accepts,
    clean_env,
    last_log_line,
    proc_identity,
    read_postmaster,
    shm_attached,
)
from runtime.errors import ConfigurationError, DatabaseUnavailable, one_line

#: ``pg_ctl start -w`` waits this long for the server to accept connections.
START_TIMEOUT_S = 60.0
#: ``pg_ctl stop -w`` waits this long for the server to shut down.
STOP_TIMEOUT_S = 60.0
#: initdb writes and fsyncs a few MB; it takes about 2 s.
INITDB_TIMEOUT_S = 120.0
#: The cluster's superuser and database named in the DSN.
SUPERUSER = "postgres"
DATABASE = "postgres"
CONF_NAME = "ragline.conf"


def socket_dsn(socket_dir: str, port: int) -> str:
    host = urllib.parse.quote(socket_dir, safe="/")
    return f"postgresql://{SUPERUSER}@/{DATABASE}?host={host}&port={port}"


class Server:
    """The PostgreSQL server of ``cluster``. Callers hold the data dir's lock."""

    def __init__(self, cluster: ClusterDir) -> None:
        self._cluster = cluster

    def running(self) -> Postmaster | None:
        info = read_postmaster(self._cluster.pgdata)
        if info is None or proc_identity(info.pid) is None:
            return None
        if not accepts(f"{info.socket_dir}/.s.PGSQL.{info.port}"):
            return None
        return info

    def start(self, run_as: RunAs) -> Postmaster:
        cluster = self._cluster
        cluster.prepare_pg_dir(run_as)
        if not (cluster.pgdata / "PG_VERSION").exists():
            self._initdb(run_as)
        else:
            self._check_version(run_as)
        self._clear_stale_pid_file()
        socket_dir = cluster.socket_dir()
        cluster.make_owned_dir(socket_dir, run_as)
        self._write_conf(socket_dir, run_as)
        self._pg_ctl(run_as, "start", "-t", f"{START_TIMEOUT_S:.0f}", "-l", str(cluster.log))
        info = self.running()
        if info is None:
            raise DatabaseUnavailable(
                f"the embedded PostgreSQL started but accepts no connection; log: {cluster.log}"
            )
        return info

    def _clear_stale_pid_file(self) -> None:
        """Remove the lock files of a server that died and is a zombie.

        PostgreSQL removes a stale postmaster.pid itself unless its pid still exists, and
        the zombie of a killed postmaster exists until it is reaped; where pid 1 reaps late
        (containers) that blocks every restart. Removing the file is safe only when no
        process (an orphaned backend) is still attached to the dead server's shared
        memory, which /proc/sysvipc/shm tells (the server then recycles that segment).
        """
        info = read_postmaster(self._cluster.pgdata)
        if info is None or proc_identity(info.pid) is not None:
            return
        if shm_attached(info.shm_id) == 0:
            # The socket's lock file names the same dead pid and blocks the same way.
            Path(info.socket_dir, f".s.PGSQL.{info.port}.lock").unlink(missing_ok=True)
            (self._cluster.pgdata / "postmaster.pid").unlink(missing_ok=True)

    def stop(self, run_as: RunAs) -> None:
        info = read_postmaster(self._cluster.pgdata)
        self._pg_ctl(run_as, "stop", "-m", "fast", "-t", f"{STOP_TIMEOUT_S:.0f}")
        if info is not None and Path(info.socket_dir).parent == SHORT_SOCKET_PARENT:
            # The server removed its socket; the empty /tmp dir would only pile up.
            with contextlib.suppress(OSError):
                Path(info.socket_dir).rmdir()

    def _initdb(self, run_as: RunAs) -> None:
        pgdata = self._cluster.pgdata
        if pgdata.exists() and any(pgdata.iterdir()):
            raise ConfigurationError(
                f"{pgdata} is not empty but holds no PostgreSQL cluster (no PG_VERSION): "
                f"remove it to let ragline create a new one"
            )
        args = ["-D", str(pgdata), "-U", SUPERUSER, "-E", "UTF8", "--no-locale"]
        # Trust on the socket (0700, owner only); host lines are moot with no TCP listener,
        # reject keeps them so should someone enable listen_addresses.
        args += ["--auth-local=trust", "--auth-host=reject", "--no-instructions"]
        self._run(run_as, "initdb", args, INITDB_TIMEOUT_S, "initdb")
        with (pgdata / "postgresql.conf").open("a") as conf:
            conf.write(
                "\n# ragline: socket and port, rewritten at every start because the socket\n"
                f"# path depends on where the data dir lives.\ninclude_if_exists = '{CONF_NAME}'\n"
            )

    def _check_version(self, run_as: RunAs) -> None:
        pgdata = self._cluster.pgdata
        data_major = (pgdata / "PG_VERSION").read_text().strip()
        output = self._run(run_as, "pg_ctl", ["--version"], 10.0, "pg_ctl --version")
        bin_major = output.split()[-1].split(".")[0]
        if data_major != bin_major:
            raise ConfigurationError(
                f"{pgdata} holds a PostgreSQL {data_major} cluster but the bundled server "
                f"is PostgreSQL {bin_major}: dump and restore it, or remove it to start afresh"
            )

    def _write_conf(self, socket_dir: Path, run_as: RunAs) -> None:
        path = self._cluster.pgdata / CONF_NAME
        path.write_text(
            "# Written by ragline at every start; edits are lost.\n"
            "listen_addresses = ''\n"
            f"port = {self._cluster.port}\n"
            f"unix_socket_directories = '{socket_dir}'\n"
            "unix_socket_permissions = 0700\n"
        )
        os.chown(path, run_as.uid, run_as.gid)

    def _pg_ctl(self, run_as: RunAs, action: str, *args: str) -> None:
        timeout_s = max(START_TIMEOUT_S, STOP_TIMEOUT_S) + 15.0
        args_ = ["-D", str(self._cluster.pgdata), "-w", action, *args]
        self._run(run_as, "pg_ctl", args_, timeout_s, f"pg_ctl {action}")

    def _run(
        self, run_as: RunAs, program: str, args: list[str], timeout_s: float, label: str
    ) -> str:
        """Run a bundled PostgreSQL program as ``run_as``; failures append to the log."""
        command = [str(bin_dir(run_as) / program), *args]
        with tempfile.TemporaryFile("w+") as output:
            try:
                # Output goes to a file, not a pipe: with a pipe, pg_ctl start can hang
                # (pgserver saw this). A new session keeps the server out of our
                # terminal's Ctrl-C; it stops through release() or stop().
                subprocess.run(
                    command,
                    stdin=subprocess.DEVNULL,
                    stdout=output,
                    stderr=subprocess.STDOUT,
                    cwd=self._cluster.pg_dir,
                    env=clean_env(),
                    timeout=timeout_s,
                    check=True,
                    start_new_session=True,
                    user=run_as.uid if run_as.switch else None,
                    group=run_as.gid if run_as.switch else None,
                    extra_groups=list(run_as.groups) if run_as.switch else None,
                )
            except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
                output.seek(0)
                raise self._failure(label, command, output.read(), exc) from exc
            output.seek(0)
            return output.read()

    def _failure(
        self, label: str, command: list[str], output: str, exc: subprocess.SubprocessError
    ) -> DatabaseUnavailable:
        log = self._cluster.log
        with contextlib.suppress(OSError), log.open("a") as file:
            file.write(f"ragline: {' '.join(command)}\n{output}\n")
        with contextlib.suppress(OSError):
            output += "\n" + log.read_text()[-4000:]
        timed_out = isinstance(exc, subprocess.TimeoutExpired)
        what = "timed out" if timed_out else f"failed ({last_log_line(output)})"
        return DatabaseUnavailable(one_line(f"embedded PostgreSQL: {label} {what}; log: {log}"))
