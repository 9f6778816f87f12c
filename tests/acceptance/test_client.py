"""The Python client (:mod:`stages.client`) against a live ``ragline serve``: a subprocess
on a real database, a worker process running the whole pipeline with the embedder at a
local Cohere-compatible server, and (where a test needs the network to misbehave) a proxy
between client and server that answers 503/429, cuts an upload or drops an answer
(:mod:`tests.support.fault_proxy`)."""

from __future__ import annotations

import contextlib
import itertools
import threading
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import httpx
import pytest

from bench.harness.cli import Cli, Running
from bench.harness.db import Databases, sql
from bench.harness.fake_cohere import FakeCohere
from bench.harness.procs import wait_for
from bench.harness.serve import Server, free_port, running_server, wait_ready
from stages.client import (
    AsyncClient,
    AsyncEventStream,
    BadRequest,
    Client,
    Conflict,
    ConnectionFailed,
    DocumentDeleted,
    DocumentFailed,
    IdempotencyKeyReused,
    NotFound,
    RateLimited,
    RetryPolicy,
    TooLarge,
    Unauthorized,
    Unavailable,
    UnsupportedType,
)
from stages.ports.http import DocumentDetail, DocumentEvent
from tests.support.fault_proxy import FaultProxy
from tests.support.pdfs import write_truncated_pdf
from tests.support.pipeline_env import FAKE_DIMS, cohere_env
from tests.support.waits import wait_until

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
#: The worker's provider knobs: an outage is noticed and its end found within seconds.
FAST_PROVIDERS = {
    "RAGLINE_PROBE_S": "0.5",
    "RAGLINE_PROBE_MAX_S": "1",
    "RAGLINE_RETRY_BASE_S": "0.2",
    "RAGLINE_POLL_S": "0.2",
}
UPLOAD_KEY_SQL = "SELECT document_id FROM upload_keys WHERE key = $1"
#: Seconds a document may take through the pipeline on a busy two-core machine.
READY_S = 90


@pytest.fixture(scope="module")
def cohere() -> Iterator[FakeCohere]:
    with FakeCohere(dims=FAKE_DIMS) as server:
        yield server


@pytest.fixture(scope="module")
def cli(
    databases: Databases, tmp_path_factory: pytest.TempPathFactory, cohere: FakeCohere
) -> Iterator[Cli]:
    tmp = tmp_path_factory.mktemp("client")
    with databases.fresh() as dsn:
        yield Cli(dsn, tmp / "data", tmp / "logs", **cohere_env(cohere, **FAST_PROVIDERS))


@pytest.fixture(scope="module")
def server(cli: Cli) -> Iterator[Server]:
    with running_server(cli, "--max-upload-mb", "1", "--sse-heartbeat", "1") as s:
        yield s


@pytest.fixture(scope="module")
def worker(cli: Cli, server: Server) -> Iterator[Running]:
    """One worker process for every stage, for the whole module."""
    proc = cli.start(log_level="info")
    try:
        yield proc
    finally:
        proc.kill()


@pytest.fixture
def client(server: Server, worker: Running) -> Iterator[Client]:
    with Client(server.url) as c:
        yield c


def note(tmp_path: Path, name: str, words: str, size: int = 0) -> Path:
    """A Markdown file of its own (unique bytes: a new document), padded to ``size``."""
    text = f"# {name}\n\n{words} {uuid.uuid4()}\n\n"
    filler = "The keeper trimmed the wick and logged the tide at the harbour mouth.\n\n"
    while len(text) < size:
        text += filler
    path = tmp_path / f"{name}.md"
    path.write_text(text)
    return path


def count_documents(cli: Cli, sha256: str) -> int:
    return int(sql(cli.dsn, "SELECT count(*) FROM documents WHERE sha256 = $1", sha256)[0][0])


def upload_key_names(cli: Cli, key: str | None) -> list[uuid.UUID]:
    """The document the server stored under an Idempotency-Key."""
    return [r[0] for r in sql(cli.dsn, UPLOAD_KEY_SQL, key)]


def no_keepalive(url: str) -> httpx.Client:
    """A connection per request: what :class:`FaultProxy` understands."""
    return httpx.Client(base_url=url, timeout=30, limits=httpx.Limits(max_keepalive_connections=0))


# -- the whole round: upload, wait, search, list, reprocess, retry, delete --------------------


