"""The model switch on a Qdrant-API index (qdrant-client's local mode, in process, shared
by the workers, the migrator and search): a migration started, a document uploaded while
it builds is indexed into both collections by the pipeline, the rest is backfilled, the
Qdrant alias moves to the new collection and the old one is deleted."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from runtime.errors import MissingInput
from runtime.worker.config import WorkerConfig
from runtime.worker.worker import Worker
from stages.actions import migrate_model
from stages.actions.search import search
from stages.adapters.vector_index.qdrant import QdrantConfig, QdrantIndex
from stages.db import model_switch
from stages.pipeline import pipeline_for
from stages.services import Services, embedder_for_key
from tests.integration.conftest import OpenPipeline
from tests.support.pipeline_env import (
    FAKE_DIMS,
    TEST_CONCURRENCY,
    PipelineEnv,
    TimedCohere,
    long_pdf,
    sample,
)

pytestmark = pytest.mark.anyio

MODEL_B = f"cohere/embed-b@{FAKE_DIMS}"


class SharedIndex(QdrantIndex):
    """One in-memory Qdrant for every Services of the test (closing one closes nothing)."""

    async def aclose(self) -> None:
        pass


def services(env: PipelineEnv, index: SharedIndex) -> Services:
    made = env.services()
    made.__dict__["index"] = index  # the cached_property, filled in advance
    return made


async def run_pipeline(env: PipelineEnv, index: SharedIndex) -> None:
    stages: Sequence[str] = ("parse", "chunk", "vision", "embed", "index")
    config = WorkerConfig(
        stages=tuple(stages),
        concurrency={s: TEST_CONCURRENCY[s] for s in stages},
        exit_when_idle=True,
        poll_s=0.2,
        retry_base_s=0.05,
    )
    await Worker(pipeline_for(services(env, index)), env.dsn, config).run()


async def chunk_counts(env: PipelineEnv) -> dict[str, int]:
    rows = await env.pool.fetch(
        "SELECT document_id::text AS id, count(*) AS n FROM chunks GROUP BY 1"
    )
    return {r["id"]: int(r["n"]) for r in rows}


async def points_per_document(index: QdrantIndex, collection: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for ref in await index.scan(collection):
        counts[ref.document_id] = counts.get(ref.document_id, 0) + 1
    return counts


async def test_switch_on_qdrant_moves_the_alias_and_drops_the_old_collection(
    cohere_pipeline: OpenPipeline, tmp_path: Path, fake_cohere: TimedCohere
) -> None:
    index = SharedIndex(QdrantConfig(location=":memory:"))
    async with cohere_pipeline(fake_cohere) as env:
        await env.submit_all([sample("sourdough.pdf"), sample("lighthouses.pdf")])
        await run_pipeline(env, index)
        svc = services(env, index)
        old = await model_switch.live(env.pool, svc)

        started = await migrate_model.begin(env.pool, svc, MODEL_B)
        assert started.state == "building" and started.from_collection == old.vector_collection
        late = await env.submit(long_pdf(tmp_path / "late.pdf", 12, seed="-late"))
        await run_pipeline(env, index)  # embeds with both models, indexes both
        marked = await env.pool.fetchval(
            "SELECT count(*) FROM model_migration_documents WHERE document_id = $1",
            late.document_id,
        )
        assert marked == 1
        # Search still answers from the old collection, whole.
        chunks = await chunk_counts(env)
        found = await search(env.pool, svc, "sourdough", 1000, mode="dense")
        assert found.vector_collection == old.vector_collection
        assert len(found.hits) == sum(chunks.values())

        done = await migrate_model.migrate(env.pool, svc, MODEL_B)
        assert (done.state, done.ready, done.migrated) == ("done", 3, 3)
        new = await model_switch.live(env.pool, svc)
        assert new.model == MODEL_B and new.vector_collection == started.to_collection
        aliases: Any = await index._client.get_aliases()
        assert [(a.alias_name, a.collection_name) for a in aliases.aliases] == [
            (model_switch.ALIAS, new.vector_collection)
        ]
        assert await index.vector_collections() == [new.vector_collection]
        assert await points_per_document(index, new.vector_collection) == chunks
        text = await env.pool.fetchval("SELECT text FROM chunks ORDER BY ordinal LIMIT 1")
        found = await search(env.pool, svc, text, 1000, mode="dense")
        assert found.vector_collection == new.vector_collection
        assert len(found.hits) == sum(chunks.values())
        assert found.hits[0].text == text and found.hits[0].score > 0.999
        await svc.aclose()
    await QdrantIndex.aclose(index)


async def test_a_second_target_is_refused_and_cancel_leaves_search_alone(
    cohere_pipeline: OpenPipeline, fake_cohere: TimedCohere
) -> None:
    index = SharedIndex(QdrantConfig(location=":memory:"))
    async with cohere_pipeline(fake_cohere) as env:
        await env.submit(sample("sourdough.pdf"))
        await run_pipeline(env, index)
        svc = services(env, index)
        old = await model_switch.live(env.pool, svc)
        with pytest.raises(Exception, match="already the live embedding model"):
            await migrate_model.begin(env.pool, svc, old.model)
        started = await migrate_model.begin(env.pool, svc, MODEL_B)
        await index.ensure_vector_collection(started.to_collection, FAKE_DIMS)
        with pytest.raises(Exception, match=f"a migration to {MODEL_B} is unfinished"):
            await migrate_model.begin(env.pool, svc, f"cohere/embed-c@{FAKE_DIMS}")
        cancelled = await migrate_model.cancel(env.pool, svc)
        assert cancelled is not None and cancelled.id == started.id
        assert await index.vector_collections() == [old.vector_collection]
        assert await model_switch.live(env.pool, svc) == old
        assert await migrate_model.progress(env.pool) is None
        await svc.aclose()
    await QdrantIndex.aclose(index)


def test_unknown_model_keys_are_refused_in_one_line() -> None:
    from runtime.errors import ConfigurationError

    for key in ("openai/text-3", "cohere/embed-v4.0", "cohere/@12"):
        with pytest.raises(ConfigurationError, match="unknown embedding model"):
            embedder_for_key({"COHERE_API_KEY": "k"}, key)
    with pytest.raises(ConfigurationError, match="needs COHERE_API_KEY"):
        embedder_for_key({}, "cohere/embed-b@64")


async def test_a_document_reprocessed_while_migrated_is_done_again_at_its_generation(
    cohere_pipeline: OpenPipeline, fake_cohere: TimedCohere
) -> None:
    index = SharedIndex(QdrantConfig(location=":memory:"))
    async with cohere_pipeline(fake_cohere) as env:
        doc = (await env.submit(sample("sourdough.pdf"))).document_id
        await run_pipeline(env, index)
        svc = services(env, index)
        migration = await migrate_model.begin(env.pool, svc, MODEL_B)
        await index.ensure_vector_collection(migration.to_collection, FAKE_DIMS)
        [row] = await model_switch.pending(env.pool, migration.id, 10)
        # The document moves to generation 2 after the migrator read it at generation 1.
        assert await env.docs.reprocess(doc, "index") == 2
        await migrate_model.migrate_document(env.pool, svc, migration, row)
        # Not recorded, and what it wrote (generation 1) is gone again.
        assert await env.pool.fetchval("SELECT count(*) FROM model_migration_documents") == 0
        assert await index.count(migration.to_collection, doc) == 0
        await run_pipeline(env, index)  # generation 2 ready (B's vectors were cached)
        done = await migrate_model.migrate(env.pool, svc, MODEL_B)
        assert (done.ready, done.migrated) == (1, 1)
        refs = await index.scan(migration.to_collection, doc)
        chunks = await env.chunks(doc)
        assert len(refs) == len(chunks) and {r.generation for r in refs} == {2}
        await svc.aclose()
    await QdrantIndex.aclose(index)


async def test_a_collection_made_before_keyword_search_is_rebuilt_without_embedding(
    cohere_pipeline: OpenPipeline, fake_cohere: TimedCohere, tmp_path: Path
) -> None:
    """A vector collection with dense vectors only (as ragline made them before hybrid
    search) answers dense queries and refuses keyword ones with the rebuild's name;
    ``migrate-model --rebuild`` fills a new one from the cached vectors (no embedding
    call) and keyword search answers; a second rebuild goes back to the first name."""
    from qdrant_client import models as qm

    index = SharedIndex(QdrantConfig(location=":memory:"))
    async with cohere_pipeline(fake_cohere) as env:
        svc = services(env, index)
        base = svc.vector_collection
        dense_only = qm.VectorParams(size=FAKE_DIMS, distance=qm.Distance.COSINE)
        await index._client.create_collection(base, vectors_config=dense_only)
        await env.submit_all(sample(n) for n in ("sourdough.pdf", "rust-borrow-checker.pdf"))
        await run_pipeline(env, index)
        chunks = await chunk_counts(env)
        assert (await search(env.pool, svc, "sourdough", 3, mode="dense")).hits
        with pytest.raises(MissingInput, match="migrate-model --rebuild"):
            await search(env.pool, svc, "borrow checker", 3, mode="keyword")

        embeds = fake_cohere.requests_to("embed")
        done = await migrate_model.migrate(env.pool, svc, "", rebuild=True)
        assert done.state == "done" and done.to_collection == base + model_switch.REBUILT_SUFFIX
        assert fake_cohere.requests_to("embed") == embeds  # the cache had every vector
        assert await points_per_document(index, done.to_collection) == chunks
        found = await search(env.pool, svc, "borrow checker", 3, mode="keyword")
        assert found.hits and found.hits[0].filename == "rust-borrow-checker.pdf"
        again = await migrate_model.migrate(env.pool, svc, "", rebuild=True)
        assert again.to_collection == base and await index.vector_collections() == [base]
        await svc.aclose()
    await QdrantIndex.aclose(index)
