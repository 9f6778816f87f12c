"""Which database errors mean "the connection is gone, try again" rather than a bug."""

from __future__ import annotations

import asyncpg

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


def is_connection_error(exc: BaseException) -> bool:
    return isinstance(exc, CONNECTION_ERRORS)