def test_upload_wait_search_list_reprocess_delete(client: Client, tmp_path: Path) -> None:
    path = note(tmp_path, "lantern-log", "The lantern room lens was polished every dawn.")
    accepted = client.upload(path, meta={"team": "lights"}, readers="*")
    assert accepted.created and accepted.status_url == f"/v1/documents/{accepted.id}"
    again = client.upload(path)  # the same bytes: that document, unchanged
    assert again.id == accepted.id and not again.created

    ready = client.wait(accepted, timeout_s=READY_S)
    assert isinstance(ready, DocumentDetail) and ready.status == "ready"
    assert ready.filename == "lantern-log.md" and ready.counts.chunks >= 1
    assert [j.stage for j in ready.jobs][:1] == ["parse"]

    hits = client.search("lantern room lens", k=3, documents=[accepted.id], meta={"team": "lights"})
    assert hits and {h.document_id for h in hits} == {accepted.id}
    hit = hits[0]
    assert hit.filename == "lantern-log.md" and "lantern room lens" in hit.text
    assert hit.page_start >= 1 and hit.metadata == {"team": "lights"}
    assert hit.chunk_id == f"{accepted.id}:{hit.ordinal}"
    assert client.search("lantern room lens", meta={"team": "nobody"}) == []

    listed = client.list_documents(status="ready", limit=1)
    assert len(listed.documents) == 1
    assert accepted.id in {d.id for d in client.documents(page_size=1)}
    assert {s.stage for s in client.stages()} >= {"parse", "chunk", "embed", "index"}

    with pytest.raises(Conflict, match="no failed job"):
        client.retry(accepted)
    redo = client.reprocess("chunk", ids=[accepted.id, uuid.uuid4()])
    assert [r.document_id for r in redo.reprocessing] == [accepted.id] and len(redo.missing) == 1
    assert client.wait(accepted.id, timeout_s=READY_S).generation == ready.generation + 1

    client.delete(accepted)
    with pytest.raises(NotFound):
        client.get(accepted)
    with pytest.raises(NotFound):
        client.delete(accepted)


def test_a_failed_document_raises_then_retry_requeues_it(client: Client, tmp_path: Path) -> None:
    broken = write_truncated_pdf(tmp_path / "broken.pdf")
    doc = client.upload(broken)
    with pytest.raises(DocumentFailed, match="failed: parse:") as failed:
        client.wait(doc, timeout_s=READY_S)
    assert failed.value.document.status == "failed"
    assert client.wait(doc, timeout_s=READY_S, raise_on_failure=False).status == "failed"
    [requeued] = client.retry(doc)
    assert requeued.document_id == doc.id and requeued.stage == "parse"
    client.delete(doc)


def test_one_exception_per_problem_kind(client: Client, tmp_path: Path) -> None:
    with pytest.raises(NotFound, match="no document"):
        client.get(uuid.uuid4())
    with pytest.raises(BadRequest, match="mode must be one of"):
        client.search("lens", mode="sideways")
    with pytest.raises(BadRequest, match="pages"):
        client.search("lens", pages="nine")
    with pytest.raises(BadRequest, match="empty body"):
        client.upload(b"", filename="empty.md")
    with pytest.raises(UnsupportedType) as unsupported:
        client.upload(b"\x00\x01\x02\x03" * 64, filename="blob.bin")
    assert unsupported.value.problem is not None and unsupported.value.status == 415
    with pytest.raises(TooLarge, match="larger than 1 MB"):
        client.upload(b"x" * (1 << 20) + b"x", filename="big.txt")
    key = f"reused-{uuid.uuid4()}"
    client.upload(note(tmp_path, "first", "one"), idempotency_key=key)
    with pytest.raises(IdempotencyKeyReused, match="other bytes"):
        client.upload(note(tmp_path, "second", "two"), idempotency_key=key)
    with pytest.raises(BadRequest, match="not a document id"):
        client.get("nope")


def test_bearer_token(cli: Cli, worker: Running) -> None:
    with running_server(cli, RAGLINE_API_TOKENS="s3cret") as guarded:
        with Client(guarded.url, token="s3cret") as good:
            assert good.list_documents(limit=1).documents is not None
        with Client(guarded.url, token="wrong") as bad, pytest.raises(Unauthorized):
            bad.list_documents()
        with Client(guarded.url) as none, pytest.raises(Unauthorized):
            none.wait(uuid.uuid4(), timeout_s=5)


# -- the network misbehaves -------------------------------------------------------------------


