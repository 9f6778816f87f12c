"""The real pipeline against a Cohere-compatible server over real HTTP while the provider
misbehaves: a full outage mid-run, a flaky API (500s and 429s), gateways that answer only
``float`` embeddings or refuse ``base64``. Nobody runs ``retry``; nothing is failed."""

from __future__ import annotations

import logging
import math
import uuid
from pathlib import Path

import anyio
import pytest

from bench.harness.fake_cohere import FaultRates
from runtime.cli.commands import timeline
from runtime.models import DocumentStatus, JobState
from runtime.providers.specs import CircuitConfig, provider_states
from tests.integration.conftest import OpenPipeline
from tests.support.pipeline_env import SAMPLES, PipelineEnv, TimedCohere, long_pdf, sample

pytestmark = pytest.mark.anyio

EMBED = "cohere/embed-v4.0"
#: Test-length probe intervals (the defaults are 5 s doubling to 60 s); the rest of the
#: worker's retry settings are the defaults (retry_base_s 2, RAGLINE_RETRY_FOR 24 h).
PROBE_S = 0.3
CIRCUIT = CircuitConfig(probe_s=PROBE_S, probe_max_s=2 * PROBE_S)
SMALL_CHUNKS = {"RAGLINE_CHUNK_TOKENS": "100", "RAGLINE_CHUNK_OVERLAP_TOKENS": "10"}


async def assert_all_ready_no_attempt_spent(env: PipelineEnv, ids: list[uuid.UUID]) -> None:
    docs = await env.docs.get_many(ids)
    assert {d.filename: d.status for d in docs} == {d.filename: DocumentStatus.READY for d in docs}
    for doc_id in ids:
        jobs = await env.stage_jobs(doc_id)
        assert all(j.state == JobState.SUCCEEDED for j in jobs), jobs
        # Transient faults retried for time, never for attempts: each stage ran as its
        # first attempt, however often the provider failed it.
        assert all(j.attempts == 1 for j in jobs), [(j.stage, j.attempts) for j in jobs]
        await env.assert_indexed(doc_id)


async def open_circuit(env: PipelineEnv) -> bool:
    return any(p.name == EMBED and p.state != "closed" for p in await provider_states(env.pool))


async def test_a_full_outage_mid_run_ends_with_every_document_ready(
    cohere_pipeline: OpenPipeline, tmp_path: Path
) -> None:
    outage_s = 3.0
    with TimedCohere(dims=64) as fake:
        async with cohere_pipeline(fake, **SMALL_CHUNKS) as env:
            pdfs = [long_pdf(tmp_path / f"log-{i}.pdf", 120, seed=f"/{i}") for i in range(4)]
            ids = await env.submit_all(pdfs)
            await env.run(("parse", "chunk", "vision"))
            async with anyio.create_task_group() as tg:
                tg.start_soon(
                    lambda: env.run(("embed", "index"), retry_base_s=2.0, circuit=CIRCUIT)
                )
                with anyio.fail_after(30):
                    while fake.requests_to("embed") < 2:  # noqa: ASYNC110 - mid-run
                        await anyio.sleep(0.01)
                fake.outage(503)
                with anyio.fail_after(30):
                    while not await open_circuit(env):  # noqa: ASYNC110 - a database read
                        await anyio.sleep(0.05)
                # What `status DOC` says while the provider is down.
                waiting = [(await timeline(env.pool, d)) for d in ids]
                lines = [t.waiting for t in waiting if t is not None and t.waiting]
                assert any(
                    line.startswith(f"embed: provider {EMBED} unavailable since ")
                    and "(HTTP 503), next try " in line
                    for line in lines
                ), lines
                await anyio.sleep(outage_s)
                fake.outage(None)
            calls = list(fake.outage_calls)
            await assert_all_ready_no_attempt_spent(env, ids)
    # Before the circuit opened: at most its threshold plus the calls already in flight
    # (embed concurrency 2); after: at most one probe per probe interval.
    opened_after = CIRCUIT.failures + 2
    probes = calls[opened_after:]
    assert len(calls) >= CIRCUIT.failures
    span = calls[-1] - calls[0] if calls else 0.0
    assert len(probes) <= math.ceil(span / PROBE_S) + 1, (len(calls), span)


async def test_a_flaky_provider_fails_no_good_document(cohere_pipeline: OpenPipeline) -> None:
    rates = FaultRates(error_500=0.2, rate_429=0.1, retry_after_s=0.2, seed=7)
    vision = {"RAGLINE_VISION": "cohere", "RAGLINE_VISION_MODEL": "command-a-vision-07-2025"}
    with TimedCohere(dims=64, rates=rates) as fake:
        async with cohere_pipeline(fake, **vision) as env:
            ids = await env.submit_all(sample(name) for name in SAMPLES)
            await env.run(retry_base_s=0.2, circuit=CIRCUIT, timeout_s=120)
            await assert_all_ready_no_attempt_spent(env, ids)
        stats = fake.snapshot()
    assert stats.statuses.get("500", 0) > 0 and stats.statuses.get("429", 0) > 0
    assert stats.images_described > 0


async def test_a_gateway_answering_only_float_embeddings_is_used(
    cohere_pipeline: OpenPipeline,
) -> None:
    with TimedCohere(dims=64, float_only=True) as fake:
        async with cohere_pipeline(fake) as env:
            ids = await env.submit_all([sample("sourdough.pdf")])
            await env.run()
            await assert_all_ready_no_attempt_spent(env, ids)
        assert fake.snapshot().statuses == {"200": 1}


async def test_a_400_rejecting_base64_switches_the_process_to_float_once(
    cohere_pipeline: OpenPipeline, caplog: pytest.LogCaptureFixture
) -> None:
    with TimedCohere(dims=64, reject_base64=True) as fake:
        async with cohere_pipeline(fake) as env:
            ids = await env.submit_all(sample(name) for name in SAMPLES)
            with caplog.at_level(logging.WARNING, logger="stages.adapters.embedder.cohere"):
                await env.run()
            await assert_all_ready_no_attempt_spent(env, ids)
        # One refused request in the whole run, then float for every document.
        assert fake.snapshot().statuses == {"400": 1, "200": len(SAMPLES)}
    switched = [r for r in caplog.records if "rejects base64" in r.getMessage()]
    assert len(switched) == 1
