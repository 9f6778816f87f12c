"""The ``sync`` command: keep the index equal to a folder or an S3/MinIO bucket and prefix.

``sync SOURCE [--collection C] [--dry-run | --watch] [--allow-deletes] [--json]``: plan (a
stat per file), apply under the source's lock, then run every stage in this process until
the documents it submitted are done, with ``ingest``'s progress (see
:mod:`stages.actions.sync`). On a listing that looks like a vanished mount, a plan that
would delete every document of the source, or more than RAGLINE_SYNC_DELETE_SHARE of
them, is refused in one line (exit 1) unless ``--allow-deletes``; ``--watch`` says it
once and keeps watching.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import anyio
import click
import msgspec

from runtime.api import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    App,
    ConfigurationError,
    DocumentRepository,
    DocumentStatus,
    EnvReader,
    Pool,
    escape_name,
    guarded,
    open_pool,
    run_async,
    worker_config,
)
from stages.cli.submit import labels_from, labels_options
from stages.db import sources
from stages.ports.sources import Scanner
from stages.services import scanner_for

if TYPE_CHECKING:
    from stages.actions.sync import Plan
    from stages.services import Services

#: How many files of each kind ``--dry-run`` (and the summary) names.
SHOWN = 5
#: Seconds between polls of a bucket under ``--watch`` (RAGLINE_SYNC_POLL_S).
DEFAULT_POLL_S = 10.0
_COLLECTION = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")


class SyncReport(msgspec.Struct, kw_only=True):
    source: str
    collection: str
    dry_run: bool
    counts: dict[str, int]
    #: The first few of each kind: new, changed, moved (``old -> new``), deleted.
    files: dict[str, list[str]]
    hashed: int
    ready: int = 0
    failed: list[dict[str, Any]] = msgspec.field(default_factory=list)
    unfinished: int = 0
    refused: list[str] = msgspec.field(default_factory=list)
    #: New files already indexed as another document (one per collection): skipped.
    duplicates: list[str] = msgspec.field(default_factory=list)
    #: The line refusing the plan's deletions (a dry run says it; a sync raises it).
    deletes_refused: str | None = None
    interrupted: bool = False


def describe(plan: Plan, uri: str, collection: str, dry_run: bool) -> SyncReport:
    return SyncReport(
        source=uri,
        collection=collection,
        dry_run=dry_run,
        counts=plan.counts(),
        files={
            "new": [c.uri for c in plan.new[:SHOWN]],
            "changed": [c.uri for c in plan.changed[:SHOWN]],
            "moved": [f"{c.was} -> {c.uri}" for c in plan.moved[:SHOWN]],
            "deleted": [c.uri for c in plan.deleted[:SHOWN]],
            "adopted": [c.uri for c in plan.adopted[:SHOWN]],
        },
        hashed=plan.hashed,
        refused=list(plan.skipped),
        duplicates=list(plan.duplicates),
    )


def print_report(report: SyncReport, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(msgspec.to_builtins(report)))
    else:
        print_summary(report)
    for r in report.refused:
        click.echo(f"refused {r}", err=True)
    for d in report.duplicates:
        click.echo(f"skipped {d}", err=True)
    if report.deletes_refused:
        click.echo(f"ragline: {report.deletes_refused}", err=True)


def print_summary(report: SyncReport) -> None:
    c = report.counts
    head = "dry run: would sync" if report.dry_run else "synced"
    click.echo(
        f"{head} {escape_name(report.source)} (collection {report.collection}): "
        f"new {c['new']}, changed {c['changed']}, moved {c['moved']}, "
        f"deleted {c['deleted']}, adopted {c['adopted']}, unchanged {c['unchanged']}"
    )
    for kind, names in report.files.items():
        more = c[kind] - len(names)
        for name in names:
            click.echo(f"  {kind} {escape_name(name)}")
        if more > 0:
            click.echo(f"  ... and {more} more {kind}")
    if not report.dry_run:
        click.echo(
            f"ready: {report.ready}  failed: {len(report.failed)}  "
            f"unfinished: {report.unfinished}  refused: {len(report.refused)}"
        )
    for f in report.failed:
        click.echo(f"failed {escape_name(f['filename'])} ({f['document_id']}): {f['error']}")


def exit_code(report: SyncReport) -> int:
    if report.interrupted:
        return EXIT_INTERRUPTED
    failing = report.failed or report.refused or report.unfinished or report.deletes_refused
    return EXIT_FAILED if failing else EXIT_OK


class DeletesPolicy(msgspec.Struct, frozen=True):
    """``--allow-deletes``, and the share of a source's documents a sync may delete on
    a listing that looks like a vanished mount (RAGLINE_SYNC_DELETE_SHARE)."""

    allowed: bool = False
    share: float = 0.5


class SourceLabels(msgspec.Struct, frozen=True, kw_only=True):
    """``--meta`` / ``--readers`` / ``--everyone`` of a sync: what the source gives its
    documents from now on (each given part replaces the source's; the others stay)."""

    metadata: dict[str, Any] | None = None
    readers: tuple[str, ...] | None = None
    everyone: bool = False

    async def give(self, pool: Pool, source: sources.Source) -> None:
        metadata = self.metadata
        if metadata is None:
            metadata = msgspec.json.decode(source.metadata)
        readers = None if self.everyone else self.readers
        if readers is None and not self.everyone:
            readers = None if source.readers is None else tuple(source.readers)
        await sources.label_source(pool, source.id, metadata, readers)


def source_labels(
    metadata: Sequence[str], readers: str | None, everyone: bool
) -> SourceLabels | None:
    """The labels a sync was told (None: none); a bad one is one line and exit 2."""
    if everyone and readers is not None:
        raise click.UsageError("give --readers or --everyone, not both")
    if not metadata and readers is None and not everyone:
        return None
    given = labels_from(metadata, readers)
    return SourceLabels(
        metadata=dict(given.metadata) if given.metadata else None,
        readers=given.readers,
        everyone=everyone,
    )


class Syncer:
    """One source, one process: each :meth:`once` plans, applies and processes."""

    def __init__(
        self,
        app: App,
        scanner: Scanner,
        show: bool,
        deletes: DeletesPolicy | None = None,
        labels: SourceLabels | None = None,
    ) -> None:
        self.app = app
        self.scanner = scanner
        self.show = show
        self.deletes = deletes or DeletesPolicy()
        #: What the source is to give its documents, when the command said (None: as is).
        self.labels = labels
        self._services: Services | None = None
        #: The refusal ``--watch`` said last.
        self._said: str | None = None

    @property
    def services(self) -> Services:
        if self._services is None:
            from stages.services import services_for

            self._services = services_for(self.app.build_context())
        return self._services

    async def dry_run(self, pool: Pool, collection: str | None) -> SyncReport:
        from stages.actions.sync import plan

        source = await sources.find_source(pool, self.scanner.uri)
        if source is not None:
            check_vector_collection(source, collection)
        name = source.collection if source else (collection or "default")
        todo = await plan(pool, self.scanner, source, name)
        report = describe(todo, self.scanner.uri, name, dry_run=True)
        report.deletes_refused = self._refusal(todo)
        return report

    def _refusal(self, todo: Plan) -> str | None:
        from stages.actions.sync import deletes_refusal

        if self.deletes.allowed:
            return None
        return deletes_refusal(todo, self.scanner.uri, self.deletes.share)

    async def once(self, pool: Pool, dsn: str, collection: str | None) -> SyncReport:
        from stages.actions.sync import DeletesRefused, Outcome, apply, plan

        source = await sources.ensure_source(pool, self.scanner.uri, collection or "default")
        check_vector_collection(source, collection)
        async with sources.source_lock(pool, source.id):
            if self.labels is not None:
                await self.labels.give(pool, source)
            todo = await plan(pool, self.scanner, source, source.collection)
            refusal = self._refusal(todo)
            if refusal is not None:  # nothing applied, the device not recorded
                raise DeletesRefused(refusal)
            outcome = Outcome()
            if not todo.empty:
                async with self.services.lifespan():
                    with applying(todo, self.show) as step:
                        outcome = await apply(pool, self.services, self.scanner, source, todo, step)
            else:  # a stat per file and one query: no services, no imports
                await sources.mark_synced(pool, source.id, todo.device)
        report = describe(todo, source.uri, source.collection, dry_run=False)
        report.refused += outcome.refused
        report.duplicates += outcome.duplicates
        # This sync's documents, and any of the source's an earlier (killed) one left.
        ids = list(dict.fromkeys([*outcome.submitted, *await sources.unfinished(pool, source.id)]))
        finished = True
        if ids:
            async with self.services.lifespan():
                finished = await self._process(pool, dsn, ids)
        await self._summarize(pool, ids, report, finished)
        return report

    async def keep_syncing(
        self,
        pool: Pool,
        dsn: str,
        collection: str | None,
        changes: Changes,
        poll_s: float,
        as_json: bool,
    ) -> SyncReport:
        """``--watch``: a sync, then another on each change (or every ``poll_s``), each
        report printed, until one is interrupted."""
        while True:
            report = await self.watched(pool, dsn, collection)
            if report is not None:
                if report.interrupted:
                    return report
                print_report(report, as_json)
            await changes.wait(poll_s)

    async def watched(self, pool: Pool, dsn: str, collection: str | None) -> SyncReport | None:
        """:meth:`once` under ``--watch``: a refusal to delete is said once (until it
        changes) and the watch goes on (the disk may come back); None then."""
        from stages.actions.sync import DeletesRefused

        try:
            report = await self.once(pool, dsn, collection)
        except DeletesRefused as exc:
            if exc.message != self._said:
                click.echo(f"ragline: {exc.message}", err=True)
                self._said = exc.message
            return None
        self._said = None
        return report

    async def _process(self, pool: Pool, dsn: str, ids: list[uuid.UUID]) -> bool:
        from runtime.api import Worker
        from stages.cli.ingest import run_until_done
        from stages.pipeline import pipeline_for

        # Like ingest: every stage runs here, whatever RAGLINE_STAGES says.
        options = msgspec.structs.replace(self.app.worker, stages=None)
        config = worker_config(self.app.plugin, options)
        self.services.prepare(config.stages)
        worker = Worker(pipeline_for(self.services), dsn, config)
        return await run_until_done(worker, pool, ids, self.show)

    @staticmethod
    async def _summarize(
        pool: Pool, ids: list[uuid.UUID], report: SyncReport, finished: bool
    ) -> None:
        docs = await DocumentRepository(pool).get_many(ids)
        report.ready = sum(d.status == DocumentStatus.READY for d in docs)
        report.failed = [
            {"document_id": str(d.id), "filename": d.filename, "error": d.error}
            for d in docs
            if d.status == DocumentStatus.FAILED
        ]
        report.unfinished = len(docs) - report.ready - len(report.failed)
        report.interrupted = not finished


@contextlib.contextmanager
def applying(todo: Plan, show: bool) -> Iterator[Callable[[], None]]:
    """A progress bar over the files being stored, moved or removed (before the stages'
    bars: a first sync of a large folder stores every file first)."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    total = len(todo.new) + len(todo.changed) + len(todo.moved) + len(todo.deleted)
    total += len(todo.adopted) + len(todo.merged)
    bar = Progress(
        TextColumn("{task.description:>7}"),
        BarColumn(),
        MofNCompleteColumn(),
        console=Console(stderr=True),
        disable=not show,
    )
    task = bar.add_task("sync", total=total)
    with bar:
        yield lambda: bar.advance(task)


def check_vector_collection(source: sources.Source, wanted: str | None) -> None:
    if wanted is not None and wanted != source.collection:
        raise ConfigurationError(
            f"sync: {escape_name(source.uri)} is synced into collection {source.collection!r},"
            f" not {wanted!r} (a source maps to one collection)"
        )


class Changes:
    """Whether the source changed since the last :meth:`wait`: the folder's watcher runs
    all the time (also during a sync), so no change made meanwhile is missed."""

    def __init__(self) -> None:
        self._event = anyio.Event()

    def set(self) -> None:
        self._event.set()

    async def wait(self, timeout_s: float) -> None:
        """Until a change, and at the latest ``timeout_s`` (a bucket is polled)."""
        with anyio.move_on_after(timeout_s):
            await self._event.wait()
        self._event = anyio.Event()

    async def watch(self, scanner: Scanner) -> None:
        if scanner.uri.startswith("s3://"):
            return
        import watchfiles

        async for _batch in watchfiles.awatch(scanner.uri, recursive=True):
            self.set()


def poll_s_from_env() -> float:
    from stages.settings import PIPELINE_SETTINGS

    return EnvReader(os.environ, PIPELINE_SETTINGS).number("RAGLINE_SYNC_POLL_S", DEFAULT_POLL_S)


def deletes_policy(allowed: bool) -> DeletesPolicy:
    from stages.actions.sync import DEFAULT_DELETE_SHARE
    from stages.settings import PIPELINE_SETTINGS

    read = EnvReader(os.environ, PIPELINE_SETTINGS)
    return DeletesPolicy(
        allowed=allowed, share=read.number("RAGLINE_SYNC_DELETE_SHARE", DEFAULT_DELETE_SHARE)
    )


@click.command("sync")
@click.argument("source")
@click.option("--collection", default=None, help="Collection of the source's documents.")
@click.option("--dry-run", is_flag=True, help="Print the plan (counts, first few) only.")
@click.option(
    "--watch",
    is_flag=True,
    help="Keep syncing: on change (folders) or by polling (not with --dry-run).",
)
@click.option(
    "--allow-deletes",
    is_flag=True,
    help="Delete the documents of missing files even when the source looks unmounted "
    "(empty, no file left, or its folder on another device than at the last sync) and "
    "that is all of them or more than RAGLINE_SYNC_DELETE_SHARE of them.",
)
@labels_options
@click.option(
    "--everyone", is_flag=True, help="Every caller may read the source's documents again."
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--progress/--no-progress", default=None, help="Progress bars per stage.")
@click.pass_context
def sync(
    ctx: click.Context,
    source: str,
    collection: str | None,
    dry_run: bool,
    watch: bool,
    allow_deletes: bool,
    metadata: tuple[str, ...],
    readers: str | None,
    everyone: bool,
    as_json: bool,
    progress: bool | None,
) -> None:
    """Make the index equal SOURCE, a folder or s3://bucket/prefix, for its files named
    as a format ragline reads (.pdf, .docx, .epub, .md, .html, .txt...; each detected from
    its content): new files are submitted, changed ones become a new version of their
    document (the old one serves until the new one is indexed), renamed ones keep their
    document (no stage runs), deleted ones leave the index and the asset store; a file
    whose bytes are already a document of the collection adopts it (submitted) or is
    skipped (another source's). FIFOs, sockets, devices and unreadable folders are
    skipped with one line each. When the source looks unmounted, deleting all or most
    of its documents is refused unless --allow-deletes. --meta and --readers say what
    the source gives its documents (remembered: later syncs give new files the same, and
    a sync told new ones sets them on every document of the source). Exit 0: all ready; 1: something
    failed or was refused; 2: usage; 3: the source (or the database) unreachable; 130:
    interrupted."""
    app: App = ctx.obj
    if collection is not None and not _COLLECTION.fullmatch(collection):
        raise click.BadParameter("lowercase letters, digits, _ and -", param_hint="--collection")
    if watch and dry_run:
        click.echo(
            "ragline: sync: --watch and --dry-run do not go together (a dry run changes "
            "nothing to watch for); run the dry run alone",
            err=True,
        )
        sys.exit(EXIT_USAGE)
    scanner = guarded(lambda: scanner_for(source, os.environ))
    show = progress if progress is not None else sys.stderr.isatty()
    labels = source_labels(metadata, readers, everyone)
    syncer = Syncer(app, scanner, show, deletes_policy(allow_deletes), labels)
    poll_s = poll_s_from_env()

    async def go(dsn: str) -> SyncReport:
        async with open_pool(dsn) as pool:
            if dry_run:
                return await syncer.dry_run(pool, collection)
            if not watch:
                return await syncer.once(pool, dsn, collection)
            changes = Changes()
            async with anyio.create_task_group() as tg:
                tg.start_soon(changes.watch, scanner)
                report = await syncer.keep_syncing(pool, dsn, collection, changes, poll_s, as_json)
                tg.cancel_scope.cancel()
            return report

    try:
        report = guarded(lambda: app.with_database(lambda dsn: run_async(go, dsn), supervise=True))
    except KeyboardInterrupt:
        sys.exit(EXIT_INTERRUPTED)
    print_report(report, as_json)
    sys.exit(exit_code(report))
