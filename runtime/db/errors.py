"""Which database errors mean "the connection is gone, try again" rather than a bug."""

from __future__ import annotations

import errno
import socket
from types import TracebackType

import asyncpg

from runtime.errors import DatabaseUnavailable

#: Connection refused or reset, server restarting, backend terminated
#: (``pg_terminate_backend``: AdminShutdownError is an OperatorInterventionError),
#: connection closed under the pool, too many clients.
CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    TimeoutError,
    asyncpg.InterfaceError,
    # asyncpg can leave a connection in a broken state when its backend is terminated
    # mid-operation (MagicStack/asyncpg#1069); the pool must drop it, so count it here.
    asyncpg.InternalClientError,
    asyncpg.PostgresConnectionError,
    asyncpg.exceptions.OperatorInterventionError,
    asyncpg.exceptions.TooManyConnectionsError,
    # The server gave up on this statement; the same statement again may well succeed.
    asyncpg.exceptions.DeadlockDetectedError,
    asyncpg.exceptions.SerializationError,
)


class DeadPeer(DatabaseUnavailable, TimeoutError):
    """PostgreSQL did not answer in time: the network to it may be cut."""


def is_connection_error(exc: BaseException) -> bool:
    return isinstance(exc, CONNECTION_ERRORS)


#: Errors that say PostgreSQL itself is out of reach, whatever raised them.
_UNREACHABLE: tuple[type[BaseException], ...] = (
    DatabaseUnavailable,
    asyncpg.PostgresConnectionError,
    asyncpg.exceptions.ConnectionDoesNotExistError,
    # A pooled connection whose backend died under it (asyncpg#1069, as above): the first
    # request after a killed postmaster met it (tests/acceptance/test_embedded_outage.py).
    asyncpg.InternalClientError,
    asyncpg.exceptions.OperatorInterventionError,
    asyncpg.exceptions.TooManyConnectionsError,
)
#: Errors that say so only when the database client raised them: a refused or reset
#: socket, a name that did not resolve, a connect or pool wait that timed out. The same
#: types from a file (a missing path, a full disk) are not the database's.
_UNREACHABLE_FROM_CLIENT: tuple[type[BaseException], ...] = (
    ConnectionError,
    FileNotFoundError,  # a Unix socket's file, gone while the server restarts
    socket.gaierror,
    TimeoutError,
)


def is_database_unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` (or an error it was raised from) means PostgreSQL could not be
    reached or dropped the connection, so that the same request may well succeed when
    asked again: narrower than :data:`CONNECTION_ERRORS`, which include every OSError."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, _UNREACHABLE):
            return True
        if isinstance(current, _UNREACHABLE_FROM_CLIENT) and _raised_in_asyncpg(
            current.__traceback__
        ):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


def _raised_in_asyncpg(tb: TracebackType | None) -> bool:
    while tb is not None:
        if str(tb.tb_frame.f_globals.get("__name__", "")).startswith("asyncpg"):
            return True
        tb = tb.tb_next
    return False


#: errno values meaning "no space": the device is full, or the user's quota is.
_NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT})


def is_storage_full(exc: BaseException) -> bool:
    """The database's disk is full (SQLSTATE 53100) or a file write found no space.

    Checked before :data:`CONNECTION_ERRORS`, which include every OSError.
    """
    if isinstance(exc, asyncpg.exceptions.DiskFullError):
        return True
    if isinstance(exc, OSError) and exc.errno in _NO_SPACE:
        return True
    cause = exc.__cause__
    return cause is not None and cause is not exc and is_storage_full(cause)
