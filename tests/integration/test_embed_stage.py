"""The embed stage against a Cohere-compatible server over real HTTP: provider-sized
batches, the content-addressed cache, rate limits, retries and per-batch checkpoints; and
the local model's vectors written with the job's completion."""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bench.harness.fake_cohere import Fault
from bench.standins import hash_vectors
from runtime.errors import TransientError
from runtime.models import DocumentStatus, JobRow, JobState
from runtime.providers.specs import CircuitConfig
from stages.adapters.embedder.local import LocalEmbedder, LocalEmbedderConfig
from stages.db import checkpoints
from tests.integration.conftest import OpenPipeline
from tests.support.pipeline_env import (
    PipelineEnv,
    TimedCohere,
    long_pdf,
    pipeline_env,
    sample,
    tool_env,
)

pytestmark = pytest.mark.anyio

#: Cohere's maximum number of texts per /v2/embed call.
MAX_BATCH = 96
#: Small chunks, so a PDF of a few dozen pages makes a few hundred of them.
SMALL_CHUNKS = {"RAGLINE_CHUNK_TOKENS": "400", "RAGLINE_CHUNK_OVERLAP_TOKENS": "40"}
#: The same for the local model, in its WordPiece tokens.
LOCAL_CHUNKS = {"RAGLINE_CHUNK_TOKENS": "50", "RAGLINE_CHUNK_OVERLAP_TOKENS": "5"}
LOCAL_BATCH = LocalEmbedderConfig().max_batch
#: Probes every 0.2-0.4 s instead of 5-60 s.
FAST_CIRCUIT = CircuitConfig(failures=3, probe_s=0.2, probe_max_s=0.4)


async def embed_job(env: PipelineEnv, doc_id: uuid.UUID) -> JobRow:
    [job] = await env.stage_jobs(doc_id, "embed")
    return job


async def unique_texts(env: PipelineEnv, doc_id: uuid.UUID) -> int:
    return len({c.sha256 for c in await env.chunks(doc_id)})


async def test_batches_are_at_most_96_and_as_few_as_possible(
    cohere_pipeline: OpenPipeline, tmp_path: Path, fake_cohere: TimedCohere
) -> None:
    pdf = long_pdf(tmp_path / "harbour-log.pdf", 220)
    async with cohere_pipeline(fake_cohere, **SMALL_CHUNKS) as env:
        doc_id = (await env.submit(pdf)).document_id
        await env.run()

        assert (await env.doc(doc_id)).status == DocumentStatus.READY
        unique = await unique_texts(env, doc_id)
        assert unique > 2 * MAX_BATCH, unique  # at least three batches
        stats = fake_cohere.snapshot()
        assert stats.requests["embed"] == math.ceil(unique / MAX_BATCH)
        assert stats.max_batch == MAX_BATCH
        assert stats.texts_embedded == unique
        assert stats.input_types == {"search_document": stats.requests["embed"]}
        assert (await embed_job(env, doc_id)).attempts == 1
        assert await env.assert_indexed(doc_id) == len(await env.chunks(doc_id))


async def test_same_text_again_costs_no_embedding_request(
    cohere_pipeline: OpenPipeline, fake_cohere: TimedCohere
) -> None:
    async with cohere_pipeline(fake_cohere) as env:
        first = (await env.submit(sample("lighthouses.pdf"))).document_id
        await env.run()
        sent = fake_cohere.requests_to("embed")
        assert sent >= 1

        again = await env.submit(sample("lighthouses.pdf"), force=True)
        assert again.created and again.document_id != first
        await env.run()
        assert fake_cohere.requests_to("embed") == sent
        assert (await env.doc(again.document_id)).status == DocumentStatus.READY
        await env.assert_indexed(again.document_id)

        assert await env.docs.reprocess(again.document_id, "index") == 2
        await env.run()
        assert fake_cohere.requests_to("embed") == sent
        assert (await env.doc(again.document_id)).status == DocumentStatus.READY
        await env.assert_indexed(again.document_id)
        await env.assert_indexed(first)