def test_upload_cut_midway_is_sent_again_under_the_same_key(
    cli: Cli, server: Server, client: Client, tmp_path: Path
) -> None:
    """The connection breaks in the middle of the body: the client sends it again under
    the same Idempotency-Key; one document."""
    path = note(tmp_path, "cut-midway", "The fog bell rang twice.", size=40_000)
    with FaultProxy(_target(server)) as proxy:
        proxy.cut_request(10_000, prefix="POST /v1/documents")
        with Client(http=no_keepalive(proxy.url)) as proxied:
            accepted = proxied.upload(path)
        keys = proxy.header("POST /v1/documents", "Idempotency-Key")
    assert len(keys) == 2 and keys[0] and keys[0] == keys[1], keys
    assert accepted.created
    detail = client.get(accepted)
    assert count_documents(cli, detail.sha256) == 1


def test_upload_whose_answer_was_lost_is_one_document(
    cli: Cli, server: Server, client: Client, tmp_path: Path
) -> None:
    """The server stored the upload but the answer never arrived: the caller tries again
    with the same key and gets the same document (created: false), not a second one."""
    path = note(tmp_path, "lost-answer", "The keeper wrote by candlelight.")
    key = f"lost-{uuid.uuid4()}"
    once = RetryPolicy(retries=0)
    with FaultProxy(_target(server)) as proxy:
        proxy.drop_response(prefix="POST /v1/documents")
        with Client(http=no_keepalive(proxy.url), retry=once) as proxied:
            with pytest.raises(ConnectionFailed):
                proxied.upload(path, idempotency_key=key)
            again = proxied.upload(path, idempotency_key=key)
    assert not again.created
    assert upload_key_names(cli, key) == [again.id]
    detail = client.get(again)
    assert count_documents(cli, detail.sha256) == 1
    # And the client does the same by itself when it may retry.
    other = note(tmp_path, "lost-answer-2", "The keeper slept at noon.")
    with FaultProxy(_target(server)) as proxy:
        proxy.drop_response(prefix="POST /v1/documents")
        with Client(http=no_keepalive(proxy.url)) as proxied:
            by_itself = proxied.upload(other)
        keys = proxy.header("POST /v1/documents", "Idempotency-Key")
    assert len(keys) == 2 and keys[0] and keys[0] == keys[1], keys
    assert upload_key_names(cli, keys[0]) == [by_itself.id]
    assert not by_itself.created
    assert count_documents(cli, client.get(by_itself).sha256) == 1


def test_429_and_503_are_asked_again_after_retry_after(server: Server, worker: Running) -> None:
    with FaultProxy(_target(server)) as proxy:
        proxy.answer(503, prefix="GET /v1/stages", retry_after="1")
        proxy.answer(429, prefix="GET /v1/stages", retry_after="1")
        with Client(http=no_keepalive(proxy.url)) as client:
            stages = client.stages()
        arrivals = [t for t, line in proxy.seen if line.startswith("GET /v1/stages")]
    assert stages and len(arrivals) == 3
    # Each retry waited at least what Retry-After said (a lower bound: never flaky).
    assert all(b - a >= 0.95 for a, b in itertools.pairwise(arrivals)), arrivals


def test_retries_end_in_the_problem_kind(server: Server, worker: Running) -> None:
    with FaultProxy(_target(server)) as proxy:
        proxy.answer(503, prefix="GET /v1/stages", retry_after="0", times=10)
        policy = RetryPolicy(retries=2, backoff_s=0.01)
        with Client(http=no_keepalive(proxy.url), retry=policy) as client:
            with pytest.raises(Unavailable, match="proxy says later"):
                client.stages()
            assert len(proxy.lines("GET /v1/stages")) == 3
            # A Retry-After longer than the client will wait: raised at once.
            proxy.answer(429, prefix="GET /v1/documents", retry_after="3600")
            with pytest.raises(RateLimited):
                client.list_documents()
            assert len(proxy.lines("GET /v1/documents")) == 1


def test_unreachable_server_is_one_error() -> None:
    policy = RetryPolicy(retries=1, backoff_s=0.01)
    nobody = f"http://127.0.0.1:{free_port()}"  # bound once, then freed: nothing listens
    with Client(nobody, retry=policy) as client, pytest.raises(ConnectionFailed, match="reach"):
        client.list_documents()


# -- waiting ----------------------------------------------------------------------------------


