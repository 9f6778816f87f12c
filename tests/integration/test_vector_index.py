"""One conformance suite for both vector indexes: QdrantIndex on qdrant-client's local mode
(":memory:") and EdgeIndex on a tmp dir; plus EdgeIndex's multi-process behaviour."""

from __future__ import annotations

import fcntl
import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import anyio
import pytest

from runtime.errors import (
    ConfigurationError,
    MissingInput,
    PermanentError,
    RateLimited,
    Snooze,
    TransientError,
)
from stages.adapters.vector_index.edge.index import EdgeIndex, EdgeIndexConfig
from stages.adapters.vector_index.edge.session import is_wanted, lock_collection
from stages.adapters.vector_index.qdrant import QdrantConfig, QdrantIndex
from stages.ports.vector_index import (
    Point,
    VectorIndex,
    new_point,
    point_id,
    vector_collection_name,
)
from stages.services import vector_index
from stages.settings import PipelineSettings
from tests.support.s3 import closed_port

pytestmark = pytest.mark.anyio

REPO_ROOT = Path(__file__).resolve().parents[2]
DIM = 8
COLLECTION = vector_collection_name("test-model", DIM)


def unit(i: int, dim: int = DIM) -> list[float]:
    """A vector pointing mostly along axis ``i``, a little along the next one."""
    vec = [0.0] * dim
    vec[i % dim] = 1.0
    vec[(i + 1) % dim] = 0.1
    return vec


def points(doc: uuid.UUID, generation: int, count: int, start: int = 0) -> list[Point]:
    return [new_point(doc, n, generation, unit(n), {"ordinal": n}) for n in range(start, count)]


async def test_ensure_collection_is_idempotent(index: VectorIndex) -> None:
    await index.ensure_vector_collection(COLLECTION, DIM)
    doc = uuid.uuid4()
    await index.upsert(COLLECTION, points(doc, 1, 5))
    await index.ensure_vector_collection(COLLECTION, DIM)
    assert await index.count(COLLECTION) == 5
    with pytest.raises(PermanentError):
        await index.ensure_vector_collection(COLLECTION, DIM + 1)


async def test_upserting_same_ids_twice_does_not_duplicate(index: VectorIndex) -> None:
    await index.ensure_vector_collection(COLLECTION, DIM)
    doc, other = uuid.uuid4(), uuid.uuid4()
    await index.upsert(COLLECTION, points(doc, 1, 300))  # more than one batch
    await index.upsert(COLLECTION, points(doc, 1, 300))
    await index.upsert(COLLECTION, points(other, 1, 7))
    assert await index.count(COLLECTION, doc) == 300
    assert await index.count(COLLECTION, other) == 7
    assert await index.count(COLLECTION) == 307
    ids = await index.point_ids(COLLECTION, other)
    assert sorted(ids) == sorted(point_id(other, n) for n in range(7))
    assert len(await index.point_ids(COLLECTION, doc)) == 300


async def test_delete_document_keep_generation_drops_only_stale_points(
    index: VectorIndex,
) -> None:
    await index.ensure_vector_collection(COLLECTION, DIM)
    doc, other = uuid.uuid4(), uuid.uuid4()
    await index.upsert(COLLECTION, points(doc, 1, 10))  # generation 1: chunks 0..9
    await index.upsert(COLLECTION, points(doc, 2, 6))  # generation 2 rewrote chunks 0..5
    await index.upsert(COLLECTION, points(other, 1, 4))
    await index.delete_document(COLLECTION, doc, keep_generation=2)
    assert sorted(await index.point_ids(COLLECTION, doc)) == sorted(
        point_id(doc, n) for n in range(6)
    )
    assert await index.count(COLLECTION, other) == 4
    await index.delete_document(COLLECTION, doc)
    assert await index.count(COLLECTION, doc) == 0
    assert await index.count(COLLECTION, other) == 4


async def test_delete_generation_removes_what_one_run_wrote(index: VectorIndex) -> None:
    await index.ensure_vector_collection(COLLECTION, DIM)
    doc = uuid.uuid4()
    await index.upsert(COLLECTION, points(doc, 1, 10))
    await index.upsert(COLLECTION, points(doc, 2, 13, start=10))  # a failed run's partial output
    await index.delete_generation(COLLECTION, doc, 2)
    assert await index.count(COLLECTION, doc) == 10
    assert await index.count(COLLECTION) == 10


