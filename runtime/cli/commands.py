"""The engine's own commands: status, failures, retry, migrate, db stop (any pipeline).

Plain click commands, listed in :data:`ENGINE_COMMANDS`; ``runtime.cli.main`` declares its
group with them.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

import click
import msgspec

from runtime.cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    App,
    emit,
    fail,
    guarded,
    json_option,
    run_async,
)
from runtime.cli.refs import parse_refs, resolve_refs
from runtime.db.connect import ensure_schema, open_pool
from runtime.db.errors import is_storage_full
from runtime.errors import DatabaseUnavailable
from runtime.jobs.documents import DocumentRepository
from runtime.jobs.postgres import JobRepository, Pool
from runtime.jobs.status import StageStatus, failures, overview, provider_waits, queue_position
from runtime.models import Document, JobRow, JobState
from runtime.process.names import escape_name
from runtime.providers.specs import ProviderState, provider_states

#: A worker counts as live if seen within this many seconds (it heartbeats far more often).
LIVE_WORKER_S = 120.0

T = TypeVar("T")


def read_database(app: App, body: Callable[[str], T]) -> T:
    """``body(dsn)`` for a command that only reads (status, failures).

    On the embedded defaults a command registers as a user of the cluster with a file
    under the data dir; when that disk is full (exactly when one wants ``status``) the
    command reads the cluster as it runs, unregistered, and says so in one line.
    """
    try:
        return app.with_database(body)
    except OSError as exc:
        if app.database_url or not is_storage_full(exc):
            raise
        full = f"no space left under {app.data_dir} ({exc.strerror or exc})"
    from runtime.db.embedded import EmbeddedPostgres

    try:
        result = body(EmbeddedPostgres(app.data_dir).dsn)
    except DatabaseUnavailable as exc:
        raise DatabaseUnavailable(f"{full}, and the embedded PostgreSQL: {exc}") from exc
    click.echo(f"ragline: {full}: read the embedded PostgreSQL unregistered", err=True)
    return result


async def stage_table(pool: Pool, stages: tuple[str, ...]) -> list[StageStatus]:
    workers = await JobRepository(pool).live_workers(LIVE_WORKER_S)
    per_stage: dict[str, int] = {}
    for w in workers:
        for s in w.stages:
            per_stage[s] = per_stage.get(s, 0) + 1
    return await overview(pool, stages, per_stage)


class Timeline(msgspec.Struct, kw_only=True):
    document: Document
    jobs: list[JobRow]
    waiting: str | None
    #: The pipeline's own lines about the document (Plugin.status_notes).
    notes: list[str] = msgspec.field(default_factory=list)


async def why_waiting(pool: Pool, job: JobRow, workers: dict[str, int]) -> str | None:
    """One line on why a live job is not done yet."""
    now = datetime.now(UTC)
    if job.state == JobState.RUNNING:
        return f"running on {job.lease_owner} since {job.started_at:%H:%M:%S}"
    if job.state != JobState.QUEUED:
        return None
    held = [p for p in await provider_states(pool) if p.state != "closed" and job.stage in p.stages]
    if held:
        return f"{job.stage}: {held[0].waiting_line()}"
    if job.run_after > now:
        reason = "rate-limited" if job.error_kind == "rate_limited" else "backing off"
        return f"{reason} until {job.run_after:%H:%M:%S} (last error: {job.last_error})"
    if not workers.get(job.stage):
        return f"no live worker serves stage {job.stage}; start one with --stages {job.stage}"
    ahead = await queue_position(pool, job.id)
    return f"queued behind {ahead} job(s) of stage {job.stage}" if ahead else "about to be claimed"


async def timeline(pool: Pool, doc_id: uuid.UUID) -> Timeline | None:
    doc = await DocumentRepository(pool).get(doc_id)
    if doc is None:
        return None
    repo = JobRepository(pool)
    jobs = await repo.document_jobs(doc_id)
    workers: dict[str, int] = {}
    for w in await repo.live_workers(LIVE_WORKER_S):
        for s in w.stages:
            workers[s] = workers.get(s, 0) + 1
    live = [j for j in jobs if j.state in (JobState.QUEUED, JobState.RUNNING)]
    waiting = await why_waiting(pool, live[-1], workers) if live else None
    return Timeline(document=doc, jobs=jobs, waiting=waiting)


def print_stages(rows: list[StageStatus]) -> None:
    click.echo(
        f"{'stage':8} {'queued':>7} {'backoff':>8} {'running':>8} {'failed':>7} "
        f"{'oldest queued':>14} {'oldest lease':>13} {'workers':>8}"
    )
    for r in rows:
        click.echo(
            f"{r.stage:8} {r.queued:>7} {r.backing_off:>8} {r.running:>8} {r.failed:>7} "
            f"{r.oldest_queued_s:>13.0f}s {r.oldest_running_s:>12.0f}s {r.workers:>8}"
        )


def print_providers(rows: list[StageStatus]) -> None:
    seen: dict[str, ProviderState] = {}
    for r in rows:
        for p in r.providers:
            seen.setdefault(p.name, p)
    if not seen:
        return
    click.echo("providers:")
    for p in seen.values():
        line = f"  {p.name} ({','.join(p.stages)}): {p.state.replace('_', '-')}"
        if p.state != "closed":
            line += f" -- {p.waiting_line()}; {p.failures} failure(s) in a row"
        click.echo(line)


def print_timeline(t: Timeline) -> None:
    d = t.document
    click.echo(
        f"{escape_name(d.filename)} {d.id}: {d.status} at {d.stage} (generation {d.generation})"
    )
    if d.error:
        click.echo(f"  error: {d.error}")
    for j in t.jobs:
        took = None
        if j.finished_at and j.started_at:
            took = (j.finished_at - j.started_at).total_seconds()
        line = f"  {j.stage:7} gen {j.generation} {j.state:9}"
        line += f" attempts {j.attempts}/{j.max_attempts}"
        line += f" {took:.2f}s" if took is not None else ""
        line += f"  {j.last_error}" if j.last_error else ""
        click.echo(line)
    if t.waiting:
        click.echo(f"  waiting: {t.waiting}")
    for note in t.notes:
        click.echo(f"  {note}")


@click.command()
@click.argument("document", required=False)
@json_option
@click.pass_obj
def status(app: App, document: str | None, as_json: bool) -> None:
    """Per stage: queued, backing off, running, failed, oldest ages, live workers.

    With a DOCUMENT (its id, or its file name when that is one document's): its timeline
    (stage, attempts, durations, errors) and why it waits.
    """
    refs = parse_refs((document,)) if document else []

    notes_of = app.plugin.status_notes

    async def go(dsn: str) -> tuple[uuid.UUID | None, Any, list[str]]:
        async with open_pool(dsn) as pool:
            [doc_id] = await resolve_refs(pool, refs) if refs else [None]
            notes = await notes_of(pool, doc_id) if notes_of is not None else []
            if doc_id is None:
                return None, await stage_table(pool, app.plugin.stage_names), notes
            found = await timeline(pool, doc_id)
            if found is not None:
                found.notes = notes
            return doc_id, found, notes

    doc_id, result, notes = guarded(lambda: read_database(app, lambda dsn: run_async(go, dsn)))
    if doc_id is not None and result is None:
        for note in notes:  # e.g. a tombstone: deleted from its source
            click.echo(note)
        click.echo(f"ragline: no document {doc_id}", err=True)
        sys.exit(EXIT_FAILED)
    if as_json:
        emit(result)
    elif doc_id is None:
        print_stages(result)
        print_providers(result)
        for note in notes:
            click.echo(note)
    else:
        print_timeline(result)


@click.command("failures")
@click.option("--stage", help="Only failures of this stage.")
@click.option("--error-kind", help="Only this kind (invalid_document, transient, ...).")
@click.option("--limit", default=100, show_default=True)
@json_option
@click.pass_obj
def failures_cmd(
    app: App, stage: str | None, error_kind: str | None, limit: int, as_json: bool
) -> None:
    """Failed documents: stage, kind and the one-line reason."""
    if stage is not None and stage not in app.plugin.stage_names:
        known = ", ".join(app.plugin.stage_names)
        fail(f"--stage {stage}: no such stage; expected one of {known}", EXIT_USAGE)

    async def go(dsn: str) -> Any:
        async with open_pool(dsn) as pool:
            return await failures(pool, stage, error_kind, limit), await provider_states(pool)

    rows, providers = guarded(lambda: read_database(app, lambda dsn: run_async(go, dsn)))
    if as_json:
        emit(rows)
        return
    # Not failures, but the reason jobs that have not failed are not moving either.
    for line in provider_waits(providers):
        if stage is None or line.startswith(f"{stage}:"):
            click.echo(f"waiting: {line}")
    for r in rows:
        click.echo(
            f"{r.document_id} {escape_name(r.filename)} {r.stage} [{r.error_kind}] {r.last_error}"
        )


@click.command()
@click.argument("documents", nargs=-1)
@click.option("--stage", help="Only jobs that failed at this stage.")
@click.option("--error-kind", help="Only jobs that failed with this kind.")
@json_option
@click.pass_obj
def retry(
    app: App, documents: tuple[str, ...], stage: str | None, error_kind: str | None, as_json: bool
) -> None:
    """Requeue failed documents at the stage that failed, with a fresh attempt budget.

    DOCUMENTS: ids, or file names that are one document's each. Without filters, every
    failed document. Exit 0 when something was requeued.
    """
    refs = parse_refs(documents)

    async def go(dsn: str) -> list[tuple[uuid.UUID, str]]:
        async with open_pool(dsn) as pool:
            ids = await resolve_refs(pool, refs) or None
            return await JobRepository(pool).retry_failed(stage, error_kind, ids)

    requeued = guarded(lambda: app.with_database(lambda dsn: run_async(go, dsn)))
    if as_json:
        emit([{"document_id": str(d), "stage": s} for d, s in requeued])
    else:
        click.echo(f"requeued {len(requeued)} job(s)")
    sys.exit(EXIT_OK if requeued else EXIT_FAILED)


@click.command()
@click.pass_obj
def migrate(app: App) -> None:
    """Apply pending schema migrations (safe to run from many processes at once)."""

    def body(dsn: str) -> None:
        applied = run_async(ensure_schema, dsn)
        click.echo(f"applied {len(applied)} migration(s)" if applied else "schema up to date")

    no_auto = msgspec.structs.replace(app, auto_migrate=False)
    guarded(lambda: no_auto.with_database(body, schema_check=False))


@click.group()
def db() -> None:
    """The embedded PostgreSQL (used when DATABASE_URL is unset)."""


@db.command("stop")
@click.option(
    "--force",
    is_flag=True,
    help="Ask the processes using it to stop (SIGTERM), wait for them, then stop it.",
)
@click.option(
    "--wait",
    "wait_s",
    type=click.FloatRange(min=0),
    default=60.0,
    show_default=True,
    help="With --force: seconds to wait for those processes.",
)
@click.pass_obj
def db_stop(app: App, force: bool, wait_s: float) -> None:
    """Stop the embedded PostgreSQL under --data-dir; refused while ragline processes use
    it, unless --force."""
    from runtime.db.embedded import EmbeddedPostgres
    from runtime.db.supervisor import stop_embedded

    cluster = EmbeddedPostgres(app.data_dir)
    stopped = guarded(lambda: stop_embedded(cluster, force=force, wait_s=wait_s))
    click.echo("stopped" if stopped else "not running")


ENGINE_COMMANDS: tuple[click.Command, ...] = (status, failures_cmd, retry, migrate, db)
