"""Run a test module's async tests on uvloop and on plain asyncio."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture(
    params=[
        pytest.param(("asyncio", {"use_uvloop": True}), id="uvloop"),
        pytest.param(("asyncio", {}), id="asyncio"),
    ]
)
def anyio_backend(request: pytest.FixtureRequest) -> Any:
    return request.param