async def test_search_returns_nearest_first(index: VectorIndex) -> None:
    await index.ensure_vector_collection(COLLECTION, DIM)
    doc = uuid.uuid4()
    await index.upsert(COLLECTION, points(doc, 1, DIM))
    hits = await index.search(COLLECTION, unit(3), limit=3)
    assert len(hits) == 3
    assert hits[0].id == point_id(doc, 3)
    assert math.isclose(hits[0].score, 1.0, abs_tol=1e-4)
    assert hits[0].payload == {"document_id": str(doc), "generation": 1, "ordinal": 3}
    assert hits[0].score > hits[1].score >= hits[2].score


async def test_missing_collection(index: VectorIndex) -> None:
    missing = vector_collection_name("never-created", DIM)
    with pytest.raises(MissingInput):
        await index.count(missing)
    with pytest.raises(MissingInput):
        await index.search(missing, unit(0), limit=1)
    with pytest.raises(MissingInput):
        await index.upsert(missing, points(uuid.uuid4(), 1, 1))
    await index.delete_document(missing, uuid.uuid4())  # nothing to delete is fine
    await index.delete_generation(missing, uuid.uuid4(), 1)


async def test_bad_input_is_rejected(index: VectorIndex) -> None:
    await index.ensure_vector_collection(COLLECTION, DIM)
    bare = Point(id=uuid.uuid4(), vector=unit(0), payload={})
    with pytest.raises(ValueError):
        await index.upsert(COLLECTION, [bare])
    with pytest.raises(PermanentError):
        await index.upsert(COLLECTION, [new_point(uuid.uuid4(), 0, 1, [1.0, 2.0])])
    with pytest.raises(ValueError):
        await index.count("../escape")


def test_names_and_ids() -> None:
    assert vector_collection_name("cohere/embed-v4.0", 1024) == "ragline_cohere_embed-v4_0_1024"
    assert vector_collection_name("MiniLM L6", 384) == "ragline_minilm_l6_384"
    doc = uuid.uuid4()
    assert point_id(doc, 1) == point_id(doc, 1) != point_id(doc, 2)
    assert point_id(doc, 1) != point_id(uuid.uuid4(), 1)


def test_factory(tmp_path: Path) -> None:
    assert isinstance(vector_index(PipelineSettings.from_env({}), tmp_path), EdgeIndex)
    qdrant = PipelineSettings.from_env({"QDRANT_URL": "http://127.0.0.1:9"})
    assert isinstance(vector_index(qdrant, tmp_path), QdrantIndex)
    with pytest.raises(ConfigurationError, match=r"^QDRANT_URL='localhost:6333' is invalid"):
        PipelineSettings.from_env({"QDRANT_URL": "localhost:6333"})


# -- QdrantIndex error mapping over real HTTP ----------------------------------------------


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


# -- EdgeIndex across processes -----------------------------------------------------------

_WRITER = """
import sys, uuid, anyio
from pathlib import Path
from stages.adapters.vector_index.edge.index import EdgeIndex, EdgeIndexConfig
from stages.ports.vector_index import new_point

root, own, shared, dim = Path(sys.argv[1]), uuid.UUID(sys.argv[2]), uuid.UUID(sys.argv[3]), 8

def vec(n):
    return [float((n * 7 + k) % 11) + 1.0 for k in range(dim)]

async def main():
    index = EdgeIndex(EdgeIndexConfig(root=root))
    await index.ensure_vector_collection(sys.argv[4], dim)
    print("ready", flush=True)
    sys.stdin.readline()  # wait for "go" so both writers run at the same time
    for start in range(0, 2000, 256):
        batch = [new_point(own, n, 1, vec(n)) for n in range(start, min(start + 256, 2000))]
        await index.upsert(sys.argv[4], batch)
        # Both writers also write the same ids of a shared document: upserts, not copies.
        await index.upsert(sys.argv[4], [new_point(shared, n, 1, vec(n)) for n in range(50)])
    await index.delete_document(sys.argv[4], own, keep_generation=1)
    print("done", flush=True)

anyio.run(main)
"""


