"""Which errors mean "PostgreSQL is out of reach" (the HTTP API's 503): socket errors the
database client raised, asyncpg's connection errors, and errors raised from them; not
the same OSError types from a file."""

from __future__ import annotations

import errno
import socket
from pathlib import Path

import anyio
import asyncpg
import pytest

from runtime.db.errors import DeadPeer, is_database_unreachable


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def connect_error(dsn: str) -> BaseException:
    async def attempt() -> BaseException:
        try:
            await asyncpg.connect(dsn, timeout=5)
        except BaseException as exc:
            return exc
        raise AssertionError("connected")

    return anyio.run(attempt)


def test_a_refused_connection_is_unreachable() -> None:
    exc = connect_error(f"postgresql://root@127.0.0.1:{closed_port()}/x")
    assert isinstance(exc, ConnectionRefusedError)
    assert is_database_unreachable(exc)


def test_a_missing_socket_file_is_unreachable(tmp_path: Path) -> None:
    exc = connect_error(f"postgresql://root@/x?host={tmp_path}&port=5999")
    assert isinstance(exc, OSError)
    assert is_database_unreachable(exc)


def test_an_error_raised_from_a_lost_connection_is_unreachable() -> None:
    lost = connect_error(f"postgresql://root@127.0.0.1:{closed_port()}/x")
    try:
        try:
            raise lost
        except OSError as exc:
            raise RuntimeError("while listing documents") from exc
    except RuntimeError as outer:
        assert is_database_unreachable(outer)


@pytest.mark.parametrize(
    "exc",
    [
        asyncpg.exceptions.ConnectionDoesNotExistError("connection was closed"),
        asyncpg.InternalClientError("unexpected connection_lost() call"),
        asyncpg.exceptions.CannotConnectNowError("the database system is starting up"),
        asyncpg.exceptions.AdminShutdownError("terminating connection"),
        asyncpg.exceptions.TooManyConnectionsError("too many clients"),
        DeadPeer("PostgreSQL did not answer in 10 s"),
    ],
    ids=type,
)
def test_the_database_clients_own_errors_are_unreachable(exc: BaseException) -> None:
    assert is_database_unreachable(exc)


def test_the_same_os_errors_from_files_are_not(tmp_path: Path) -> None:
    for make in (
        lambda: (tmp_path / "missing").read_bytes(),
        lambda: (_ for _ in ()).throw(OSError(errno.ENOSPC, "No space left on device")),
        lambda: (_ for _ in ()).throw(TimeoutError("a provider took too long")),
        lambda: (_ for _ in ()).throw(ConnectionResetError("the vision model's peer")),
    ):
        with pytest.raises(OSError) as caught:
            make()
        assert not is_database_unreachable(caught.value), caught.value


def test_a_bug_is_not() -> None:
    assert not is_database_unreachable(ValueError("a bug"))
    assert not is_database_unreachable(asyncpg.exceptions.UndefinedTableError("no table"))
