"""bench.harness.proccpu: the local server's CPU, which bench.ingest adds to ragline's."""

from __future__ import annotations

import sys

import asyncpg
import pytest

from bench.harness.proccpu import postgres_cpu_s

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc"),
]


async def test_a_querys_cpu_is_counted(dsn: str) -> None:
    """The test server runs on this machine (the embedded one, or DATABASE_URL's here):
    a query's CPU shows in the total once its connection is closed (the backend's own
    figure while it lingers, the postmaster's collected one after it is reaped)."""
    before = postgres_cpu_s()
    if before is None:
        pytest.skip("the server's processes are not visible from here")
    conn = await asyncpg.connect(dsn)
    try:
        await conn.fetchval(
            "SELECT count(*) FROM generate_series(1, 4000000) AS g(n) WHERE n % 7 = 0"
        )
    finally:
        await conn.close()
    after = postgres_cpu_s()
    assert after is not None and after - before >= 0.1
