"""Switching the embedding model without a half-built index, as a user runs it.

Six documents are ingested with model A (a local Cohere-compatible server). A search
probe runs in a thread all the while. ``migrate-model`` to model B is SIGKILLed midway
(its embed calls for B are slowed so it is caught with some documents done); a document
uploaded during the migration is indexed into both collections by the workers; status
shows the progress; the same command run again (as ``reprocess --from embed --model B``)
resumes without embedding again what was done, swaps, and deletes A's collection. Every
answer the probe got came whole from one collection and was complete: every document,
every chunk, the query's own chunk first at score 1 (the query was embedded by the model
of the collection it searched), A's answers strictly before B's, never an empty one.
"""

from __future__ import annotations

import asyncio
import shutil
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import msgspec
import pytest

from bench.harness.cli import Cli
from bench.harness.db import sql
from bench.harness.procs import REPO, wait_for
from runtime.cli.common import EXIT_OK
from tests.support.pipeline_env import FAKE_DIMS, TimedCohere, cohere_env, long_pdf

SAMPLES = REPO / "samples"
MODEL_A = f"cohere/embed-v4.0@{FAKE_DIMS}"
MODEL_B = f"cohere/embed-b@{FAKE_DIMS}"
#: Seconds each embed request of model B for documents takes (catches the migrator midway).
B_DELAY_S = 0.8


