"""The Qdrant adapter (QdrantIndex) alone: a server that is down is a transient error,
HTTP statuses map to ragline's errors, an alias moves in one step, and the composition
root picks it only when ``QDRANT_URL`` is set. What every vector index does is in
tests/conformance/test_vector_index.py."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from runtime.errors import ConfigurationError, PermanentError, RateLimited, TransientError
from stages.adapters.vector_index.edge.index import EdgeIndex
from stages.adapters.vector_index.qdrant import QdrantConfig, QdrantIndex
from stages.ports.vector_index import vector_collection_name
from stages.services import vector_index
from stages.settings import PipelineSettings
from tests.support.s3 import closed_port

pytestmark = pytest.mark.anyio

DIM = 8
COLLECTION = vector_collection_name("test-model", DIM)
OLD = vector_collection_name("model-a", DIM)
NEW = vector_collection_name("model-b", DIM)


async def test_qdrant_server_down_is_transient() -> None:
    index = QdrantIndex(QdrantConfig(url=f"http://127.0.0.1:{closed_port()}", timeout_s=5))
    try:
        with pytest.raises(TransientError) as caught:
            await index.ensure_vector_collection(COLLECTION, DIM)
        assert caught.value.__cause__ is not None
    finally:
        await index.aclose()


@pytest.fixture
def status_server() -> Iterator[tuple[str, list[int]]]:
    """An HTTP server on loopback answering every request with the next queued status."""
    statuses: list[int] = []

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            status = statuses.pop(0) if statuses else 500
            body = json.dumps({"status": {"error": f"status {status}"}}).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            if status == 429:
                self.send_header("Retry-After", "7")
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_PUT = do_POST = _answer

        def log_message(self, format: str, *args: object) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", statuses
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.mark.parametrize(
    ("status", "expected"),
    [(503, TransientError), (429, RateLimited), (400, PermanentError), (403, PermanentError)],
)
async def test_qdrant_http_status_mapping(
    status_server: tuple[str, list[int]], status: int, expected: type[Exception]
) -> None:
    url, statuses = status_server
    statuses.append(status)
    index = QdrantIndex(QdrantConfig(url=url, timeout_s=5))
    try:
        with pytest.raises(expected) as caught:
            await index.ensure_vector_collection(COLLECTION, DIM)
        assert type(caught.value) is expected
        if status == 429:
            assert isinstance(caught.value, RateLimited)
            assert caught.value.retry_after_s == 7.0
    finally:
        await index.aclose()


async def test_qdrant_alias_moves_in_one_step() -> None:
    index = QdrantIndex(QdrantConfig(location=":memory:"))
    try:
        await index.ensure_vector_collection(OLD, DIM)
        await index.ensure_vector_collection(NEW, DIM)
        await index.point_alias("ragline", OLD)
        client = index._client

        async def aliases() -> list[tuple[str, str]]:
            found = (await client.get_aliases()).aliases
            return [(a.alias_name, a.collection_name) for a in found]

        assert await aliases() == [("ragline", OLD)]
        await index.point_alias("ragline", NEW)
        assert await aliases() == [("ragline", NEW)]
    finally:
        await index.aclose()


def test_factory_picks_qdrant_only_when_url_set(tmp_path: Path) -> None:
    assert isinstance(vector_index(PipelineSettings.from_env({}), tmp_path), EdgeIndex)
    qdrant = PipelineSettings.from_env({"QDRANT_URL": "http://127.0.0.1:9"})
    assert isinstance(vector_index(qdrant, tmp_path), QdrantIndex)
    with pytest.raises(ConfigurationError, match=r"^QDRANT_URL='localhost:6333' is invalid"):
        PipelineSettings.from_env({"QDRANT_URL": "localhost:6333"})
