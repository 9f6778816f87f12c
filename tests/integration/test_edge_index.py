"""The embedded vector index (EdgeIndex, qdrant-edge) alone: its data persists across
reopening; its session holds a collection's lock across operations and lets it go when
idle or wanted; an index job reserves the collection or snoozes; two processes write one
collection with exact counts; points survive a SIGKILL; points of its earlier layouts are
still read, replaced and deleted. What every vector index does is in
tests/conformance/test_vector_index.py."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
import qdrant_edge as qe

from runtime.errors import PermanentError, Snooze
from stages.adapters.vector_index.edge.index import EdgeIndex, EdgeIndexConfig
from stages.adapters.vector_index.edge.session import is_wanted, lock_collection
from stages.ports.vector_index import (
    COLLECTION_FIELD,
    DOCUMENT_FIELD,
    GENERATION_FIELD,
    Point,
    Query,
    new_point,
    point_id,
    vector_collection_name,
)
from tests.support.vectors import DIM, points, unit, vec

pytestmark = pytest.mark.anyio

REPO_ROOT = Path(__file__).resolve().parents[2]
COLLECTION = vector_collection_name("test-model", DIM)
OLD = vector_collection_name("model-a", DIM)


# -- EdgeIndex across processes -----------------------------------------------------------


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
    hits = await second.search(COLLECTION, Query(vector=unit(5)), limit=1)
    assert hits[0].id == point_id(doc, 5)
    await second.aclose()


async def test_edge_stores_new_vectors_in_half_precision(tmp_path: Path) -> None:
    """A new collection keeps its vectors as float16 (half the bytes an exact search
    reads); a vector still finds itself first, with a cosine of 1 to float16's precision."""
    index = EdgeIndex(EdgeIndexConfig(root=tmp_path / "qdrant"))
    doc = uuid.uuid4()
    await index.ensure_vector_collection(COLLECTION, DIM)
    await index.upsert(COLLECTION, points(doc, 1, DIM))
    await index.aclose()
    stored = json.loads((tmp_path / "qdrant" / COLLECTION / "edge_config.json").read_text())
    assert str(stored["vectors"][""]["datatype"]).lower() == "float16", stored["vectors"]
    hits = await index.search(COLLECTION, Query(vector=unit(3)), limit=2)
    assert hits[0].id == point_id(doc, 3) and hits[0].score == pytest.approx(1.0, abs=1e-3)
    await index.aclose()


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


# -- points the embedded index wrote in earlier layouts -------------------------------------


def _packed_with_collection(payload: dict[str, Any]) -> dict[str, Any]:
    """The packed layout as written until default's collection field was left out: four
    fields, the whole payload as JSON text in ``ragline_payload``."""
    keep = (DOCUMENT_FIELD, GENERATION_FIELD, COLLECTION_FIELD)
    return {"ragline_payload": json.dumps(payload), **{k: payload[k] for k in keep}}


def _plain_before_collections(payload: dict[str, Any]) -> dict[str, Any]:
    """Before packing and before collections: every field plain, no collection field."""
    return {k: v for k, v in payload.items() if k != COLLECTION_FIELD}


@pytest.mark.parametrize("layout", [_packed_with_collection, _plain_before_collections])
async def test_points_of_earlier_layouts_are_searched_scanned_replaced_and_deleted(
    tmp_path: Path, layout: Callable[[dict[str, Any]], dict[str, Any]]
) -> None:
    root = tmp_path / "qdrant"
    index = EdgeIndex(EdgeIndexConfig(root=root))
    await index.ensure_vector_collection(OLD, DIM)
    await index.aclose()
    doc, gone = uuid.uuid4(), uuid.uuid4()

    def chunks(document: uuid.UUID, generation: int, n: int) -> list[Point]:
        extra = {COLLECTION_FIELD: "default", "text": f"chunk of {generation}", "page_start": 1}
        return [new_point(document, i, generation, vec(i), extra) for i in range(n)]

    old = chunks(doc, 1, 4) + chunks(gone, 1, 2)
    shard = qe.EdgeShard.load(str(root / OLD))  # as an earlier ragline left it on disk
    try:
        stored = [qe.Point(p.id, list(p.vector), layout(p.payload)) for p in old]
        shard.update(qe.UpdateOperation.upsert_points(stored))
        shard.flush()
    finally:
        shard.close()
    try:
        # Search shows what was written (and what the layout kept), in the default tenant.
        expected = {p.id: layout(p.payload) for p in old}
        if layout is _packed_with_collection:
            expected = {p.id: p.payload for p in old}
        hits = await index.search(OLD, Query(vector=vec(0)), 100, tenant="default")
        assert {h.id: h.payload for h in hits} == expected
        assert await index.search(OLD, Query(vector=vec(0)), 100, tenant="alpha") == []
        # verify's view: every point with its document and generation.
        refs = await index.scan(OLD, tenant="default")
        assert sorted((r.document_id, r.generation) for r in refs) == sorted(
            [(str(doc), 1)] * 4 + [(str(gone), 1)] * 2
        )
        # A reprocess writes the new layout and leaves none of the old points behind.
        await index.replace_document(OLD, doc, 2, chunks(doc, 2, 3))
        assert {(r.id, r.generation) for r in await index.scan(OLD, doc)} == {
            (p.id, 2) for p in chunks(doc, 2, 3)
        }
        hits = await index.search(OLD, Query(vector=vec(0)), 100, tenant="default")
        assert {h.payload["document_id"] for h in hits} == {str(doc), str(gone)}
        new = [h for h in hits if h.payload["generation"] == 2]
        assert len(new) == 3 and {h.payload[COLLECTION_FIELD] for h in new} == {"default"}
        # delete and a failed run's clean-up find old points too.
        await index.delete_generation(OLD, gone, 1)
        assert await index.count(OLD, gone) == 0
        await index.delete_document(OLD, doc)
        assert await index.count(OLD) == 0
    finally:
        await index.aclose()
