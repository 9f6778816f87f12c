"""Which database errors mean "the connection is gone, try again" rather than a bug."""

from __future__ import annotations

import errno

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
