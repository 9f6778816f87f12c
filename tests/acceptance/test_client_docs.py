"""Every example of the client's docs runs: each ```python block of docs/client.md (and of
README.md, where one uses ``stages.client``) is executed against a live ``serve`` over the
ingested samples, with a worker running, its URL in place of the docs' one."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.harness.cli import Cli
from bench.harness.db import Databases
from bench.harness.fake_cohere import FakeCohere
from bench.harness.serve import running_server
from tests.support.pipeline_env import FAKE_DIMS, cohere_env

REPO = Path(__file__).resolve().parents[2]
DOCS = (REPO / "docs" / "client.md", REPO / "README.md")
DOCS_URL = "http://127.0.0.1:8000"
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
#: docs/client.md's examples (fewer found means the extraction broke, not the docs).
DOCS_EXAMPLES = 7


def examples() -> list[tuple[str, str]]:
    found = []
    for path in DOCS:
        blocks = _BLOCK.findall(path.read_text()) if path.exists() else []
        found += [
            (f"{path.name}:{i}", code) for i, code in enumerate(blocks) if "stages.client" in code
        ]
    return found


def test_the_docs_have_their_examples() -> None:
    in_docs = [where for where, _ in examples() if where.startswith("client.md")]
    assert len(in_docs) == DOCS_EXAMPLES, in_docs


@pytest.fixture(scope="module")
def live(databases: Databases, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("client-docs")
    with FakeCohere(dims=FAKE_DIMS) as cohere, databases.fresh() as dsn:
        cli = Cli(dsn, tmp / "data", tmp / "logs", **cohere_env(cohere, RAGLINE_POLL_S="0.2"))
        ingested = cli.run("ingest", str(REPO / "samples"), "--json", timeout_s=110)
        assert ingested.code == 0, ingested
        worker = cli.start()
        try:
            with running_server(cli, "--sse-heartbeat", "1") as server:
                yield server.url
        finally:
            worker.kill()


@pytest.mark.parametrize(("where", "code"), examples(), ids=[w for w, _ in examples()])
def test_example_runs(
    where: str,
    code: str,
    live: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(REPO)  # the examples name samples/ by a relative path
    assert DOCS_URL in code, f"{where} does not talk to {DOCS_URL}"
    program = compile(code.replace(DOCS_URL, live), where, "exec")
    exec(program, {"__name__": "__docs_example__"})
    assert capsys.readouterr().out.strip(), f"{where} printed nothing"
    assert os.getcwd() == str(REPO)
