"""Reading what worker processes did to the stand-in pipeline's jobs."""

from __future__ import annotations

from bench.harness.db import sql


def job_state(dsn: str, stage: str) -> tuple[str, int, int]:
    """(state, attempts, lost) of the one job of ``stage``."""
    [row] = sql(dsn, "SELECT state::text, attempts, lost FROM stage_jobs WHERE stage = $1", stage)
    return row[0], row[1], row[2]


def effects(dsn: str) -> list[tuple[str, int]]:
    """(stage, pid) of each effect the scripted stages committed, in order."""
    return [(r[0], r[1]) for r in sql(dsn, "SELECT stage, pid FROM test_effects ORDER BY id")]
