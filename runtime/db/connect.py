"""Which PostgreSQL to use: ``DATABASE_URL``, or the embedded cluster under the data dir."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path
from typing import Any

import anyio
import asyncpg

import schema
from runtime.db.migrate import migrate, pending
from runtime.errors import ConfigurationError, DatabaseUnavailable

_W = schema.load("workers")

#: How long opening a connection may take: a host whose route to PostgreSQL is cut
#: (packets dropped, not refused) would otherwise wait out the kernel's SYN retries.
CONNECT_TIMEOUT_S = 10.0
#: A peer that stopped answering is noticed within KEEPALIVE_IDLE_S + KEEPALIVE_INTERVAL_S
#: x KEEPALIVE_COUNT (11 s) on an idle connection, and within USER_TIMEOUT_S on one with
#: unacknowledged data, instead of the kernel's defaults (two hours idle; about 15
#: minutes of retransmissions). Both ends: the client's socket, and the server's side of
#: it through its ``tcp_*`` settings, so the server also drops (and rolls back) a session
#: whose client vanished.
KEEPALIVE_IDLE_S = 5
KEEPALIVE_INTERVAL_S = 2
KEEPALIVE_COUNT = 3
USER_TIMEOUT_S = 10
#: Server settings of every connection ragline opens (``tcp_user_timeout`` is in ms).
DEAD_PEER_SETTINGS = {
    "tcp_keepalives_idle": str(KEEPALIVE_IDLE_S),
    "tcp_keepalives_interval": str(KEEPALIVE_INTERVAL_S),
    "tcp_keepalives_count": str(KEEPALIVE_COUNT),
    "tcp_user_timeout": str(USER_TIMEOUT_S * 1000),
}
#: (level, option, value) for the client's socket; the TCP ones by name, as the platform
#: has them (TCP_USER_TIMEOUT is Linux's).
_SOCKET_OPTIONS = [(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)] + [
    (socket.IPPROTO_TCP, getattr(socket, name), value)
    for name, value in (
        ("TCP_KEEPIDLE", KEEPALIVE_IDLE_S),
        ("TCP_KEEPINTVL", KEEPALIVE_INTERVAL_S),
        ("TCP_KEEPCNT", KEEPALIVE_COUNT),
        ("TCP_USER_TIMEOUT", USER_TIMEOUT_S * 1000),
    )
    if hasattr(socket, name)
]


def connect_options(settings: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Keyword arguments for ``asyncpg.connect`` and ``asyncpg.create_pool``: the connect
    timeout and the server's dead-peer settings, with ``settings`` on top."""
    return {
        "timeout": CONNECT_TIMEOUT_S,
        "server_settings": {**DEAD_PEER_SETTINGS, **(settings or {})},
    }


def detect_dead_peer(conn: asyncpg.Connection[Any]) -> None:
    """Set the client's keepalive and user timeout on ``conn``'s TCP socket (a Unix
    socket, the embedded cluster's, needs none: its peer cannot be cut off)."""
    # asyncpg exposes no socket options; its transport (asyncio's or uvloop's) gives the
    # socket, whose setsockopt both support.
    transport = getattr(conn, "_transport", None)
    sock = transport.get_extra_info("socket") if transport is not None else None
    if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return
    for level, option, value in _SOCKET_OPTIONS:
        sock.setsockopt(level, option, value)


async def init_connection(conn: asyncpg.Connection[Any]) -> None:
    """A pool's ``init``: dead-peer detection on the socket, then the codecs."""
    detect_dead_peer(conn)
    await prime_codecs(conn)


@contextlib.contextmanager
def database(database_url: str | None, data_dir: Path, *, supervise: bool = False) -> Iterator[str]:
    """Yield a DSN; starts (or joins) the embedded cluster when no URL is given.

    ``supervise``: start the embedded cluster again whenever it dies while the block runs
    (:mod:`runtime.db.supervisor`), for long-running commands (workers, ingest, sync,
    serve, mcp).
    """
    if database_url:
        yield database_url
        return
    from runtime.db.embedded import EmbeddedPostgres
    from runtime.db.supervisor import Supervisor

    cluster = EmbeddedPostgres(data_dir)
    dsn = cluster.acquire()
    try:
        if supervise:
            with Supervisor(cluster).running():
                yield dsn
        else:
            yield dsn
    finally:
        cluster.release()


async def connect(dsn: str, settings: Mapping[str, str] | None = None) -> asyncpg.Connection[Any]:
    """One connection, with dead-peer detection; :class:`DatabaseUnavailable` if none."""
    try:
        conn: asyncpg.Connection[Any] = await asyncpg.connect(dsn, **connect_options(settings))
    except (OSError, TimeoutError, asyncpg.PostgresError) as exc:
        raise DatabaseUnavailable(f"cannot connect to PostgreSQL: {exc}") from exc
    detect_dead_peer(conn)
    return conn


async def ensure_schema(dsn: str) -> list[int]:
    conn = await connect(dsn)
    try:
        return await migrate(conn)
    finally:
        await conn.close()


async def check_schema(dsn: str) -> None:
    """Raise :class:`ConfigurationError` when migrations are pending (``--no-auto-migrate``)."""
    conn = await connect(dsn)
    try:
        missing = await pending(conn)
    finally:
        await conn.close()
    if missing:
        raise ConfigurationError(
            f"the database lacks {len(missing)} of ragline's schema migrations "
            f"(first: {missing[0]:04d}) and auto-migrate is off: run 'ragline migrate' "
            f"or drop --no-auto-migrate / RAGLINE_AUTO_MIGRATE=false"
        )


async def prime_codecs(conn: asyncpg.Connection[Any]) -> None:
    """Have asyncpg learn, in one catalog query, the types a connection's statements use.

    asyncpg looks up each type it has no built-in codec for (the arrays ragline binds, the
    schema's enums) the first time one of a connection's statements uses it: a catalog
    query, with ``jit`` switched off and on around it (three round trips, ~4 ms of the
    server's time), for each statement that brings a new one. On bench.ingest that was 50
    lookups over 17 connections; one statement naming every such type (``codec_types``)
    makes it one lookup a connection. A pool's ``init``: it runs on each new connection.
    """
    names = [r["name"] for r in await conn.fetch(_W["codec_types"])]
    if names:
        # Names from format_type(), quoted as SQL needs them.
        await conn.fetchrow("SELECT " + ", ".join(f"NULL::{name}" for name in names))


@contextlib.asynccontextmanager
async def open_pool(dsn: str, max_size: int = 10) -> AsyncIterator[asyncpg.Pool[Any]]:
    try:
        # min_size=0: a pool that keeps a floor of connections logs a traceback each time
        # it fails to restore one during an outage; connections open on first use.
        pool = await asyncpg.create_pool(
            dsn, min_size=0, max_size=max_size, init=init_connection, **connect_options()
        )
    except (OSError, TimeoutError, asyncpg.PostgresError) as exc:
        raise DatabaseUnavailable(f"cannot connect to PostgreSQL: {exc}") from exc
    try:
        yield pool
    finally:
        with anyio.CancelScope(shield=True):
            await pool.close()
