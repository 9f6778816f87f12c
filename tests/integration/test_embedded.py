"""The embedded PostgreSQL: real initdb, real servers, real second processes."""

from __future__ import annotations

import os
import pwd
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from runtime.embedded import EmbeddedPostgres, embedded_postgres
from runtime.errors import ConfigurationError, DatabaseUnavailable
from tests.support.embedded_helpers import (
    Child,
    embedded_base,
    embedded_template,
    fetchval,
    initialized_data_dir,
    postmaster_pid,
    python_for_postgres_user,
    spawn_child,
    wait_for_exit,
)

# Fixtures, used by name.
__all__ = ["embedded_base", "embedded_template", "initialized_data_dir", "spawn_child"]

SpawnChild = Callable[..., Child]


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
    initialized_data_dir: Path, spawn_child: SpawnChild
) -> None:
    data_dir = initialized_data_dir
    cluster = EmbeddedPostgres(data_dir)
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


def test_first_process_release_keeps_the_cluster_for_the_second(
    initialized_data_dir: Path, spawn_child: SpawnChild
) -> None:
    data_dir = initialized_data_dir
    cluster = EmbeddedPostgres(data_dir)
    cluster.acquire()
    child = spawn_child(data_dir)

    cluster.release()
    assert fetchval(child.dsn, "select 1") == 1
    child.release()
    assert not cluster.is_running()


def test_a_killed_user_is_pruned_so_the_last_live_release_stops_the_cluster(
    initialized_data_dir: Path, spawn_child: SpawnChild
) -> None:
    data_dir = initialized_data_dir
    cluster = EmbeddedPostgres(data_dir)
    cluster.acquire()
    child = spawn_child(data_dir)
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


def test_a_crashed_server_is_started_again(initialized_data_dir: Path) -> None:
    data_dir = initialized_data_dir
    cluster = EmbeddedPostgres(data_dir)
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


def test_stop_ignores_users_and_a_restart_keeps_the_data(initialized_data_dir: Path) -> None:
    data_dir = initialized_data_dir
    cluster = EmbeddedPostgres(data_dir)
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


def test_a_failed_start_names_the_log(initialized_data_dir: Path) -> None:
    data_dir = initialized_data_dir
    cluster = EmbeddedPostgres(data_dir)
    with (data_dir / "pg" / "data" / "postgresql.conf").open("a") as conf:
        conf.write("shared_buffers = 'lots'\n")

    with pytest.raises(DatabaseUnavailable) as failure:
        cluster.acquire()

    message = failure.value.message
    assert str(data_dir / "pg" / "log") in message
    assert "pg_ctl start failed" in message
    assert "\n" not in message
    assert "shared_buffers" in (data_dir / "pg" / "log").read_text()


@pytest.mark.skipif(os.geteuid() != 0, reason="only root hands the server to user postgres")
def test_root_with_an_unreachable_data_dir_gets_a_configuration_error(
    embedded_base: Path,
) -> None:
    locked = embedded_base / "locked"
    locked.mkdir(mode=0o700)

    with pytest.raises(ConfigurationError) as failure:
        EmbeddedPostgres(locked / "data").acquire()

    assert f"cannot enter {locked} " in failure.value.message
    assert "DATABASE_URL" in failure.value.message
    assert not (locked / "data").exists()


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