def _spawn_writer(root: Path, own: uuid.UUID, shared: uuid.UUID) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(root), str(own), str(shared), COLLECTION],
        cwd=REPO_ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def test_edge_two_processes_write_concurrently_and_counts_are_exact(tmp_path: Path) -> None:
    # Synchronous on purpose: the work happens in the children, so one run is enough.
    root = tmp_path / "qdrant"
    docs = [uuid.uuid4(), uuid.uuid4()]
    shared = uuid.uuid4()
    _run_together([_spawn_writer(root, doc, shared) for doc in docs])
    anyio.run(_check_counts, root, docs, shared)


async def _check_counts(root: Path, docs: list[uuid.UUID], shared: uuid.UUID) -> None:
    reopened = EdgeIndex(EdgeIndexConfig(root=root))  # a third process's view, after both
    assert [await reopened.count(COLLECTION, doc) for doc in docs] == [2000, 2000]
    assert await reopened.count(COLLECTION, shared) == 50
    assert await reopened.count(COLLECTION) == 4050
    assert len(set(await reopened.point_ids(COLLECTION, docs[0]))) == 2000


async def test_edge_data_persists_across_reopen(tmp_path: Path) -> None:
    config = EdgeIndexConfig(root=tmp_path / "qdrant")
    first = EdgeIndex(config)
    doc = uuid.uuid4()
    await first.ensure_vector_collection(COLLECTION, DIM)
    await first.upsert(COLLECTION, points(doc, 1, DIM))
    await first.aclose()
    second = EdgeIndex(config)
    assert await second.count(COLLECTION, doc) == DIM
    hits = await second.search(COLLECTION, unit(5), limit=1)
    assert hits[0].id == point_id(doc, 5)
    await second.aclose()


# -- replace_document ----------------------------------------------------------------------


async def test_replace_document_upserts_then_drops_other_generations(index: VectorIndex) -> None:
    await index.ensure_vector_collection(COLLECTION, DIM)
    doc, other = uuid.uuid4(), uuid.uuid4()
    await index.replace_document(COLLECTION, doc, 1, points(doc, 1, 10))
    await index.replace_document(COLLECTION, other, 1, points(other, 1, 4))
    for _ in range(2):  # a re-run after a crash changes nothing
        await index.replace_document(COLLECTION, doc, 2, points(doc, 2, 6))
        refs = await index.scan(COLLECTION, doc)
        assert sorted(r.id for r in refs) == sorted(point_id(doc, n) for n in range(6))
        assert {r.generation for r in refs} == {2}
        assert await index.count(COLLECTION, other) == 4
    await index.replace_document(COLLECTION, doc, 3, [])  # nothing left to index
    assert await index.count(COLLECTION, doc) == 0
    assert await index.count(COLLECTION) == 4


async def test_replace_document_drops_as_many_points_at_other_ordinals(
    index: VectorIndex,
) -> None:
    """A generation with as many points as the last, none of them at its ordinals: the
    document ends with the new points only (however the index decides what is stale)."""
    await index.ensure_vector_collection(COLLECTION, DIM)
    doc = uuid.uuid4()
    await index.replace_document(COLLECTION, doc, 1, points(doc, 1, 5))
    await index.replace_document(COLLECTION, doc, 2, points(doc, 2, 8, start=3))
    refs = await index.scan(COLLECTION, doc)
    assert sorted(r.id for r in refs) == sorted(point_id(doc, n) for n in range(3, 8))
    assert {r.generation for r in refs} == {2}
    # Same ids, same generation, written again: nothing stale, nothing lost.
    await index.replace_document(COLLECTION, doc, 2, points(doc, 2, 8, start=3))
    assert await index.count(COLLECTION, doc) == 5


async def test_replace_document_rejects_foreign_points(index: VectorIndex) -> None:
    await index.ensure_vector_collection(COLLECTION, DIM)
    doc = uuid.uuid4()
    with pytest.raises(ValueError):
        await index.replace_document(COLLECTION, doc, 2, points(doc, 1, 3))
    with pytest.raises(ValueError):
        await index.replace_document(COLLECTION, doc, 1, points(uuid.uuid4(), 1, 3))
    assert await index.count(COLLECTION) == 0


async def test_replace_document_in_missing_collection(index: VectorIndex) -> None:
    missing = vector_collection_name("never-created", DIM)
    doc = uuid.uuid4()
    with pytest.raises(MissingInput):
        await index.replace_document(missing, doc, 1, points(doc, 1, 2))
    await index.replace_document(missing, doc, 1, [])  # nothing to write or delete is fine


