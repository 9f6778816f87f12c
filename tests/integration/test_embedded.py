"""The embedded PostgreSQL: real initdb, real servers, real second processes."""

from __future__ import annotations

import grp
import logging
import os
import pwd
import shutil
import signal
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import runtime.db.embedded._accounts
from runtime.db.embedded import EmbeddedPostgres, embedded_postgres
from runtime.db.embedded._accounts import service_user
from runtime.errors import ConfigurationError, DatabaseUnavailable
from tests.support.embedded_helpers import (
    REPO_ROOT,
    Child,
    LockedPgserver,
    UnprivilegedPython,
    discard_cluster,
    executable_of,
    fetchval,
    outside_location,
    pginstall_leftovers,
    postmaster_pid,
    process_uid,
    python_for_postgres_user,
    run_python_as_postgres,
    user_exists,
    wait_for_exit,
)

SpawnChild = Callable[..., Child]
#: An initialized data dir and a handle on its stopped cluster (not acquired yet).
Stopped = tuple[Path, EmbeddedPostgres]
#: The same, acquired by this process and then by a child process.
TwoUsers = tuple[Path, EmbeddedPostgres, Child]

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="only root hands the server to a user")
can_add_users = pytest.mark.skipif(
    os.geteuid() != 0 or not (shutil.which("useradd") or shutil.which("adduser")),
    reason="needs root and useradd or adduser",
)


@pytest.fixture
def stopped(initialized_data_dir: Path) -> Stopped:
    return initialized_data_dir, EmbeddedPostgres(initialized_data_dir)


@pytest.fixture
def two_users(stopped: Stopped, spawn_child: SpawnChild) -> TwoUsers:
    data_dir, cluster = stopped
    cluster.acquire()
    return data_dir, cluster, spawn_child(data_dir)


@pytest.fixture(params=["parent", "data dir"])
def unreachable_data_dir(request: pytest.FixtureRequest, embedded_base: Path) -> Iterator[Path]:
    """A data dir that only root can enter: under a mode-0700 parent, or mode 0700 itself."""
    locked = embedded_base / "locked"
    locked.mkdir(mode=0o700)
    data_dir = locked / "data"
    if request.param == "data dir":
        locked.chmod(0o711)
        data_dir.mkdir(mode=0o700)
    yield data_dir
    discard_cluster(data_dir)


def test_first_acquire_starts_a_cluster_that_accepts_connections(embedded_base: Path) -> None:
    data_dir = embedded_base / "data"
    cluster = EmbeddedPostgres(data_dir)
    assert not cluster.is_running()

    dsn = cluster.acquire()

    assert dsn == f"postgresql://postgres@/postgres?host={data_dir}/pg/sock&port=5432"
    assert cluster.dsn == dsn
    assert fetchval(dsn, "select 1") == 1
    assert fetchval(dsn, "show listen_addresses") == ""
    assert fetchval(dsn, "select current_setting('server_version_num')::int / 10000") == 16
    assert cluster.is_running()
    cluster.release()
    assert not cluster.is_running()


def test_second_process_reuses_the_cluster_and_last_release_stops_it(
    stopped: Stopped, spawn_child: SpawnChild
) -> None:
    data_dir, cluster = stopped
    dsn = cluster.acquire()
    first_pid = postmaster_pid(data_dir)

    child = spawn_child(data_dir)
    assert child.dsn == dsn
    assert postmaster_pid(data_dir) == first_pid
    child.release()

    assert cluster.is_running(), "the child's release stopped a cluster still in use"
    assert fetchval(dsn, "select 1") == 1
    cluster.release()
    assert not cluster.is_running()
    assert not (data_dir / "pg" / "data" / "postmaster.pid").exists()


def test_first_process_release_keeps_the_cluster_for_the_second(two_users: TwoUsers) -> None:
    _, cluster, child = two_users

    cluster.release()
    assert fetchval(child.dsn, "select 1") == 1
    child.release()
    assert not cluster.is_running()


def test_a_killed_user_is_pruned_so_the_last_live_release_stops_the_cluster(
    two_users: TwoUsers,
) -> None:
    data_dir, cluster, child = two_users
    assert len(list((data_dir / "users").iterdir())) == 2

    child.kill()
    cluster.release()

    assert not cluster.is_running()
    assert list((data_dir / "users").iterdir()) == []


def test_concurrent_first_acquires_start_one_cluster(
    embedded_base: Path, spawn_child: SpawnChild
) -> None:
    data_dir = embedded_base / "data"
    # Both processes race for initdb and start; the data dir's lock lets one do it.
    first, second = spawn_child(data_dir, wait=False), spawn_child(data_dir, wait=False)

    assert first.wait_ready() == second.wait_ready()
    assert fetchval(first.dsn, "select 1") == 1
    first.release()
    assert fetchval(second.dsn, "select 1") == 1
    second.release()
    assert not EmbeddedPostgres(data_dir).is_running()


