"""stages.serve.problems: what an unexpected error's answer and log line say. The client
gets one line and no detail; the log gets the error's type and where it was raised, never
its text (which may quote a connection string)."""

from __future__ import annotations

import logging

import asyncpg
import pytest
from litestar import Litestar, get
from litestar.exceptions import HTTPException
from litestar.testing import TestClient

from stages.serve.problems import on_http_error, on_unexpected, raised_at

SECRET = "postgresql://ragline:hunter2@db.internal/ragline"


def lookup(table: dict[str, str]) -> str:
    return table[SECRET]


@get("/boom", sync_to_thread=False)
def boom() -> str:
    return lookup({})


@get("/gone", sync_to_thread=False)
def gone() -> str:
    raise asyncpg.exceptions.ConnectionDoesNotExistError("connection to " + SECRET + " lost")


APP = Litestar(
    [boom, gone],
    exception_handlers={HTTPException: on_http_error, Exception: on_unexpected},
)


def test_an_unexpected_error_is_a_500_logged_with_where_it_was_raised(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.ERROR, "stages.serve.problems"), TestClient(APP) as client:
        r = client.get("/boom")
    assert r.status_code == 500
    assert r.json()["detail"] == "internal error; the server log has the details"
    [line] = [rec.getMessage() for rec in caplog.records if rec.name == "stages.serve.problems"]
    assert line.startswith("GET /boom failed: KeyError at ")
    assert "tests/unit/stages/serve/test_problems.py:" in line and " in lookup < " in line
    assert " in boom" in line
    assert "hunter2" not in line and "db.internal" not in line and SECRET not in r.text


def test_a_lost_database_is_a_503_whose_log_names_no_secret(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, "stages.serve.problems"), TestClient(APP) as client:
        r = client.get("/gone")
    assert r.status_code == 503 and r.headers["retry-after"] == "2"
    [line] = [rec.getMessage() for rec in caplog.records if rec.name == "stages.serve.problems"]
    assert line == "GET /gone: database unavailable (ConnectionDoesNotExistError)"
    assert "hunter2" not in r.text


def test_raised_at_reads_innermost_first_and_keeps_three_frames() -> None:
    def a() -> None:
        b()

    def b() -> None:
        c()

    def c() -> None:
        d()

    def d() -> None:
        raise ValueError(SECRET)

    with pytest.raises(ValueError) as caught:
        a()
    where = raised_at(caught.value)
    assert [part.rsplit(" in ", 1)[1] for part in where.split(" < ")] == ["d", "c", "b"]
    assert all(
        p.startswith("tests/unit/stages/serve/test_problems.py:") for p in where.split(" < ")
    )
    assert SECRET not in where