# -- EdgeIndex sessions -------------------------------------------------------------------


def _try_lock(path: Path) -> int | None:
    """An fd holding the flock on ``path``, or None if someone else holds it. flock locks
    belong to open file descriptions, so this contends with EdgeIndex in this process."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


async def _lock_within(path: Path, limit_s: float) -> float:
    """Seconds until the flock on ``path`` could be taken (then released); fails after limit."""
    started = time.monotonic()
    while (fd := _try_lock(path)) is None:
        assert time.monotonic() - started < limit_s, f"{path.name} still locked"
        await anyio.sleep(0.01)
    os.close(fd)
    return time.monotonic() - started


async def test_edge_session_is_kept_then_closed_when_idle(tmp_path: Path) -> None:
    root = tmp_path / "qdrant"
    index = EdgeIndex(EdgeIndexConfig(root=root, idle_keep_s=0.3))
    lock = root / f"{COLLECTION}.lock"
    doc = uuid.uuid4()
    try:
        await index.ensure_vector_collection(COLLECTION, DIM)
        await index.replace_document(COLLECTION, doc, 1, points(doc, 1, 5))
        assert _try_lock(lock) is None  # held across operations, not per call
        assert await _lock_within(lock, limit_s=5.0) >= 0.1
        assert await index.count(COLLECTION, doc) == 5  # reopens after the idle close
        assert _try_lock(lock) is None
    finally:
        await index.aclose()
    assert await _lock_within(lock, limit_s=0.0) == pytest.approx(0.0, abs=0.05)


@pytest.mark.parametrize(("marker", "hold_s"), [("waiting", 0.3), ("queued", 0.9)])
async def test_edge_busy_session_lets_a_waiting_holder_in(
    tmp_path: Path, marker: str, hold_s: float
) -> None:
    """A session in constant use (never idle) is handed over once open its maximum hold:
    ``max_hold_s`` for any waiter, ``batch_max_hold_s`` for one that waits to write a
    document (its ``.queued`` marker); the holder then lets the waiter in before it locks
    again (flock alone is not fair), so it gets in however loaded the machine is."""
    root = tmp_path / "qdrant"
    config = EdgeIndexConfig(root=root, idle_close_s=30.0, max_hold_s=0.3, batch_max_hold_s=0.9)
    index = EdgeIndex(config)
    await index.ensure_vector_collection(COLLECTION, DIM)
    await index.aclose()  # the session below opens with the first count
    got_at: list[float] = []

    def wait_for_lock() -> None:
        # Blocks while the session is held, as another ragline process would.
        fd = lock_collection(root / f"{COLLECTION}.lock", root / f"{COLLECTION}.{marker}")
        got_at.append(time.monotonic())
        os.close(fd)

    waiter = threading.Thread(target=wait_for_lock, daemon=True)
    try:
        opened = time.monotonic()
        await index.count(COLLECTION)
        waiter.start()
        while not got_at:  # keep the session busy: never idle
            assert time.monotonic() - opened < 20.0, "the waiting holder never got the lock"
            await index.count(COLLECTION)
        # Not before the hold (never per operation), and before this process locks again.
        assert got_at[0] - opened >= hold_s
        assert _try_lock(root / f"{COLLECTION}.lock") is None  # ours again, for the counts
    finally:
        await index.aclose()
        waiter.join(timeout=10)


@pytest.mark.parametrize(("marker", "hold_s"), [("waiting", 0.5), ("queued", 1.5)])
async def test_edge_idle_session_is_kept_until_another_process_wants_it(
    tmp_path: Path, marker: str, hold_s: float
) -> None:
    """An idle session is let go once wanted and open ``min_hold_s`` (``batch_min_hold_s``
    when the waiter waits to write a document), not after ``idle_keep_s``."""
    root = tmp_path / "qdrant"
    config = EdgeIndexConfig(
        root=root, idle_close_s=0.05, min_hold_s=0.5, batch_min_hold_s=1.5, idle_keep_s=60.0
    )
    index = EdgeIndex(config)
    lock, waiting = root / f"{COLLECTION}.lock", root / f"{COLLECTION}.{marker}"
    try:
        opened = time.monotonic()  # before the session opens: the hold counts from there
        await index.ensure_vector_collection(COLLECTION, DIM)
        await anyio.sleep(0.2)
        assert _try_lock(lock) is None  # idle, but nobody asked: still held
        assert not is_wanted(waiting)
        fd = await anyio.to_thread.run_sync(lock_collection, lock, waiting)
        waited = time.monotonic() - opened
        os.close(fd)
        # Let go within a timer tick or two of the hold, not after idle_keep_s.
        assert hold_s <= waited < hold_s + 5.0
        assert await index.count(COLLECTION) == 0  # and it takes the lock back for work
    finally:
        await index.aclose()


async def test_edge_reserve_snoozes_while_another_indexing_process_holds_the_collection(
    tmp_path: Path,
) -> None:
    """An index job neither waits for a shard another indexing process holds nor says it
    wants it (the holder keeps its session and takes the job); ensure_vector_collection of an
    existing shard needs no lock; once the collection is free, reserve holds it."""
    root = tmp_path / "qdrant"
    index = EdgeIndex(EdgeIndexConfig(root=root, idle_keep_s=60.0))
    await index.ensure_vector_collection(COLLECTION, DIM)
    await index.aclose()
    lock, doc = root / f"{COLLECTION}.lock", uuid.uuid4()
    held = _try_lock(lock)  # another process's session, one that runs index jobs
    assert held is not None
    indexing = os.open(root / f"{COLLECTION}.indexing", os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(indexing, fcntl.LOCK_SH)
    try:
        with anyio.fail_after(10):
            await index.ensure_vector_collection(COLLECTION, DIM)
            with pytest.raises(PermanentError, match="8-dimension"):
                await index.ensure_vector_collection(COLLECTION, DIM * 2)
            with pytest.raises(Snooze):
                await index.reserve(COLLECTION)
        assert not is_wanted(root / f"{COLLECTION}.waiting")
        assert not is_wanted(root / f"{COLLECTION}.queued")
    finally:
        os.close(indexing)
        os.close(held)
    try:
        await index.reserve(COLLECTION)
        assert _try_lock(lock) is None  # held for the writes that follow
        assert is_wanted(root / f"{COLLECTION}.indexing")  # and others' index jobs snooze
        await index.replace_document(COLLECTION, doc, 1, points(doc, 1, DIM))
        assert await index.count(COLLECTION, doc) == DIM
    finally:
        await index.aclose()
    assert not is_wanted(root / f"{COLLECTION}.indexing")


async def test_edge_reserve_waits_out_a_readers_hold(tmp_path: Path) -> None:
    """A reader (search, verify) that holds the shard runs no index jobs: an index job
    waits for it as a queued writer (it would starve if it snoozed to a busy reader)."""
    root = tmp_path / "qdrant"
    index = EdgeIndex(EdgeIndexConfig(root=root))
    await index.ensure_vector_collection(COLLECTION, DIM)
    await index.aclose()
    reader = _try_lock(root / f"{COLLECTION}.lock")
    assert reader is not None

    def let_go_once_wanted() -> None:
        while not is_wanted(root / f"{COLLECTION}.queued"):
            time.sleep(0.01)
        os.close(reader)

    thread = threading.Thread(target=let_go_once_wanted, daemon=True)
    thread.start()
    try:
        with anyio.fail_after(10):
            await index.reserve(COLLECTION)
        assert _try_lock(root / f"{COLLECTION}.lock") is None
    finally:
        await index.aclose()
        thread.join(timeout=10)


_REPLACER = """
import sys, uuid, anyio
from pathlib import Path
from stages.adapters.vector_index.edge.index import EdgeIndex, EdgeIndexConfig
from stages.ports.vector_index import new_point