#: Transient faults cost no attempt: they retry for a time budget. (fault, error kind)
TRANSIENT_FAULTS = [
    pytest.param(Fault(status=429, retry_after_s=0.3, endpoint="embed"), "rate_limited", id="429"),
    pytest.param(Fault(status=500, endpoint="embed"), "transient", id="500"),
]


@pytest.mark.parametrize(("fault", "kind"), TRANSIENT_FAULTS)
async def test_a_transient_fault_is_retried_until_ready_without_counting_an_attempt(
    cohere_pipeline: OpenPipeline, fake_cohere: TimedCohere, fault: Fault, kind: str
) -> None:
    fake_cohere.add_faults([fault])
    async with cohere_pipeline(fake_cohere) as env:
        doc_id = (await env.submit(sample("sourdough.pdf"))).document_id
        await env.run()

        assert (await env.doc(doc_id)).status == DocumentStatus.READY
        job = await embed_job(env, doc_id)
        assert (job.state, job.attempts, job.error_kind) == ("succeeded", 1, kind)
        assert fake_cohere.snapshot().statuses == {str(fault.status): 1, "200": 1}
        first, second = fake_cohere.arrivals["embed"]
        # A 429 is retried no sooner than its Retry-After.
        assert second - first >= (fault.retry_after_s or 0.0)
        await env.assert_indexed(doc_id)


async def test_persistent_server_errors_fail_the_document_after_the_retry_budget(
    cohere_pipeline: OpenPipeline, fake_cohere: TimedCohere
) -> None:
    fake_cohere.outage(500)
    async with cohere_pipeline(fake_cohere) as env:
        doc_id = (await env.submit(sample("sourdough.pdf"))).document_id
        await env.run(retry_for_s=1.0, circuit=FAST_CIRCUIT)

        doc = await env.doc(doc_id)
        assert doc.status == DocumentStatus.FAILED
        assert doc.error is not None and doc.error.startswith("embed: cohere embed: HTTP 500")
        assert "(still failing after " in doc.error and "\n" not in doc.error
        job = await embed_job(env, doc_id)
        # Retried past max_attempts (3) without spending attempts: time was the budget.
        assert (job.state, job.attempts) == (JobState.FAILED, 1)
        assert fake_cohere.requests_to("embed") > 3
        assert await env.stage_jobs(doc_id, "index") == []


async def test_bad_request_fails_at_once(
    cohere_pipeline: OpenPipeline, fake_cohere: TimedCohere
) -> None:
    fake_cohere.add_faults([Fault(status=400, endpoint="embed", message="invalid input_type")])
    async with cohere_pipeline(fake_cohere) as env:
        doc_id = (await env.submit(sample("sourdough.pdf"))).document_id
        await env.run()

        doc = await env.doc(doc_id)
        assert doc.status == DocumentStatus.FAILED
        assert doc.error == "embed: cohere embed: HTTP 400: invalid input_type"
        job = await embed_job(env, doc_id)
        assert (job.state, job.attempts, job.error_kind) == ("failed", 1, "permanent")
        assert fake_cohere.requests_to("embed") == 1


async def test_each_batch_is_checkpointed_and_a_retry_sends_only_the_rest(
    cohere_pipeline: OpenPipeline, tmp_path: Path, fake_cohere: TimedCohere
) -> None:
    pdf = long_pdf(tmp_path / "harbour-log.pdf", 220)
    # The first request passes (an empty fault), the second gets a 500.
    fake_cohere.add_faults([Fault(endpoint="embed"), Fault(status=500, endpoint="embed")])
    async with cohere_pipeline(fake_cohere, **SMALL_CHUNKS) as env:
        model = env.probe.embedder.model
        # One attempt per job: the attempt checkpointed a batch, so its failure is not
        # counted and the retry still runs.
        doc_id = (await env.submit(pdf, max_attempts=1)).document_id
        await env.run()

        assert (await env.doc(doc_id)).status == DocumentStatus.READY
        unique = await unique_texts(env, doc_id)
        batches = math.ceil(unique / MAX_BATCH)
        assert batches >= 3
        # 1 good + 1 failed; the retry sends only the batches after the first.
        assert fake_cohere.requests_to("embed") == 2 + batches - 1
        assert fake_cohere.snapshot().texts_embedded == unique
        assert await env.embeddings(model) == unique
        job = await embed_job(env, doc_id)
        assert (job.state, job.attempts, job.error_kind) == ("succeeded", 1, "transient")
        await env.assert_indexed(doc_id)


