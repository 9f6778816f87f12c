"""Listening to ragline's NOTIFY channel in tests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import asyncpg

from runtime.worker.listener import CHANNEL


class Heard:
    """Payloads NOTIFYed on ragline's channel, in order."""

    def __init__(self) -> None:
        self.payloads: list[str] = []
        self.arrived = anyio.Event()

    def __call__(self, _conn: object, _pid: int, _channel: str, payload: object) -> None:
        self.payloads.append(str(payload))
        self.arrived.set()

    async def after(self, action: Awaitable[Any]) -> list[str]:
        """Payloads heard within 0.5 s of ``action`` (a NOTIFY arrives within ms)."""
        self.payloads.clear()
        self.arrived = anyio.Event()
        await action
        with anyio.move_on_after(0.5):
            await self.arrived.wait()
        await anyio.sleep(0.05)
        return list(self.payloads)


@asynccontextmanager
async def listening(dsn: str) -> AsyncIterator[Heard]:
    heard = Heard()
    conn = await asyncpg.connect(dsn)
    try:
        await conn.add_listener(CHANNEL, heard)
        yield heard
    finally:
        await conn.close()
