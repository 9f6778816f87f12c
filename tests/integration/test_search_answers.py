"""Search answers are PostgreSQL's truth: the current name at once after a rename, only
documents that have not failed, never a point of a deleted document or of a superseded
version (counted as stale); keyword, dense and hybrid modes over the real pipeline, the
embedded index and a local Cohere-compatible embedder."""

from __future__ import annotations

import pytest

from stages.actions.search import search
from stages.ports.vector_index import new_point
from stages.text.keywords import STORED_FORMAT, stored_vector
from tests.integration.conftest import OpenPipeline
from tests.support.pipeline_env import TimedCohere, sample

pytestmark = pytest.mark.anyio

IDENTIFIER = "borrow checker"  # in rust-borrow-checker.pdf


async def test_answers_follow_postgresql(
    cohere_pipeline: OpenPipeline, fake_cohere: TimedCohere
) -> None:
    async with cohere_pipeline(fake_cohere) as env:
        ids = await env.submit_all(sample(n) for n in ("sourdough.pdf", "lighthouses.pdf"))
        await env.run()
        sourdough, lighthouses = ids
        svc = env.probe

        found = await search(env.pool, svc, "sourdough starter", 50, mode="keyword")
        assert found.hits and {h.document_id for h in found.hits} == {sourdough}
        assert found.stale == 0 and all(h.filename == "sourdough.pdf" for h in found.hits)

        # A rename shows at once, with no index job.
        await env.pool.execute(
            "UPDATE documents SET filename = 'bread.pdf' WHERE id = $1", sourdough
        )
        renamed = await search(env.pool, svc, "sourdough starter", 50, mode="keyword")
        assert {h.filename for h in renamed.hits} == {"bread.pdf"}

        # A point of another generation (a superseded version left in the index) never
        # answers; it is counted.
        vector = (await svc.embedder.embed(["sourdough starter"], "search_query"))[0]
        stray = new_point(
            sourdough, 999, 7, vector, {"ordinal": 999, "text": "sourdough starter stale"}
        )
        await svc.index.upsert(env.probe.vector_collection, [stray])
        dense = await search(env.pool, svc, "sourdough starter", 5, mode="dense")
        assert all(h.ordinal != 999 for h in dense.hits) and dense.stale >= 1

        # A failed document answers nothing; a deleted one neither, its points counted.
        await env.pool.execute("UPDATE documents SET status = 'failed' WHERE id = $1", sourdough)
        failed = await search(env.pool, svc, "sourdough starter", 50, mode="hybrid")
        assert sourdough not in {h.document_id for h in failed.hits}
        await env.pool.execute("DELETE FROM documents WHERE id = $1", lighthouses)
        gone = await search(env.pool, svc, "lighthouse lens", 50, mode="hybrid")
        assert lighthouses not in {h.document_id for h in gone.hits} and gone.stale > 0


async def test_every_mode_finds_an_identifier_and_hybrid_is_the_default(
    cohere_pipeline: OpenPipeline, fake_cohere: TimedCohere
) -> None:
    async with cohere_pipeline(fake_cohere) as env:
        [rust] = await env.submit_all([sample("rust-borrow-checker.pdf")])
        await env.submit_all(sample(n) for n in ("sourdough.pdf", "tides.md"))
        await env.run()
        text = await env.pool.fetchval(
            "SELECT text FROM chunks WHERE document_id = $1 ORDER BY ordinal LIMIT 1", rust
        )
        assert IDENTIFIER in text.lower()
        keyword = await search(env.pool, env.probe, IDENTIFIER, 3, mode="keyword")
        assert keyword.mode == "keyword" and keyword.hits[0].document_id == rust
        hybrid = await search(env.pool, env.probe, IDENTIFIER, 3)
        assert hybrid.mode == "hybrid" and hybrid.hits[0].document_id == rust
        dense = await search(env.pool, env.probe, text, 3, mode="dense")
        assert dense.hits[0].document_id == rust and dense.hits[0].text == text
        # Tenants: the collection filter holds in every mode.
        assert (await search(env.pool, env.probe, IDENTIFIER, 3, collection="x")).hits == []


async def test_keyword_vectors_are_stored_when_cut_and_indexed_as_stored(
    cohere_pipeline: OpenPipeline, fake_cohere: TimedCohere
) -> None:
    """The chunk stage stores each chunk's keyword vector (of its text and section); the
    index stage writes the stored one (a chunk given another text's vector answers that
    text); rows without one, or of another stored format (made before 0024, or by
    another version), are computed when indexed and answer as before."""
    async with cohere_pipeline(fake_cohere) as env:
        rust, sourdough = await env.submit_all(
            sample(n) for n in ("rust-borrow-checker.pdf", "sourdough.pdf")
        )
        await env.run()
        rows = await env.pool.fetch("SELECT text, section, keywords FROM chunks")
        assert rows and all(r["keywords"] == stored_vector(r["text"], r["section"]) for r in rows)
        before = await search(env.pool, env.probe, IDENTIFIER, 5, mode="keyword")
        assert before.hits[0].document_id == rust

        await env.pool.execute("UPDATE chunks SET keywords = NULL WHERE document_id = $1", rust)
        await env.pool.execute(
            "UPDATE chunks SET keywords = $2 || substring(keywords FROM 2) WHERE document_id = $1",
            sourdough,
            bytes((STORED_FORMAT + 1,)),
        )
        await env.pool.execute(
            "UPDATE chunks SET keywords = $2 WHERE document_id = $1 AND ordinal = 0",
            sourdough,
            stored_vector("quagga zebra"),
        )
        assert not (await search(env.pool, env.probe, "quagga", 5, mode="keyword")).hits
        for doc in (rust, sourdough):
            await env.enqueue_index(doc)
        await env.run(("index",))
        for doc in (rust, sourdough):
            await env.assert_indexed(doc)
        after = await search(env.pool, env.probe, IDENTIFIER, 5, mode="keyword")
        assert [(h.document_id, h.ordinal) for h in after.hits] == [
            (h.document_id, h.ordinal) for h in before.hits
        ]
        quagga = await search(env.pool, env.probe, "quagga", 5, mode="keyword")
        assert [(h.document_id, h.ordinal) for h in quagga.hits] == [(sourdough, 0)]
