"""Optional reranking (``RAGLINE_RERANK=cohere``) over real HTTP against the project's
fake Cohere: the hits come back in the reranker's order; when it fails, times out or
its circuit is open, search still answers, in fused order, and says why; once the
circuit is open, no call reaches the provider. Off by default: no call at all."""

from __future__ import annotations

import pytest

from bench.harness.fake_cohere.models import Fault
from stages.actions.rerank import RERANK_CANDIDATES
from stages.actions.search import search
from tests.integration.conftest import OpenPipeline
from tests.support.pipeline_env import TimedCohere, sample

pytestmark = pytest.mark.anyio

SAMPLES = ("sourdough.pdf", "lighthouses.pdf", "rust-borrow-checker.pdf", "tides.md")
QUERY = "the light of the moon and the sea"


def overlap(query: str, text: str) -> float:
    words = set(query.lower().split())
    return len(words & set(text.lower().split())) / len(words)


async def test_hits_come_in_the_rerankers_order(
    cohere_pipeline: OpenPipeline, fake_cohere: TimedCohere
) -> None:
    async with cohere_pipeline(fake_cohere, RAGLINE_RERANK="cohere") as env:
        await env.submit_all(sample(n) for n in SAMPLES)
        await env.run()
        fused = await search(env.pool, env.probe, QUERY, 50, rerank=False)
        found = await search(env.pool, env.probe, QUERY, 5)
        assert found.reranked and found.note is None
        assert fake_cohere.requests_to("rerank") == 1
        # The reranker saw the fused candidates and its order is the answer.
        candidates = fused.hits[:RERANK_CANDIDATES]
        best = sorted(candidates, key=lambda h: -overlap(QUERY, h.text))[:5]
        assert [h.score for h in found.hits] == [round(overlap(QUERY, h.text), 6) for h in best]
        assert {(h.document_id, h.ordinal) for h in found.hits} <= {
            (h.document_id, h.ordinal) for h in candidates
        }


async def test_a_failing_reranker_leaves_the_fused_order_and_says_why(
    cohere_pipeline: OpenPipeline, fake_cohere: TimedCohere
) -> None:
    extra = {"RAGLINE_RERANK": "cohere", "RAGLINE_RERANK_TIMEOUT_S": "1"}
    async with cohere_pipeline(fake_cohere, **extra) as env:
        await env.submit_all(sample(n) for n in SAMPLES)
        await env.run()
        fused = await search(env.pool, env.probe, QUERY, 5, rerank=False)

        fake_cohere.add_faults([Fault(endpoint="rerank", delay_s=3)])
        slow = await search(env.pool, env.probe, QUERY, 5)
        assert not slow.reranked and "timed out" in (slow.note or "")
        assert [h.ordinal for h in slow.hits] == [h.ordinal for h in fused.hits]

        # An outage: each search answers in fused order; after five failures in a row
        # the circuit opens and searches stop calling the provider.
        fake_cohere.add_faults([Fault(endpoint="rerank", status=503)] * 20)
        for _ in range(5):
            down = await search(env.pool, env.probe, QUERY, 5)
            assert not down.reranked and down.hits and down.note
        calls = fake_cohere.requests_to("rerank")
        opened = await search(env.pool, env.probe, QUERY, 5)
        assert fake_cohere.requests_to("rerank") == calls  # the circuit kept it out
        assert "not reranked" in (opened.note or "") and opened.hits
        state = await env.pool.fetchval(
            "SELECT state FROM providers WHERE name = 'cohere/rerank-v3.5'"
        )
        assert state == "open"


async def test_no_reranker_by_default(
    cohere_pipeline: OpenPipeline, fake_cohere: TimedCohere
) -> None:
    async with cohere_pipeline(fake_cohere) as env:
        await env.submit_all([sample("tides.md")])
        await env.run()
        found = await search(env.pool, env.probe, QUERY, 5)
        assert not found.reranked and found.note is None and found.hits
        assert fake_cohere.requests_to("rerank") == 0
