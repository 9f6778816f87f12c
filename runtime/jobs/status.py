"""Read models for `status`, `failures` and progress: where work is and why it waits."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime

import msgspec

import schema
from runtime.jobs.postgres import Pool, to_struct
from runtime.providers.specs import ProviderState, provider_states

S = schema.load("status")


class StageStatus(msgspec.Struct, kw_only=True):
    stage: str
    queued: int = 0
    backing_off: int = 0
    running: int = 0
    failed: int = 0
    oldest_queued_s: float = 0.0
    oldest_running_s: float = 0.0
    workers: int = 0
    #: The providers this stage's jobs call, with their circuits.
    providers: list[ProviderState] = msgspec.field(default_factory=list)


class FailureRow(msgspec.Struct, frozen=True, kw_only=True):
    document_id: uuid.UUID
    filename: str
    job_id: int
    stage: str
    error_kind: str | None
    last_error: str | None
    attempts: int
    finished_at: datetime | None


async def overview(pool: Pool, stages: Sequence[str], workers: dict[str, int]) -> list[StageStatus]:
    by_stage = {s: StageStatus(stage=s, workers=workers.get(s, 0)) for s in stages}
    for r in await pool.fetch(S["stage_overview"]):
        st = by_stage.setdefault(r["stage"], StageStatus(stage=r["stage"]))
        st.queued, st.backing_off, st.running = r["queued"], r["backing_off"], r["running"]
        st.oldest_queued_s = float(r["oldest_queued_s"])
        st.oldest_running_s = float(r["oldest_running_s"])
    for r in await pool.fetch(S["failed_by_stage"]):
        by_stage.setdefault(r["stage"], StageStatus(stage=r["stage"])).failed = r["failed"]
    for provider in await provider_states(pool):
        for stage in provider.stages:
            if stage in by_stage:
                by_stage[stage].providers.append(provider)
    return list(by_stage.values())


def provider_waits(states: Sequence[ProviderState]) -> list[str]:
    """One line per stage held by a provider whose circuit is not closed, e.g. "embed:
    provider cohere/embed-v4.0 unavailable since 12:01:07 (HTTP 503), next try 12:04:10"."""
    return [
        f"{stage}: {p.waiting_line()}" for p in states if p.state != "closed" for stage in p.stages
    ]


async def progress(pool: Pool, ids: Sequence[uuid.UUID]) -> dict[str, dict[str, int]]:
    """``{stage: {state: count}}`` over the current generation of ``ids``."""
    out: dict[str, dict[str, int]] = {}
    for r in await pool.fetch(S["documents_progress"], list(ids)):
        out.setdefault(r["stage"], {})[r["state"]] = int(r["n"])
    return out


async def failures(pool: Pool, stage: str | None, kind: str | None, limit: int) -> list[FailureRow]:
    rows = await pool.fetch(S["failures"], stage, kind, limit)
    return [to_struct(FailureRow, r) for r in rows]


async def queue_position(pool: Pool, job_id: int) -> int:
    return int(await pool.fetchval(S["queue_position"], job_id))