class SlowB(TimedCohere):
    """Model B's document embeddings are slow; requests are counted per model."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.document_requests: dict[str, int] = {}

    def embed_response(self, body: dict[str, Any]) -> dict[str, Any]:
        model = str(body.get("model"))
        if body.get("input_type") == "search_document":
            with self._lock:
                self.document_requests[model] = self.document_requests.get(model, 0) + 1
            if model == "embed-b":
                self.sleep(B_DELAY_S)
        return super().embed_response(body)


class Answer(msgspec.Struct, frozen=True):
    collection: str
    hits: list[tuple[str, int, float, str]]  # document, ordinal, score, text


class Probe:
    """Searches the live collection in a loop from its own thread and event loop."""

    def __init__(self, dsn: str, data_dir: Path, env: dict[str, str], query: str) -> None:
        self.dsn, self.data_dir, self.env, self.query = dsn, data_dir, env, query
        self.answers: list[Answer] = []
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=lambda: asyncio.run(self._loop()), daemon=True)

    async def _loop(self) -> None:
        from stages.actions.search import search
        from stages.services import Services

        services = Services(self.env, self.data_dir)
        async with (
            asyncpg.create_pool(self.dsn, min_size=1, max_size=2) as pool,
            services.lifespan(),
        ):
            while not self.stop.is_set():
                try:
                    found = await search(pool, services, self.query, 1000, mode="dense")
                except Exception as exc:
                    self.errors.append(repr(exc))
                    continue
                self.answers.append(
                    Answer(
                        found.vector_collection,
                        [(str(h.document_id), h.ordinal, h.score, h.text) for h in found.hits],
                    )
                )
                await asyncio.sleep(0.05)


@pytest.fixture
def server() -> Iterator[SlowB]:
    with SlowB(dims=FAKE_DIMS) as fake:
        yield fake


def migrated(dsn: str) -> int:
    return int(sql(dsn, "SELECT count(*) AS n FROM model_migration_documents")[0]["n"])


def test_migration_killed_midway_resumes_and_search_never_sees_half(
    dsn: str, tmp_path: Path, server: SlowB
) -> None:
    env = cohere_env(server)
    cli = Cli(dsn, tmp_path / "data", tmp_path / "logs", **env)
    folder = tmp_path / "docs"
    folder.mkdir()
    for name in ("lighthouses.pdf", "sourdough.pdf", "rust-borrow-checker.pdf"):
        shutil.copy(SAMPLES / name, folder / name)
    for i in range(3):
        long_pdf(folder / f"harbour-{i}.pdf", 24, seed=f"-{i}")
    ingest = cli.run("ingest", str(folder), "--json")
    assert ingest.code == EXIT_OK, ingest
    first = {r["id"] for r in sql(dsn, "SELECT id::text FROM documents")}
    assert len(first) == 6
    query = sql(dsn, "SELECT text FROM chunks ORDER BY document_id, ordinal LIMIT 1")[0]["text"]
    [alias] = sql(dsn, "SELECT model, collection FROM vector_aliases")
    assert alias["model"] == MODEL_A
    old = alias["collection"]

    probe = Probe(dsn, tmp_path / "data", {**env, "RAGLINE_DATA_DIR": ""}, query)
    probe.thread.start()
    try:
        # -- killed midway ------------------------------------------------------------
        migrator = cli.start("migrate-model", MODEL_B)
        wait_for(lambda: migrated(dsn) >= 2, timeout_s=60, what="two documents migrated")
        migrator.signal(signal.SIGKILL)
        assert migrator.proc.wait(10) == -signal.SIGKILL
        done_at_kill = migrated(dsn)
        assert 2 <= done_at_kill < 6
        [state] = sql(dsn, "SELECT state, to_collection FROM model_migrations")
        assert state["state"] == "building"
        new = state["to_collection"]
        assert sql(dsn, "SELECT collection FROM vector_aliases")[0]["collection"] == old
        status = cli.run("status")
        assert status.code == EXIT_OK, status
        assert f"model migration {MODEL_A} -> {MODEL_B}: building, {done_at_kill}/6" in status.out

        # -- an upload during the migration goes into both collections -----------------
        extra = long_pdf(tmp_path / "late.pdf", 16, seed="-late")
        submitted = cli.run("submit", str(extra), "--json")
        assert submitted.code == EXIT_OK, submitted
        late = str(submitted.json()["submitted"][0]["document_id"])
        worker = cli.run("--exit-when-idle")
        assert worker.code == EXIT_OK, worker
        rows = sql(
            dsn, "SELECT 1 FROM model_migration_documents WHERE document_id = $1::uuid", late
        )
        assert rows, "the index stage wrote the new document into the new collection too"

        # -- resumed: only what was missing is embedded -----------------------------------
        before = server.document_requests.get("embed-b", 0)
        # (reprocess --from embed --model is the same command)
        resumed = cli.run("reprocess", "--from", "embed", "--model", MODEL_B, "--json")
        assert resumed.code == EXIT_OK, resumed
        assert resumed.json() | {"id": 0} == {
            "id": 0,
            "from_model": MODEL_A,
            "to_model": MODEL_B,
            "from_collection": old,
            "to_collection": new,
            "state": "done",
            "ready": 7,
            "migrated": 7,
        }
        assert server.document_requests.get("embed-b", 0) - before <= 6 - done_at_kill
        time.sleep(1.0)  # a few answers from the new collection
    finally:
        probe.stop.set()
        probe.thread.join(30)

    # -- what the probe saw -------------------------------------------------------------
    assert probe.errors == []
    chunks = {
        r["id"]: r["n"]
        for r in sql(dsn, "SELECT document_id::text AS id, count(*) AS n FROM chunks GROUP BY 1")
    }
    seen = [a.collection for a in probe.answers]
    assert old in seen and new in seen
    switch = seen.index(new)
    assert seen[:switch] == [old] * switch and seen[switch:] == [new] * (len(seen) - switch)
    for answer in probe.answers:
        per_doc: dict[str, set[int]] = {}
        for doc, ordinal, _, _ in answer.hits:
            per_doc.setdefault(doc, set()).add(ordinal)
        assert first <= set(per_doc), "an answer missed documents"
        assert {d: len(o) for d, o in per_doc.items()} == {d: chunks[d] for d in per_doc}
        assert len(answer.hits) == sum(chunks[d] for d in per_doc)
        top_text, top_score = answer.hits[0][3], answer.hits[0][2]
        assert top_text == query and top_score > 0.999

    # -- afterwards: one collection, B's, complete ------------------------------------------
    assert sql(dsn, "SELECT model, collection FROM vector_aliases")[0]["collection"] == new
    assert not (tmp_path / "data" / "qdrant" / old).exists()
    verify = cli.run("verify", "--json")
    assert verify.code == EXIT_OK, verify
    assert verify.json()["problems"] == []
    assert verify.json()["points"] == sum(chunks.values())
    assert verify.json()["vector_collection"] == new
