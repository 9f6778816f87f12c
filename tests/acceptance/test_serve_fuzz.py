"""The HTTP API fuzzed from its own OpenAPI schema (issue 39): schemathesis against a live
``serve``, without tokens and with them (it sends the bearer header), finds no 5xx and no
answer that breaks the schema. A few examples per operation here (a run of a few
hundred cases); ``python -m bench.fuzz`` runs the same longer."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from bench.harness.cli import Cli
from bench.harness.db import Databases
from bench.harness.fuzz import fuzz
from bench.harness.serve import running_server

#: Examples per operation: ~400 cases, ~10 s of schemathesis on the 2-core machine.
EXAMPLES = 10


@pytest.fixture
def cli(databases: Databases, tmp_path: Path) -> Iterator[Cli]:
    with databases.fresh() as dsn:
        yield Cli(dsn, tmp_path / "data", tmp_path / "logs")


@pytest.mark.parametrize("tokens", [False, True], ids=["open", "tokens"])
def test_fuzzed_api_keeps_to_its_schema(cli: Cli, tmp_path: Path, tokens: bool) -> None:
    token = secrets.token_hex(16) if tokens else None
    env = {"RAGLINE_API_TOKENS": token} if token else {}
    with running_server(cli, **env) as server:
        if token is not None:  # the schema says so, and schemathesis checks it is so
            auth = {"Authorization": f"Bearer {token}"}
            spec = httpx.get(f"{server.url}/v1/schema/openapi.json", headers=auth).json()
            assert spec["security"] == [{"bearer": []}]
            assert spec["paths"]["/healthz"]["get"]["security"] == []
        run = fuzz(server, tmp_path / "st", max_examples=EXAMPLES, token=token)
        log = server.output()
    assert run.clean, "\n".join([*run.found, run.output[-6000:]])
    assert run.operations >= 12 and run.cases >= 200, run
    # Every 5xx is logged as "<method> <path> failed: <type>"; none may be.
    assert " failed: " not in log and "Traceback" not in log, log[-3000:]
