"""Cleanup holes: an index job the sweep fails undoes its points; `verify` checks documents
of every status and every model's collection; `delete` empties every collection."""

from __future__ import annotations

import uuid

import pytest

from bench.harness.fake_cohere import Fault
from runtime.models import DocumentStatus, JobState
from stages.actions import migrate_model
from stages.actions.documents import delete_points
from stages.actions.verify import repair, verify
from stages.db import checkpoints
from stages.ports.vector_index import new_point, vector_collection_name
from tests.integration.conftest import OpenPipeline
from tests.support.pipeline_env import FAKE_DIMS, PipelineEnv, TimedCohere, sample

pytestmark = pytest.mark.anyio


async def points_in(env: PipelineEnv, collection: str, doc_id: uuid.UUID) -> int:
    return len(await env.probe.index.scan(collection, doc_id))


async def test_the_sweep_failing_an_index_job_removes_its_partial_points(
    cohere_pipeline: OpenPipeline, fake_cohere: TimedCohere
) -> None:
    async with cohere_pipeline(fake_cohere) as env:
        doc_id = (await env.submit(sample("sourdough.pdf"))).document_id
        await env.run(("parse", "chunk", "vision", "embed"))
        # A worker leased the index job on its last attempt, wrote part of the points,
        # and died: its lease has expired.
        [job] = await env.jobs.claim("index", "gone:1:dead", 1, 30)
        rows = await checkpoints.chunk_vectors(env.pool, doc_id, env.probe.embedder.model)
        partial = [new_point(doc_id, r.ordinal, job.generation, r.vector or []) for r in rows[:2]]
        collection = env.probe.vector_collection
        await env.probe.index.ensure_vector_collection(collection, FAKE_DIMS)
        await env.probe.index.upsert(collection, partial)
        await env.probe.aclose()  # let the worker's process have the embedded index
        await env.pool.execute(
            "UPDATE stage_jobs SET attempts = max_attempts,"
            " lease_expires_at = now() - interval '1 second' WHERE id = $1",
            job.id,
        )
        assert await points_in(env, collection, doc_id) == 2

        await env.run(("index",), rescue_every_s=0.1)

        doc = await env.doc(doc_id)
        assert doc.status == DocumentStatus.FAILED
        assert doc.error is not None and doc.error.startswith("index: worker lost 1 times")
        [index_job] = await env.stage_jobs(doc_id, "index")
        assert index_job.state == JobState.FAILED
        assert await points_in(env, collection, doc_id) == 0


async def test_verify_covers_failed_documents_and_every_collection(
    cohere_pipeline: OpenPipeline, fake_cohere: TimedCohere
) -> None:
    async with cohere_pipeline(fake_cohere) as env:
        ids = await env.submit_all([sample("sourdough.pdf"), sample("lighthouses.pdf")])
        await env.run()
        old = env.probe.vector_collection
        assert (await verify(env.pool, env.probe)).clean

        # Another dimension is another vector space, another collection: re-embed and
        # re-index there. The old collection's copies are searched by nobody any more.
        switched = {"RAGLINE_EMBED_DIMENSIONS": "32"}
        # PostgreSQL names the live model: moved here by hand (migrate-model would have
        # deleted the old collection at its swap, leaving no stale copies to find).
        await env.pool.execute(
            "UPDATE vector_aliases SET model = $1, dimensions = 32, collection = $2",
            "cohere/embed-v4.0@32",
            vector_collection_name("cohere/embed-v4.0@32", 32),
        )
        for doc_id in ids:
            await env.docs.reprocess(doc_id, "embed")
        await env.run(env=switched)
        services = env.services(**switched)
        new = services.vector_collection
        assert new == vector_collection_name("cohere/embed-v4.0@32", 32) and new != old
        report = await verify(env.pool, services)
        assert {p.document_id: p.other_collections for p in report.problems} == {
            str(d): [old] for d in ids
        }
        await repair(env.pool, services, report)
        assert [await points_in(env, old, d) for d in ids] == [0, 0]
        assert (await verify(env.pool, services)).clean

        # A document that fails at embed keeps no searchable point.
        sourdough = ids[0]
        fake_cohere.add_faults([Fault(status=400, endpoint="embed", message="bad input")])
        await env.docs.reprocess(sourdough, "chunk")
        await env.run(env={**switched, "RAGLINE_CHUNK_TOKENS": "75"})
        assert (await env.doc(sourdough)).status == DocumentStatus.FAILED
        report = await verify(env.pool, services)
        [problem] = report.problems
        assert problem.document_id == str(sourdough) and problem.failed_points > 0
        await repair(env.pool, services, report)
        assert problem.repair == "deleted the failed document's points"
        assert await points_in(env, new, sourdough) == 0
        assert (await verify(env.pool, services)).clean
        await services.aclose()


async def test_delete_removes_points_from_every_collection(
    cohere_pipeline: OpenPipeline, fake_cohere: TimedCohere
) -> None:
    async with cohere_pipeline(fake_cohere) as env:
        [doc_id] = await env.submit_all([sample("sourdough.pdf")])
        await env.run()
        # While a model switch builds, the pipeline writes both models' collections.
        await migrate_model.begin(env.pool, env.probe, "cohere/embed-v4.0@32")
        await env.docs.reprocess(doc_id, "embed")
        switched = {"RAGLINE_EMBED_DIMENSIONS": "32"}
        await env.run(env=switched)
        services = env.services(**switched)
        collections = await services.index.vector_collections()
        assert len(collections) == 2
        assert all([await points_in(env, c, doc_id) > 0 for c in collections])
        await delete_points(services, doc_id)
        await services.aclose()
        assert [await points_in(env, c, doc_id) for c in collections] == [0, 0]
