"""Progress of a set of documents through the stages (rich bars on stderr)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import anyio
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from runtime.api import CONNECTION_ERRORS, DocumentRepository, Pool, progress

POLL_S = 0.25


async def watch(pool: Pool, ids: Sequence[uuid.UUID], stages: Sequence[str], show: bool) -> None:
    """Return once every document in ``ids`` is ready or failed."""
    docs = DocumentRepository(pool)
    bars = Progress(
        TextColumn("{task.description:>7}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[note]}"),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        disable=not show,
    )
    tasks = {s: bars.add_task(s, total=len(ids), note="") for s in stages}
    with bars:
        while True:
            try:
                finished = await docs.count_finished(ids)
                counts = await progress(pool, ids)
            except CONNECTION_ERRORS:
                await anyio.sleep(POLL_S)
                continue
            for stage, task in tasks.items():
                by_state = counts.get(stage, {})
                note = f"{by_state['failed']} failed" if by_state.get("failed") else ""
                bars.update(task, completed=by_state.get("succeeded", 0), note=note)
            if finished >= len(ids):
                return
            await anyio.sleep(POLL_S)
