"""ragline's RAG pipeline as a plugin of the engine (what ``python -m runtime`` loads)."""

from __future__ import annotations

import uuid

from runtime.api import BuildContext, Pipeline, Plugin, Pool
from stages.cli import models as model_cli
from stages.cli.documents import delete, metadata_cmd, reprocess, search, verify_cmd
from stages.cli.evaluate import evaluate_cmd
from stages.cli.ingest import ingest
from stages.cli.mcp import mcp
from stages.cli.serve import serve
from stages.cli.submit import submit
from stages.cli.sync import sync
from stages.db import checkpoints, sources
from stages.pipeline import DEFAULT_CONCURRENCY, STAGES, pipeline_for
from stages.settings import PIPELINE_SETTINGS


async def status_notes(pool: Pool, document_id: uuid.UUID | None) -> list[str]:
    """``status``'s lines on chunk sizes: chunks longer than the embedder's window (their
    tail is never embedded; expected 0) overall, or a document's chunk sizes."""
    if document_id is None:
        over = await checkpoints.chunks_over_window(pool)
        over_line = (
            f"chunks over the embedder's window: {over.chunks} (in {over.documents} documents)"
        )
        return [over_line, *await model_notes(pool), *await source_notes(pool)]
    origin = await sources.origin(pool, document_id)
    notes = [] if origin is None else [origin_line(origin)]
    sizes = await checkpoints.chunk_tokens(pool, document_id)
    if not sizes.chunks:
        return notes
    largest = "?" if sizes.max_tokens is None else str(sizes.max_tokens)
    return [
        *notes,
        f"text chunks: {sizes.chunks}, {sizes.tokens or 0} tokens, largest {largest}, "
        f"over the embedder's window: {sizes.over_window}",
    ]


async def source_notes(pool: Pool) -> list[str]:
    """One line per synced source: its collection, documents and tombstones."""
    return [
        f"source {s.uri} (collection {s.collection}): {s.documents} document(s), "
        f"{s.deleted} deleted (tombstones), last synced "
        + (f"{s.synced_at:%Y-%m-%d %H:%M:%S}" if s.synced_at else "never")
        for s in await sources.summaries(pool)
    ]


def origin_line(origin: sources.Origin) -> str:
    if origin.deleted_at is None:
        return f"source: {origin.source} : {origin.uri}"
    return (
        f"deleted from source {origin.source} : {origin.uri} at "
        f"{origin.deleted_at:%Y-%m-%d %H:%M:%S} (tombstone)"
    )


async def model_notes(pool: Pool) -> list[str]:
    """A model migration's progress, and documents per collection (when there are
    collections beside ``default``); nothing otherwise."""
    from stages.actions import migrate_model
    from stages.db import model_switch

    lines = []
    found = await migrate_model.progress(pool)
    if found is not None:
        lines.append(model_cli.describe(found))
    counts = await model_switch.collection_counts(pool)
    names = sorted({c.collection for c in counts})
    if names != ["default"] and names:
        per = {n: sum(c.n for c in counts if c.collection == n) for n in names}
        lines.append("collections: " + ", ".join(f"{n} {per[n]}" for n in names))
    return lines


def build(ctx: BuildContext) -> Pipeline:
    """The five stages over this process's services (the plugin's factory)."""
    from stages.services import services_for  # the adapters' factories load on first use

    return pipeline_for(services_for(ctx))


plugin = Plugin(
    stage_names=STAGES,
    build=build,
    default_concurrency=DEFAULT_CONCURRENCY,
    commands=(
        submit,
        ingest,
        search,
        evaluate_cmd,
        metadata_cmd,
        reprocess,
        delete,
        verify_cmd,
        serve,
        mcp,
        sync,
        *model_cli.MODEL_COMMANDS,
    ),
    settings=PIPELINE_SETTINGS,
    status_notes=status_notes,
)
