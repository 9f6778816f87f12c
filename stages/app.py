"""ragline's RAG pipeline as a plugin of the engine (what ``python -m runtime`` loads)."""

from __future__ import annotations

import uuid

from runtime.api import Plugin, Pool
from stages import store
from stages.cli import delete, reprocess, search, verify_cmd
from stages.cli_ingest import ingest
from stages.cli_submit import submit
from stages.pipeline import DEFAULT_CONCURRENCY, STAGES, build
from stages.serve.cli import serve
from stages.settings import PIPELINE_SETTINGS


async def status_notes(pool: Pool, document_id: uuid.UUID | None) -> list[str]:
    """``status``'s lines on chunk sizes: chunks longer than the embedder's window (their
    tail is never embedded; expected 0) overall, or a document's chunk sizes."""
    if document_id is None:
        over = await store.chunks_over_window(pool)
        return [f"chunks over the embedder's window: {over.chunks} (in {over.documents} documents)"]
    sizes = await store.chunk_tokens(pool, document_id)
    if not sizes.chunks:
        return []
    largest = "?" if sizes.max_tokens is None else str(sizes.max_tokens)
    return [
        f"text chunks: {sizes.chunks}, {sizes.tokens or 0} tokens, largest {largest}, "
        f"over the embedder's window: {sizes.over_window}"
    ]


plugin = Plugin(
    stage_names=STAGES,
    build=build,
    default_concurrency=DEFAULT_CONCURRENCY,
    commands=(submit, ingest, search, reprocess, delete, verify_cmd, serve),
    settings=PIPELINE_SETTINGS,
    status_notes=status_notes,
)