def test_wait_rides_out_a_provider_outage(
    client: Client, cohere: FakeCohere, tmp_path: Path
) -> None:
    """The embedder answers 503 to everything: the document waits at embed (the server
    says why), ``wait`` keeps waiting; the outage ends and ``wait`` returns it ready."""
    cohere.outage(503)
    try:
        doc = client.upload(note(tmp_path, "outage", "The relief keeper rowed out at dawn."))
        result: list[DocumentDetail | BaseException] = []
        waiter = threading.Thread(target=_wait_into, args=(client, doc.id, result))
        waiter.start()
        wait_for(lambda: len(cohere.outage_calls) >= 3, READY_S, "the outage to be hit")

        def provider_down() -> bool:
            return "503" in (client.get(doc).waiting or "")

        wait_for(provider_down, READY_S, "the server to say the provider is down")
        waiting = client.get(doc)
        assert waiting.status == "processing" and waiter.is_alive(), (waiting, result)
        assert waiting.stage == "embed" and "503" in (waiting.waiting or ""), waiting
    finally:
        cohere.outage(None)
    waiter.join(READY_S)
    assert not waiter.is_alive()
    [ready] = result
    assert isinstance(ready, DocumentDetail) and ready.status == "ready", ready


def test_wait_listens_rather_than_polls(server: Server, worker: Running, tmp_path: Path) -> None:
    """Over the event stream, ``wait`` reads the document once, then again only when an
    event of it may end the wait; polling at ``poll_s`` would read it many times."""
    with FaultProxy(_target(server)) as proxy:
        with Client(http=no_keepalive(proxy.url)) as client:
            doc = client.upload(note(tmp_path, "listened", "The keeper heard the horn."))
            ready = client.wait(doc, timeout_s=READY_S, poll_s=0.05)
        reads = proxy.lines(f"GET /v1/documents/{doc.id}")
        streams = proxy.lines("GET /v1/events")
    assert ready.status == "ready" and streams
    assert len(reads) <= 2 + len(streams), reads


def test_wait_falls_back_to_polling_without_the_event_stream(
    server: Server, worker: Running, tmp_path: Path
) -> None:
    with FaultProxy(_target(server)) as proxy:
        proxy.answer(404, prefix="GET /v1/events", times=1000)
        with Client(http=no_keepalive(proxy.url)) as client:
            doc = client.upload(note(tmp_path, "polled", "The tender brought oil."))
            ready = client.wait(doc, timeout_s=READY_S, poll_s=0.2)
        assert ready.status == "ready"
        assert len(proxy.lines("GET /v1/documents/")) >= 1
        assert len(proxy.lines("GET /v1/events")) == 1  # tried once, then polled


def test_wait_raises_when_the_document_is_deleted(client: Client, tmp_path: Path) -> None:
    doc = client.upload(note(tmp_path, "deleted-while-waiting", "Gone before the tide."))
    result: list[DocumentDetail | BaseException] = []
    # Deleted before it is ready (the wait sees either the event or a 404 at its read).
    client.delete(doc)
    _wait_into(client, doc.id, result)
    assert isinstance(result[0], NotFound | DocumentDeleted), result


# -- events -----------------------------------------------------------------------------------


def test_events_resume_after_the_server_restarts(cli: Cli, worker: Running, tmp_path: Path) -> None:
    """The stream drops when serve is killed; documents change meanwhile (one submitted
    by the CLI while serve is down); serve starts again on the same port and the iterator
    reconnects with Last-Event-ID: every event in the table since the first, in order,
    none twice."""
    port = free_port()
    seen: list[DocumentEvent] = []
    servers = [_start_serve(cli, port)]
    client = Client(f"http://127.0.0.1:{port}")
    stream = client.events(reconnect_timeout_s=30)
    reader = threading.Thread(target=_collect, args=(stream, seen), daemon=True)
    try:
        reader.start()
        wait_for(lambda: stream.connections >= 1, 30, "the stream to open")
        doc = client.upload(note(tmp_path, "before-restart", "The lamp was lit at six."))
        wait_for(lambda: any(e.document_id == doc.id for e in seen), 30, "a first event")
        servers[0].kill()
        down = cli.run("submit", str(note(tmp_path, "while-down", "The storm came at nine.")))
        assert down.code == 0, down
        rows = sql(cli.dsn, "SELECT id FROM documents WHERE filename = 'while-down.md'")
        missed = rows[0]["id"]
        servers.append(_start_serve(cli, port))
        wait_for(
            lambda: any(e.document_id == missed and e.status == "ready" for e in seen),
            READY_S,
            "the events of the document submitted while serve was down",
        )
    finally:
        for proc in servers:
            proc.kill()
        client.close()
    ids = [e.id for e in seen]
    assert ids == sorted(set(ids)), "events out of order or twice"
    stored = [r["id"] for r in sql(cli.dsn, "SELECT id FROM document_events ORDER BY id")]
    assert ids == [i for i in stored if ids[0] <= i <= ids[-1]], "an event was lost"
    assert stream.connections >= 2


