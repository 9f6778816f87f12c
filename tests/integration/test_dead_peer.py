"""Every connection ragline opens notices a peer that stopped answering: the client's
socket and the server's side of it carry short keepalives and a user timeout."""

from __future__ import annotations

import socket
from typing import Any

import pytest

from runtime.db.connect import (
    KEEPALIVE_COUNT,
    KEEPALIVE_IDLE_S,
    USER_TIMEOUT_S,
    connect,
    open_pool,
)

pytestmark = pytest.mark.anyio


def _socket_of(conn: Any) -> Any:
    return conn._transport.get_extra_info("socket")


async def test_a_connection_has_keepalives_at_both_ends(dsn: str) -> None:
    conn = await connect(dsn)
    try:
        sock = _socket_of(conn)
        if sock.family not in (socket.AF_INET, socket.AF_INET6):
            pytest.skip("a Unix socket: no peer to lose")
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == KEEPALIVE_IDLE_S
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT) == KEEPALIVE_COUNT
        ms = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT)
        assert ms == USER_TIMEOUT_S * 1000
        assert await conn.fetchval("SHOW tcp_keepalives_idle") == f"{KEEPALIVE_IDLE_S}"
        assert await conn.fetchval("SHOW tcp_user_timeout") == f"{USER_TIMEOUT_S * 1000}"
    finally:
        await conn.close()


async def test_a_pooled_connection_has_them_too(dsn: str) -> None:
    async with open_pool(dsn, max_size=1) as pool, pool.acquire() as conn:
        sock = _socket_of(getattr(conn, "_con"))  # noqa: B009 (the proxy wraps it)
        if sock.family not in (socket.AF_INET, socket.AF_INET6):
            pytest.skip("a Unix socket: no peer to lose")
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == KEEPALIVE_IDLE_S
        assert await conn.fetchval("SHOW tcp_keepalives_count") == f"{KEEPALIVE_COUNT}"