root, dim, collection = Path(sys.argv[1]), 8, sys.argv[2]
docs = [uuid.UUID(d) for d in sys.argv[3].split(",")]
shared = uuid.UUID(sys.argv[4])

def vec(n):
    return [float((n * 7 + k) % 11) + 1.0 for k in range(dim)]

def pts(doc, generation, count):
    return [new_point(doc, n, generation, vec(n)) for n in range(count)]

async def main():
    index = EdgeIndex(EdgeIndexConfig(root=root))
    await index.ensure_vector_collection(collection, dim)
    print("ready", flush=True)
    sys.stdin.readline()  # wait for "go" so both writers run at the same time
    for doc in docs:
        await index.replace_document(collection, doc, 1, pts(doc, 1, 40))
        await index.replace_document(collection, shared, 1, pts(shared, 1, 50))
    for doc in docs:  # a reprocess: fewer chunks in generation 2
        await index.replace_document(collection, doc, 2, pts(doc, 2, 25))
    await index.aclose()
    print("done", flush=True)

anyio.run(main)
"""


def _run_together(writers: list[subprocess.Popen[str]]) -> None:
    try:
        for writer in writers:
            assert writer.stdout is not None and writer.stdout.readline().strip() == "ready"
        for writer in writers:
            assert writer.stdin is not None
            writer.stdin.write("go\n")
            writer.stdin.flush()
        for writer in writers:
            out, _ = writer.communicate(timeout=90)
            assert writer.returncode == 0 and out.strip() == "done"
    finally:
        for writer in writers:
            if writer.poll() is None:
                writer.kill()
                writer.wait()


def test_edge_two_processes_replace_documents_and_counts_are_exact(tmp_path: Path) -> None:
    root = tmp_path / "qdrant"
    docs = [[uuid.uuid4() for _ in range(30)] for _ in range(2)]
    shared = uuid.uuid4()
    writers = [
        subprocess.Popen(
            [
                *(sys.executable, "-c", _REPLACER, str(root), COLLECTION),
                *(",".join(map(str, own)), str(shared)),
            ],
            cwd=REPO_ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for own in docs
    ]
    _run_together(writers)
    anyio.run(_check_replaced, root, docs[0] + docs[1], shared)


async def _check_replaced(root: Path, docs: list[uuid.UUID], shared: uuid.UUID) -> None:
    reopened = EdgeIndex(EdgeIndexConfig(root=root))
    try:
        refs = await reopened.scan(COLLECTION)
        assert len(refs) == len(docs) * 25 + 50
        assert len({r.id for r in refs}) == len(refs)
        per_doc = {(r.document_id, r.generation) for r in refs}
        assert per_doc == {(str(d), 2) for d in docs} | {(str(shared), 1)}
        assert [await reopened.count(COLLECTION, d) for d in docs[:3]] == [25, 25, 25]
    finally:
        await reopened.aclose()


_KILLED = """
import sys, uuid, anyio
from pathlib import Path
from stages.adapters.vector_index.edge.index import EdgeIndex, EdgeIndexConfig
from stages.ports.vector_index import new_point