@pytest.mark.anyio
async def test_async_client_round(server: Server, worker: Running, tmp_path: Path) -> None:
    path = note(tmp_path, "async-log", "The async keeper counted the gulls.")
    got: list[DocumentEvent] = []
    async with AsyncClient(server.url) as client, anyio.create_task_group() as tg:
        events = client.events()
        tg.start_soon(_follow, events, got)

        def mine(events: list[DocumentEvent]) -> list[DocumentEvent]:
            return [e for e in events if e.document_id == accepted.id]

        await wait_until(_true(lambda: events.connections >= 1), what="the stream to open")
        accepted = await client.upload(path, collection="asyncdocs")
        ready = await client.wait(accepted, timeout_s=READY_S)
        assert ready.status == "ready"
        ready_event = _true(lambda: any(e.id and e.status == "ready" for e in mine(got)))
        await wait_until(ready_event, what="its ready event")
        tg.cancel_scope.cancel()
        hits = await client.search("gulls", collection="asyncdocs", k=2)
        assert hits and hits[0].document_id == accepted.id
        assert (await client.list_documents(limit=1)).documents
        await client.delete(accepted)
        with pytest.raises(NotFound):
            await client.get(accepted)
    statuses = [e.status for e in got if e.document_id == accepted.id]
    assert statuses[0] == "pending" and statuses[-1] == "ready", statuses


@pytest.mark.anyio
async def test_async_client_resends_a_cut_upload_and_waits_out_a_503(
    cli: Cli, server: Server, client: Client, tmp_path: Path
) -> None:
    path = note(tmp_path, "async-cut", "The async tender was late.", size=40_000)
    with FaultProxy(_target(server)) as proxy:
        proxy.cut_request(10_000, prefix="POST /v1/documents")
        proxy.answer(503, prefix="GET /v1/documents/", retry_after="1")
        http = httpx.AsyncClient(
            base_url=proxy.url, timeout=30, limits=httpx.Limits(max_keepalive_connections=0)
        )
        async with AsyncClient(http=http) as proxied:
            accepted = await proxied.upload(path)
            detail = await proxied.get(accepted)
        keys = proxy.header("POST /v1/documents", "Idempotency-Key")
        gets = [t for t, line in proxy.seen if line.startswith("GET /v1/documents/")]
    assert len(keys) == 2 and keys[0] and keys[0] == keys[1], keys
    assert accepted.created and detail.id == accepted.id
    assert await anyio.to_thread.run_sync(count_documents, cli, detail.sha256) == 1
    assert len(gets) == 2 and gets[1] - gets[0] >= 0.95, gets


def _true(check: Callable[[], bool]) -> Callable[[], Awaitable[bool]]:
    async def checked() -> bool:
        return check()

    return checked


async def _follow(events: AsyncEventStream, got: list[DocumentEvent]) -> None:
    async with events:
        async for event in events:
            got.append(event)


# -- helpers ----------------------------------------------------------------------------------


def _target(server: Server) -> tuple[str, int]:
    host, port = server.url.removeprefix("http://").split(":")
    return host, int(port)


def _wait_into(client: Client, doc_id: uuid.UUID, out: list[Any]) -> None:
    try:
        out.append(client.wait(doc_id, timeout_s=READY_S * 2))
    except BaseException as exc:  # handed to the test thread to assert on
        out.append(exc)


def _collect(stream: Any, seen: list[DocumentEvent]) -> None:
    """Events into ``seen`` until the stream gives up (the test has ended by then)."""
    with contextlib.suppress(Exception):
        for event in stream:
            seen.append(event)


def _start_serve(cli: Cli, port: int) -> Running:
    proc = cli.start("serve", "--port", str(port), "--sse-heartbeat", "1", log_level="info")
    wait_ready(f"http://127.0.0.1:{port}", proc)
    return proc