def test_a_crashed_server_is_started_again(stopped: Stopped) -> None:
    data_dir, cluster = stopped
    cluster.acquire()
    crashed = postmaster_pid(data_dir)
    os.kill(crashed, signal.SIGKILL)
    wait_for_exit(crashed)
    assert not cluster.is_running()  # postmaster.pid is still there, stale

    dsn = EmbeddedPostgres(data_dir).acquire()

    assert postmaster_pid(data_dir) != crashed
    assert fetchval(dsn, "select 1") == 1
    cluster.release()
    assert cluster.is_running(), "the second acquire still holds the cluster"


def test_stop_ignores_users_and_a_restart_keeps_the_data(stopped: Stopped) -> None:
    data_dir, cluster = stopped
    dsn = cluster.acquire()
    fetchval(dsn, "create table kept as select 7 as id")
    system_id = fetchval(dsn, "select system_identifier from pg_control_system()")

    assert EmbeddedPostgres(data_dir).stop() is True
    assert not cluster.is_running()
    assert EmbeddedPostgres(data_dir).stop() is False

    with embedded_postgres(data_dir) as again:
        # The same cluster (initdb gives every cluster a new system identifier).
        assert fetchval(again, "select system_identifier from pg_control_system()") == system_id
        assert fetchval(again, "select id from kept") == 7
    assert not cluster.is_running()


def test_a_long_data_dir_gets_a_short_socket_dir_under_tmp(embedded_base: Path) -> None:
    data_dir = embedded_base / ("d" * 100)
    with embedded_postgres(data_dir) as dsn:
        socket_dir = Path(dsn.split("host=")[1].split("&")[0])
        assert socket_dir.parent == Path("/tmp")
        assert socket_dir.name.startswith("ragline-")
        assert fetchval(dsn, "select 1") == 1
    assert not socket_dir.exists(), "the empty socket dir under /tmp was left behind"


def test_a_failed_start_names_the_log(stopped: Stopped) -> None:
    data_dir, cluster = stopped
    with (data_dir / "pg" / "data" / "postgresql.conf").open("a") as conf:
        conf.write("shared_buffers = 'lots'\n")

    with pytest.raises(DatabaseUnavailable) as failure:
        cluster.acquire()

    message = failure.value.message
    assert str(data_dir / "pg" / "log") in message
    assert "pg_ctl start failed" in message
    assert "\n" not in message
    assert "shared_buffers" in (data_dir / "pg" / "log").read_text()


@root_only
def test_root_places_a_cluster_its_user_cannot_reach_under_var_tmp(
    unreachable_data_dir: Path, spawn_child: SpawnChild, caplog: pytest.LogCaptureFixture
) -> None:
    data_dir = unreachable_data_dir
    outside = outside_location(data_dir)
    cluster = EmbeddedPostgres(data_dir)

    with caplog.at_level(logging.INFO, logger="runtime.db.embedded"):
        dsn = cluster.acquire()

    assert (data_dir / "pg.location").read_text().strip() == str(outside)
    assert str(outside) in caplog.text
    assert not (data_dir / "pg").exists()
    mode = outside.stat()
    assert stat.S_IMODE(mode.st_mode) == 0o700
    assert mode.st_uid == process_uid(postmaster_pid(data_dir)) != 0
    assert dsn == f"postgresql://postgres@/postgres?host={outside}/sock&port=5432"
    assert fetchval(dsn, "show data_directory") == str(outside / "data")
    assert (data_dir / "lock").exists()
    system_id = fetchval(dsn, "select system_identifier from pg_control_system()")

    child = spawn_child(data_dir)
    assert child.dsn == dsn
    assert len(list((data_dir / "users").iterdir())) == 2
    assert EmbeddedPostgres(data_dir).stop() is True
    assert not cluster.is_running()

    with embedded_postgres(data_dir) as again:
        assert again == dsn
        assert fetchval(again, "select system_identifier from pg_control_system()") == system_id
    assert not cluster.is_running()


@root_only
def test_root_does_not_move_an_existing_cluster_its_user_cannot_reach(
    initialized_data_dir: Path,
) -> None:
    data_dir = initialized_data_dir
    data_dir.chmod(0o700)

    with pytest.raises(ConfigurationError) as failure:
        EmbeddedPostgres(data_dir).acquire()

    assert f"cannot enter {data_dir} " in failure.value.message
    assert "DATABASE_URL" in failure.value.message
    assert not (data_dir / "pg.location").exists()
    assert not outside_location(data_dir).exists()


_ACQUIRE_AND_REPORT = """
import pathlib, sys
from runtime.db.embedded import EmbeddedPostgres
from runtime.errors import ConfigurationError
try:
    EmbeddedPostgres(pathlib.Path(sys.argv[1])).acquire()
except ConfigurationError as exc:
    print(exc.message)
"""