class CountingLocal:
    """The local model's ``embed`` replaced by hash vectors (fast), counting texts and
    calls, and raising a transient error at call ``fail_at`` (1-based) once."""

    def __init__(self, fail_at: int | None = None) -> None:
        self.calls = 0
        self.texts = 0
        self.fail_at = fail_at
        self.inserts: list[int] = []

    async def embed(self, _self: object, texts: list[str], input_type: str) -> list[list[float]]:
        self.calls += 1
        if self.calls == self.fail_at:
            raise TransientError("local model: out of memory (injected)")
        self.texts += len(texts)
        return hash_vectors(texts, LocalEmbedder.dimensions)


@pytest.fixture
def counting_local(monkeypatch: pytest.MonkeyPatch) -> Callable[..., CountingLocal]:
    def install(fail_at: int | None = None) -> CountingLocal:
        counting = CountingLocal(fail_at)

        async def embed(self: object, texts: list[str], input_type: str) -> list[list[float]]:
            return await counting.embed(self, texts, input_type)

        original = checkpoints.insert_embeddings

        async def insert(conn: Any, model: str, items: Any) -> None:
            counting.inserts.append(len(items))
            await original(conn, model, items)

        monkeypatch.setattr(LocalEmbedder, "embed", embed)
        monkeypatch.setattr(checkpoints, "insert_embeddings", insert)
        return counting

    return install


async def test_a_fast_local_model_writes_a_document_in_one_transaction(
    dsn: str, tmp_path: Path, counting_local: Callable[..., CountingLocal]
) -> None:
    """Unmetered and fast: every batch's vectors are written with the job's completion."""
    counting = counting_local()
    pdf = long_pdf(tmp_path / "harbour-log.pdf", 220)
    async with pipeline_env(dsn, tmp_path / "d", **tool_env(**LOCAL_CHUNKS)) as env:
        doc_id = (await env.submit(pdf)).document_id
        await env.run()
        assert (await env.doc(doc_id)).status == DocumentStatus.READY
        unique = await unique_texts(env, doc_id)
        assert counting.calls == math.ceil(unique / LOCAL_BATCH) >= 3
        assert counting.inserts == [unique]
        assert await env.embeddings(LocalEmbedder.model) == unique
        await env.assert_indexed(doc_id)


async def test_a_failed_local_call_keeps_the_batches_before_it(
    dsn: str, tmp_path: Path, counting_local: Callable[..., CountingLocal]
) -> None:
    """The vectors held back are checkpointed when a call fails: the retry embeds only
    the rest, and the failure costs no attempt (it checkpointed progress)."""
    counting = counting_local(fail_at=3)
    pdf = long_pdf(tmp_path / "harbour-log.pdf", 220)
    async with pipeline_env(dsn, tmp_path / "d", **tool_env(**LOCAL_CHUNKS)) as env:
        doc_id = (await env.submit(pdf, max_attempts=1)).document_id
        await env.run()
        assert (await env.doc(doc_id)).status == DocumentStatus.READY
        unique = await unique_texts(env, doc_id)
        assert counting.texts == unique  # nothing embedded twice
        first_two = 2 * LOCAL_BATCH
        assert counting.inserts == [first_two, unique - first_two]
        job = await embed_job(env, doc_id)
        assert (job.state, job.attempts, job.error_kind) == ("succeeded", 1, "transient")
        await env.assert_indexed(doc_id)