root, collection, doc = Path(sys.argv[1]), sys.argv[2], uuid.UUID(sys.argv[3])

async def main():
    # Long idle and hold times: the session is still open, unflushed, when killed.
    index = EdgeIndex(
        EdgeIndexConfig(root=root, idle_keep_s=600, max_hold_s=600, flush_every_s=600)
    )
    await index.ensure_vector_collection(collection, 8)
    old = [new_point(doc, n, 1, [1.0] * 8) for n in range(400)]
    await index.replace_document(collection, doc, 1, old)
    new = [new_point(doc, n, 2, [float(n % 8 + 1)] * 8) for n in range(300)]
    await index.replace_document(collection, doc, 2, new)
    print("done", flush=True)
    sys.stdin.readline()  # killed here

anyio.run(main)
"""


def test_edge_points_survive_sigkill_right_after_replace_document(tmp_path: Path) -> None:
    root = tmp_path / "qdrant"
    doc = uuid.uuid4()
    with subprocess.Popen(
        [sys.executable, "-c", _KILLED, str(root), COLLECTION, str(doc)],
        cwd=REPO_ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as child:  # closes the pipes and waits
        try:
            assert child.stdout is not None and child.stdout.readline().strip() == "done"
            assert _try_lock(root / f"{COLLECTION}.lock") is None  # session open: not flushed
            child.send_signal(signal.SIGKILL)
            assert child.wait(timeout=30) == -signal.SIGKILL
        finally:
            if child.poll() is None:
                child.kill()
    anyio.run(_check_survivors, root, doc)


async def _check_survivors(root: Path, doc: uuid.UUID) -> None:
    reopened = EdgeIndex(EdgeIndexConfig(root=root))
    try:
        refs = await reopened.scan(COLLECTION, doc)
        assert sorted(r.id for r in refs) == sorted(point_id(doc, n) for n in range(300))
        assert {r.generation for r in refs} == {2}
    finally:
        await reopened.aclose()
