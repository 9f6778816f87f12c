"""The chunk stage in tokens, end to end: re-chunking re-embeds only changed text, and chunks
over the embedder's window are recorded, counted in the metrics and shown by status."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from stages.app import status_notes
from stages.db import checkpoints
from tests.support.pipeline_env import PipelineEnv, TimedCohere, cohere_env, pipeline_env, sample

pytestmark = pytest.mark.anyio


@contextlib.asynccontextmanager
async def one_sample(
    dsn: str, tmp_path: Path, fake_cohere: TimedCohere, name: str, **env: str
) -> AsyncIterator[tuple[PipelineEnv, uuid.UUID]]:
    """A pipeline on the fake Cohere server with ``env``, sample ``name`` submitted."""
    async with pipeline_env(dsn, tmp_path / "data", **cohere_env(fake_cohere, **env)) as penv:
        [doc] = await penv.submit_all([sample(name)])
        yield penv, doc


async def test_rechunking_embeds_only_the_chunks_whose_text_changed(
    dsn: str, tmp_path: Path, fake_cohere: TimedCohere
) -> None:
    small = {"RAGLINE_CHUNK_TOKENS": "300", "RAGLINE_CHUNK_OVERLAP_TOKENS": "0"}
    async with one_sample(dsn, tmp_path, fake_cohere, "lighthouses.pdf", **small) as (env, doc):
        await env.run()
        first = {c.sha256 for c in await env.chunks(doc)}
        assert fake_cohere.snapshot().texts_embedded == len(first)

        # The same size again: the same texts, nothing sent.
        await env.docs.reprocess(doc, "chunk")
        await env.run()
        assert {c.sha256 for c in await env.chunks(doc)} == first
        assert fake_cohere.snapshot().texts_embedded == len(first)

        # Twice the size: only chunks with new text are embedded; unchanged ones are not.
        await env.docs.reprocess(doc, "chunk")
        await env.run(env={"RAGLINE_CHUNK_TOKENS": "600"})
        second = {c.sha256 for c in await env.chunks(doc)}
        assert second != first and second & first  # some chunks changed, some did not
        assert fake_cohere.snapshot().texts_embedded == len(first) + len(second - first)
        doc_row = await env.doc(doc)
        assert (doc_row.status, doc_row.generation) == ("ready", 3)
        await env.assert_indexed(doc)


def over_window_total() -> float:
    return REGISTRY.get_sample_value("ragline_chunks_over_window_total") or 0.0


async def test_chunks_over_the_window_are_recorded_counted_and_shown(
    dsn: str, tmp_path: Path, fake_cohere: TimedCohere
) -> None:
    # embed-english-v3.0 reads 512 tokens; 900-byte chunks can be longer than that.
    over = {"RAGLINE_EMBED_MODEL": "embed-english-v3.0", "RAGLINE_CHUNK_TOKENS": "900"}
    name = "rust-borrow-checker.pdf"
    async with one_sample(dsn, tmp_path, fake_cohere, name, **over) as (env, doc):
        before = over_window_total()
        await env.run()
        rows = await env.pool.fetch(
            "SELECT tokens, over_window, text FROM chunks WHERE document_id = $1", doc
        )
        assert all(r["tokens"] == len(r["text"].encode()) for r in rows)
        flagged = [r for r in rows if r["over_window"]]
        assert flagged and all(r["tokens"] > 512 for r in flagged)
        assert len(flagged) == sum(r["tokens"] > 512 for r in rows)
        assert over_window_total() - before == len(flagged)
        assert await status_notes(env.pool, None) == [
            f"chunks over the embedder's window: {len(flagged)} (in 1 documents)"
        ]
        sizes = await checkpoints.chunk_tokens(env.pool, doc)
        assert (sizes.chunks, sizes.over_window) == (len(rows), len(flagged))

        # Back to the default size (the window): nothing is over it any more.
        await env.docs.reprocess(doc, "chunk")
        await env.run(env={"RAGLINE_CHUNK_TOKENS": ""})
        assert await status_notes(env.pool, None) == [
            "chunks over the embedder's window: 0 (in 0 documents)"
        ]
        largest = (await checkpoints.chunk_tokens(env.pool, doc)).max_tokens
        assert largest is not None and 400 < largest <= 512