@pytest.mark.parametrize("missing", [True, False], ids=["missing", "existing"])
def test_an_unprivileged_user_with_an_unwritable_data_dir_gets_a_configuration_error(
    embedded_base: Path, missing: bool
) -> None:
    readonly = embedded_base / "readonly"
    readonly.mkdir()
    readonly.chmod(0o755 if os.geteuid() == 0 else 0o555)  # root-owned: postgres cannot write
    data_dir = readonly / "data" if missing else readonly
    if os.geteuid() == 0:
        python = python_for_postgres_user()
        if python is None:
            pytest.skip("needs a Python with ragline's packages that user postgres can run")
        result = run_python_as_postgres(python, _ACQUIRE_AND_REPORT, str(data_dir))
        assert result.returncode == 0, result.stderr
        message = result.stdout.strip()
    else:
        with pytest.raises(ConfigurationError) as failure:
            EmbeddedPostgres(data_dir).acquire()
        message = failure.value.message

    assert message.startswith(f"ragline cannot create or write its data dir {data_dir} ")
    assert "DATABASE_URL" in message
    assert "\n" not in message
    readonly.chmod(0o755)
    assert not (data_dir / "lock").exists()


@pytest.mark.skipif(not user_exists("postgres"), reason="needs user postgres")
def test_the_service_user_is_postgres_when_it_exists(throwaway_user_name: str) -> None:
    entry = service_user(preferred="postgres", fallback=throwaway_user_name)

    assert entry.pw_name == "postgres"
    assert not user_exists(throwaway_user_name), "created a user although postgres exists"


@can_add_users
def test_a_missing_service_user_is_created_as_a_system_account(throwaway_user_name: str) -> None:
    absent = f"{throwaway_user_name}-x"

    entry = service_user(preferred=absent, fallback=throwaway_user_name)

    assert entry.pw_name == throwaway_user_name
    assert entry.pw_uid != 0
    assert entry.pw_shell.endswith(("nologin", "false"))
    assert not Path(entry.pw_dir).exists()
    assert grp.getgrgid(entry.pw_gid).gr_name == throwaway_user_name
    assert not user_exists(absent)
    assert service_user(preferred=absent, fallback=throwaway_user_name) == entry


def test_a_service_user_that_cannot_be_created_is_a_configuration_error(
    throwaway_user_name: str,
) -> None:
    # ':' separates passwd fields: every useradd/adduser refuses it, as root or not.
    with pytest.raises(ConfigurationError) as failure:
        service_user(preferred=throwaway_user_name, fallback="rgl:bad")

    message = failure.value.message
    assert f"no user '{throwaway_user_name}'" in message
    assert "creating user 'rgl:bad' failed (" in message
    assert message.endswith("set DATABASE_URL or run ragline as a non-root user")
    assert "\n" not in message


