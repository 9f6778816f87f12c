"""``ingest``: submit documents, then run every stage in this process until they are done."""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import anyio
import click
import msgspec

from runtime.api import (
    CONNECTION_ERRORS,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    App,
    Document,
    DocumentRepository,
    DocumentStatus,
    Pool,
    Worker,
    escape_name,
    guarded,
    json_option,
    open_pool,
    run_async,
    worker_config,
)
from stages.cli.models import checked_collection, collection_option
from stages.cli.progress import watch
from stages.cli.submit import (
    Refused,
    expand,
    force_option,
    labels_from,
    labels_options,
    report_refused,
    report_skipped,
    submit_paths,
)
from stages.pipeline import pipeline_for
from stages.services import services_for

if TYPE_CHECKING:
    from stages.services import Services


class IngestSummary(msgspec.Struct, kw_only=True):
    ready: list[dict[str, Any]]
    failed: list[dict[str, Any]]
    unfinished: list[dict[str, Any]]
    refused: list[Refused]
    interrupted: bool
    #: Files a directory walk left out, per suffix (see stages.cli.submit.documents_under).
    skipped: dict[str, int] = {}
    #: Files with the same content as another file given (a document is its content:
    #: each such file is ingested once, under the first one's name).
    copies: int = 0


def summarize(docs: Sequence[Document], refused: list[Refused], interrupted: bool) -> IngestSummary:
    def row(d: Document) -> dict[str, Any]:
        return {
            "document_id": str(d.id),
            "filename": d.filename,
            "status": str(d.status),
            "stage": d.stage,
            "error": d.error,
        }

    return IngestSummary(
        ready=[row(d) for d in docs if d.status == DocumentStatus.READY],
        failed=[row(d) for d in docs if d.status == DocumentStatus.FAILED],
        unfinished=[
            row(d) for d in docs if d.status not in (DocumentStatus.READY, DocumentStatus.FAILED)
        ],
        refused=refused,
        interrupted=interrupted,
    )


@click.command()
@click.argument("paths", nargs=-1, required=True)
@force_option
@collection_option
@labels_options
@json_option
@click.option(
    "--progress/--no-progress",
    default=None,
    help="Progress bars per stage [default: when stderr is a terminal].",
)
@click.pass_obj
def ingest(
    app: App,
    paths: tuple[str, ...],
    force: bool,
    collection: str,
    metadata: tuple[str, ...],
    readers: str | None,
    as_json: bool,
    progress: bool | None,
) -> None:
    """Submit documents, then run every stage in this process until they are done.

    Shows progress per stage and ends with a summary: ready, failed (with the stage and
    the reason), and how many files repeated another's content (a document is its
    content: such a file is ingested once, under the first name). Ctrl-C stops cleanly;
    running the same command again resumes where it stopped and redoes nothing that
    finished. Exit 0: all ready; 1: some failed or were refused; 130: interrupted.
    """
    # ingest runs every stage itself, whatever RAGLINE_STAGES says (that is for worker
    # mode): serving only some would wait forever for the others.
    options = msgspec.structs.replace(app.worker, stages=None)
    config = guarded(lambda: worker_config(app.plugin, options))
    collection = checked_collection(collection)
    labels = labels_from(metadata, readers)
    expanded = expand(paths)
    files, refused = expanded.files, expanded.refused
    show = progress if progress is not None else sys.stderr.isatty()
    services = guarded(lambda: prepared_services(app, config.stages))

    async def go(dsn: str) -> IngestSummary:
        worker = Worker(pipeline_for(services), dsn, config)
        async with open_pool(dsn) as pool:
            done, more = await submit_paths(pool, services, files, force, collection, labels)
            report_refused(more)
            ids = list(dict.fromkeys(d.document_id for d in done))
            finished = await run_until_done(worker, pool, ids, show)
            summary = await final_summary(pool, ids, refused + more, finished)
            return msgspec.structs.replace(summary, copies=len(done) - len(ids))

    report_refused(refused)
    report_skipped(expanded.skipped)
    summary = guarded(lambda: app.with_database(lambda dsn: run_async(go, dsn), supervise=True))
    summary = msgspec.structs.replace(summary, skipped=expanded.skipped)
    print_summary(summary, as_json)
    if summary.interrupted:
        sys.exit(EXIT_INTERRUPTED)
    sys.exit(EXIT_FAILED if summary.failed or summary.refused or summary.unfinished else EXIT_OK)


def prepared_services(app: App, stages: Sequence[str]) -> Services:
    services = services_for(app.build_context())
    services.prepare(stages)
    return services


async def final_summary(
    pool: Pool, ids: list[uuid.UUID], refused: list[Refused], finished: bool
) -> IngestSummary:
    """The summary; when stopped during a database outage, what is known (exit 130)."""
    try:
        docs = await DocumentRepository(pool).get_many(ids)
    except CONNECTION_ERRORS:
        if finished:
            raise
        click.echo("ragline: database unavailable; the summary is unknown", err=True)
        docs = []
    return summarize(docs, refused, interrupted=not finished)


async def run_until_done(worker: Worker, pool: Pool, ids: list[uuid.UUID], show: bool) -> bool:
    """Run ``worker`` until every document in ``ids`` is ready or failed; False if stopped
    before that (Ctrl-C / SIGTERM)."""
    done = anyio.Event()
    async with anyio.create_task_group() as tg:

        async def watcher() -> None:
            await watch(pool, ids, worker.pipeline.names, show)
            done.set()
            worker.stop()

        tg.start_soon(watcher)
        await worker.run()
        tg.cancel_scope.cancel()
    return done.is_set()


def print_summary(summary: IngestSummary, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(msgspec.to_builtins(summary)))
        return
    click.echo(
        f"ready: {len(summary.ready)}  failed: {len(summary.failed)}  "
        f"unfinished: {len(summary.unfinished)}  refused: {len(summary.refused)}"
    )
    if summary.copies:
        click.echo(
            f"same content: {summary.copies} file(s) repeat another file given here; "
            "each content is ingested once, under the first name"
        )
    for d in summary.failed:
        click.echo(f"failed {escape_name(d['filename'])} ({d['document_id']}): {d['error']}")
    if summary.interrupted:
        click.echo("interrupted: run the same command again to resume", err=True)
