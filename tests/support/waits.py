"""Waiting in tests: poll a cheap async check until it holds, or fail saying what for."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio


async def wait_until(
    check: Callable[[], Awaitable[Any]], *, timeout_s: float = 30, what: str = "condition"
) -> None:
    """Poll the async ``check`` (a cheap database read) until it returns something true."""
    with anyio.move_on_after(timeout_s):
        while True:
            if await check():
                return
            await anyio.sleep(0.02)
    raise TimeoutError(f"timed out waiting for {what}")
