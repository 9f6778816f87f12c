"""Errors of tasks nobody awaited: a database connection's is one line, not a traceback."""

from __future__ import annotations

import asyncio
import gc
import logging

import pytest

from runtime.cli.common import run_async


def orphan(exc: BaseException) -> None:
    """Run a loop in which a task fails with ``exc`` and is dropped unawaited."""

    async def body() -> None:
        async def fail() -> None:
            raise exc

        task = asyncio.get_running_loop().create_task(fail())
        await asyncio.sleep(0.01)
        del task
        gc.collect()  # the task reports its exception when it is collected
        await asyncio.sleep(0)

    run_async(body)


def test_an_unawaited_broken_pipe_is_one_debug_line(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    orphan(BrokenPipeError(32, "Broken pipe"))
    lines = [r for r in caplog.records if "Broken pipe" in r.getMessage()]
    assert [r.levelno for r in lines] == [logging.DEBUG]
    assert lines[0].exc_info is None and "\n" not in lines[0].getMessage()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_any_other_unawaited_error_keeps_asyncios_report(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    orphan(ValueError("a bug"))
    [report] = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert "never retrieved" in report.getMessage()
    assert report.exc_info is not None and isinstance(report.exc_info[1], ValueError)