@can_add_users
def test_root_without_a_postgres_user_creates_one_and_runs_the_cluster_as_it(
    throwaway_user_name: str, embedded_base: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A fresh python image as root: no user postgres, a checkout under /root (mode 0700).
    monkeypatch.setattr(
        runtime.db.embedded._accounts, "EXISTING_SERVICE_USER", f"{throwaway_user_name}-x"
    )
    monkeypatch.setattr(runtime.db.embedded._accounts, "SERVICE_USER", throwaway_user_name)
    home = embedded_base / "root"
    home.mkdir(mode=0o700)
    data_dir = home / "checkout" / ".ragline"
    try:
        with embedded_postgres(data_dir) as dsn:
            uid = pwd.getpwnam(throwaway_user_name).pw_uid
            assert process_uid(postmaster_pid(data_dir)) == uid
            assert outside_location(data_dir).stat().st_uid == uid
            assert fetchval(dsn, "select 1") == 1
        assert not EmbeddedPostgres(data_dir).is_running()
    finally:
        discard_cluster(data_dir)  # before userdel, which refuses a user with processes


def test_an_unprivileged_process_runs_the_binaries_itself(embedded_base: Path) -> None:
    python = python_for_postgres_user()
    if python is None:
        pytest.skip("needs root, and a Python with ragline's packages that postgres can run")
    data_dir = embedded_base / "data"
    data_dir.mkdir()
    os.chown(data_dir, *_postgres_ids())
    child = Child(data_dir, python=python, user="postgres", group="postgres", extra_groups=[])
    try:
        assert fetchval(child.dsn, "select current_user") == "postgres"
        assert (data_dir / "users").stat().st_uid == _postgres_ids()[0]
        child.release()
        assert not EmbeddedPostgres(data_dir).is_running()
    finally:
        child.close()


def _postgres_ids() -> tuple[int, int]:
    entry = pwd.getpwnam("postgres")
    return entry.pw_uid, entry.pw_gid


def _with(pgserver: LockedPgserver) -> UnprivilegedPython:
    """This Python, importing the locked pgserver instead of the venv's."""
    return UnprivilegedPython(sys.executable, str(pgserver.site_packages))


def _server_binary(copy: Path) -> Path:
    return copy / "pgserver" / "pginstall" / "bin" / "postgres"


@root_only
def test_root_runs_binaries_its_user_cannot_reach_from_a_copy_under_var_tmp(
    embedded_base: Path, locked_pgserver: LockedPgserver, spawn_child: SpawnChild
) -> None:
    # The README's first command, with the repo cloned under /root: a venv there (0700).
    copy = locked_pgserver.copy
    data_dir = embedded_base / "data"
    assert not copy.exists()

    child = spawn_child(data_dir, python=_with(locked_pgserver))

    # initdb ran too: from the locked original, as user postgres, it could not have.
    assert executable_of(postmaster_pid(data_dir)) == _server_binary(copy)
    # The server found share/ and lib/ next to its binary: the copy's, not the original's.
    for name, part in (("SHAREDIR", "share/postgresql"), ("PKGLIBDIR", "lib/postgresql")):
        setting = f"select setting from pg_config where name = '{name}'"
        assert fetchval(child.dsn, setting) == str(copy / "pgserver" / "pginstall" / part)
    assert fetchval(child.dsn, "do $$ begin perform 1; end $$") is None  # loads plpgsql.so
    top = copy.stat()
    assert (top.st_uid, stat.S_IMODE(top.st_mode)) == (0, 0o755)
    assert stat.S_IMODE(_server_binary(copy).stat().st_mode) == 0o755
    bki = copy / "pgserver" / "pginstall" / "share" / "postgresql" / "postgres.bki"
    assert stat.S_IMODE(bki.stat().st_mode) == 0o644
    assert not (copy / "pgserver" / "pginstall" / "include").exists()
    assert pginstall_leftovers(copy) == []
    child.release()
    assert not EmbeddedPostgres(data_dir).is_running()


@root_only
def test_the_binary_copy_is_reused_and_made_again_when_files_are_missing(
    initialized_data_dir: Path, locked_pgserver: LockedPgserver, spawn_child: SpawnChild
) -> None:
    data_dir, copy = initialized_data_dir, locked_pgserver.copy
    spawn_child(data_dir, python=_with(locked_pgserver)).release()
    made = copy.stat().st_ino
    spawn_child(data_dir, python=_with(locked_pgserver)).release()
    assert copy.stat().st_ino == made, "a complete copy was made again"

    # What a /var/tmp cleaner does to files unused for 30 days, and a crash mid-write.
    share = copy / "pgserver" / "pginstall" / "share" / "postgresql"
    (share / "timezonesets" / "Default").unlink()
    (share / "postgres.bki").write_bytes(b"")
    child = spawn_child(data_dir, python=_with(locked_pgserver))

    assert copy.stat().st_ino != made
    assert (share / "timezonesets" / "Default").exists()
    assert (share / "postgres.bki").stat().st_size > 0
    assert executable_of(postmaster_pid(data_dir)) == _server_binary(copy)
    assert fetchval(child.dsn, "select 1") == 1
    assert pginstall_leftovers(copy) == []
    child.release()


@root_only
def test_concurrent_first_starts_on_two_data_dirs_share_one_binary_copy(
    embedded_base: Path, locked_pgserver: LockedPgserver, spawn_child: SpawnChild
) -> None:
    python = _with(locked_pgserver)
    data_dirs = [embedded_base / "a", embedded_base / "b"]
    children = [spawn_child(data_dir, wait=False, python=python) for data_dir in data_dirs]

    for child, data_dir in zip(children, data_dirs, strict=True):
        child.wait_ready()
        # Replacing the copy under a running server would show here as a deleted file.
        assert executable_of(postmaster_pid(data_dir)) == _server_binary(locked_pgserver.copy)
        assert fetchval(child.dsn, "select 1") == 1
    assert pginstall_leftovers(locked_pgserver.copy) == []
    for child in children:
        child.release()


@root_only
def test_a_foreign_directory_in_place_of_the_copy_is_a_configuration_error(
    embedded_base: Path, locked_pgserver: LockedPgserver
) -> None:
    copy = locked_pgserver.copy
    copy.mkdir()
    os.chown(copy, 65534, 65534)  # anyone may create it in /var/tmp; never run it
    data_dir = embedded_base / "data"
    path = os.pathsep.join([str(REPO_ROOT), str(locked_pgserver.site_packages)])

    result = subprocess.run(
        [sys.executable, "-c", _ACQUIRE_AND_REPORT, str(data_dir)],
        env={**os.environ, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().startswith(f"{copy} must be a directory owned by root")
    assert list(copy.iterdir()) == []
