"""The pipeline's commands: submit, ingest, search, delete, verify.

They run under ``python -m runtime`` (the engine's CLI loads them through the plugin) and
share its global options: database, data dir, log format, worker flags.
"""

from __future__ import annotations

import glob
import json
import sys
import uuid
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import asyncpg
import click
import msgspec

from runtime.cli import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    App,
    guarded,
    run_async,
    worker_config,
)
from runtime.commands import parse_ids
from runtime.database import open_pool
from runtime.dberrors import CONNECTION_ERRORS, is_storage_full
from runtime.documents import DocumentRepository
from runtime.errors import RaglineError, StorageFull, one_line
from runtime.models import Document, DocumentStatus
from runtime.names import escape_name
from runtime.repository import Pool
from runtime.worker import Worker
from stages import store
from stages.model_cli import MODEL_COMMANDS
from stages.pipeline import pipeline_for, services_for
from stages.progress import watch

# The services pull in PyMuPDF, onnxruntime, qdrant-client and minio (seconds of imports):
# commands import them when they run, so `--help` and `status` stay quick.
if TYPE_CHECKING:
    from stages.services import Services
    from stages.verify import Report

json_option = click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
collection_option = click.option(
    "--collection",
    default="default",
    show_default=True,
    help="The collection (tenant) the documents belong to.",
)
scope_option = click.option(
    "--collection", default=None, help="Only this collection's documents [default: all]."
)
force_option = click.option(
    "--force", is_flag=True, help="Submit again even if the same bytes are already there."
)


def checked_collection(name: str) -> str:
    """A valid collection name, or one line and exit 2."""
    from stages.collections import check_collection_name

    return guarded(lambda: check_collection_name(name))


class Refused(msgspec.Struct, frozen=True):
    path: str
    reason: str


class SubmitResult(msgspec.Struct, frozen=True):
    path: str
    document_id: uuid.UUID
    created: bool


def expand(paths: Sequence[str]) -> tuple[list[Path], list[Refused]]:
    """Files as given, PDFs found in directories (recursively), globs expanded."""
    files: list[Path] = []
    refused: list[Refused] = []
    for raw in paths:
        matches = sorted(glob.glob(raw, recursive=True)) if glob.has_magic(raw) else [raw]
        if not matches:
            refused.append(Refused(escape_name(raw), "no file matches"))
        for match in matches:
            path = Path(match)
            if path.is_dir():
                found, dangling = pdfs_under(path)
                files.extend(found)
                refused.extend(dangling)
            elif path.is_file():
                files.append(path)
            elif path.is_symlink():
                refused.append(Refused(escape_name(match), DANGLING))
            else:
                refused.append(Refused(escape_name(raw), "no such file or directory"))
    return files, refused


DANGLING = "symbolic link to a file that does not exist"


def pdfs_under(directory: Path) -> tuple[list[Path], list[Refused]]:
    """The PDFs below ``directory``, and a refusal per dangling ``*.pdf`` symlink."""
    candidates = sorted(p for p in directory.rglob("*") if p.suffix.lower() == ".pdf")
    found = [p for p in candidates if p.is_file()]
    dangling = [
        Refused(escape_name(str(p)), DANGLING)
        for p in candidates
        if p.is_symlink() and not p.exists()
    ]
    return found, dangling


async def submit_paths(
    pool: Pool,
    services: Services,
    files: Iterable[Path],
    force: bool,
    collection: str = "default",
) -> tuple[list[SubmitResult], list[Refused]]:
    from stages.submit import submit as submit_one

    done: list[SubmitResult] = []
    refused: list[Refused] = []
    for path in files:
        shown = escape_name(str(path))
        try:
            result = await submit_one(
                pool, services.assets, path, force=force, collection=collection
            )
        except RaglineError as exc:
            refused.append(Refused(shown, exc.message))
            continue
        except asyncpg.DataError as exc:  # this file's data, not the others'
            refused.append(Refused(shown, one_line(f"{type(exc).__name__}: {exc}")))
            continue
        except OSError as exc:
            if not is_storage_full(exc):
                raise
            # The next file would not fit either: stop here, saying what went in.
            raise StorageFull(
                one_line(
                    f"storage full while storing {shown}: {exc.strerror or exc}; "
                    f"{len(done)} file(s) submitted before it, the rest not"
                )
            ) from exc
        done.append(SubmitResult(shown, result.document_id, result.created))
    return done, refused


def report_refused(refused: Sequence[Refused]) -> None:
    for r in refused:
        click.echo(f"refused {r.path}: {r.reason}", err=True)


@click.command()
@click.argument("paths", nargs=-1, required=True)
@force_option
@collection_option
@json_option
@click.pass_obj
def submit(app: App, paths: tuple[str, ...], force: bool, collection: str, as_json: bool) -> None:
    """Store PDFs and queue them for processing (files, directories, globs).

    A file that is not a PDF or cannot be read is refused with one line; the rest go in.
    Exit 0 when everything went in, 1 when something was refused.
    """
    collection = checked_collection(collection)
    files, refused = expand(paths)

    async def go(dsn: str) -> tuple[list[SubmitResult], list[Refused]]:
        services = services_for(app.build_context())
        async with services.lifespan(), open_pool(dsn) as pool:
            return await submit_paths(pool, services, files, force, collection)

    done, more = guarded(lambda: app.with_database(lambda dsn: run_async(go, dsn)))
    refused = refused + more
    if as_json:
        click.echo(
            json.dumps(
                {"submitted": msgspec.to_builtins(done), "refused": msgspec.to_builtins(refused)}
            )
        )
    else:
        for d in done:
            click.echo(f"{'submitted' if d.created else 'already there'} {d.path} {d.document_id}")
    report_refused(refused)
    sys.exit(EXIT_FAILED if refused else EXIT_OK)


class IngestSummary(msgspec.Struct, kw_only=True):
    ready: list[dict[str, Any]]
    failed: list[dict[str, Any]]
    unfinished: list[dict[str, Any]]
    refused: list[Refused]
    interrupted: bool


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
@json_option
@click.option(
    "--progress/--no-progress",
    default=None,
    help="Progress bars per stage [default: when stderr is a terminal].",
)
@click.pass_context
def ingest(
    ctx: click.Context,
    paths: tuple[str, ...],
    force: bool,
    collection: str,
    as_json: bool,
    progress: bool | None,
) -> None:
    """Submit PDFs, then run every stage in this process until they are done.

    Shows progress per stage and ends with a summary: ready, failed (with the stage and
    the reason). Ctrl-C stops cleanly; running the same command again resumes where it
    stopped and redoes nothing that finished. Exit 0: all ready; 1: some failed or were
    refused; 130: interrupted.
    """
    app: App = ctx.obj
    opts = ctx.find_root().meta["worker_opts"]
    # ingest runs every stage itself, whatever RAGLINE_STAGES says (that is for worker
    # mode): serving only some would wait forever for the others.
    config = guarded(lambda: worker_config(app, {**opts, "stages": None}))
    collection = checked_collection(collection)
    files, refused = expand(paths)
    show = progress if progress is not None else sys.stderr.isatty()
    services = guarded(lambda: prepared_services(app, config.stages))

    async def go(dsn: str) -> IngestSummary:
        worker = Worker(pipeline_for(services), dsn, config)
        async with open_pool(dsn) as pool:
            done, more = await submit_paths(pool, services, files, force, collection)
            report_refused(more)
            ids = list(dict.fromkeys(d.document_id for d in done))
            finished = await run_until_done(worker, pool, ids, show)
            return await final_summary(pool, ids, refused + more, finished)

    report_refused(refused)
    summary = guarded(lambda: app.with_database(lambda dsn: run_async(go, dsn), supervise=True))
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
    for d in summary.failed:
        click.echo(f"failed {escape_name(d['filename'])} ({d['document_id']}): {d['error']}")
    if summary.interrupted:
        click.echo("interrupted: run the same command again to resume", err=True)


@click.command()
@click.argument("query")
@click.option("--limit", "-k", default=5, show_default=True, help="How many chunks to show.")
@scope_option
@json_option
@click.pass_obj
def search(app: App, query: str, limit: int, collection: str | None, as_json: bool) -> None:
    """Embed QUERY with the live embedding model and print the closest chunks (of one
    collection with --collection)."""
    check_query(query, limit)
    tenant = None if collection is None else checked_collection(collection)

    async def go(dsn: str) -> list[dict[str, Any]]:
        from stages.model_switch import search_live

        services = services_for(app.build_context())
        async with services.lifespan(), open_pool(dsn) as pool:
            # PostgreSQL names the live model and collection (a model switch moves them).
            live, hits = await search_live(pool, services, query, limit, tenant)
        return [
            {"score": round(h.score, 4), **h.payload, "vector_collection": live.collection}
            for h in hits
        ]

    hits = guarded(lambda: app.with_database(lambda dsn: run_async(go, dsn)))
    if as_json:
        click.echo(json.dumps(hits))
        return
    if not hits:
        click.echo("no results (nothing indexed with this embedding model yet?)", err=True)
    for h in hits:
        text = " ".join(str(h.get("text", "")).split())
        click.echo(
            f"{h['score']:.3f}  {escape_name(str(h.get('filename')))}  p.{h.get('page_start')}"
            f"-{h.get('page_end')}  {h.get('document_id')}\n    {text[:200]}"
        )


#: ``search -k`` beyond this is a typo, not a question.
MAX_RESULTS = 1000


def check_query(query: str, limit: int) -> None:
    """One line and exit 2 for what cannot be a search (before loading any model)."""
    problem = None
    if not 1 <= limit <= MAX_RESULTS:
        problem = f"-k/--limit must be from 1 to {MAX_RESULTS}, got {limit}"
    elif not query.strip():
        problem = "the query is empty"
    else:
        try:
            query.encode("utf-8")
        except UnicodeEncodeError:
            problem = f"the query is not valid UTF-8: {escape_name(query)}"
    if problem:
        click.echo(f"ragline: search: {problem}", err=True)
        sys.exit(EXIT_USAGE)


COMMANDS: list[click.Command] = [submit, ingest, search]


@click.command()
@click.argument("documents", nargs=-1)
@click.option(
    "--from",
    "from_stage",
    required=True,
    type=click.Choice(["parse", "chunk", "vision", "embed", "index"]),
    help="First stage to run again; earlier stages' checkpoints are reused.",
)
@click.option("--all", "all_docs", is_flag=True, help="Every document (of --collection).")
@click.option(
    "--model",
    help="With --from embed: switch to this embedding model (as migrate-model); "
    "otherwise: documents with chunks that have no vector for this model.",
)
@scope_option
@json_option
@click.pass_context
def reprocess(
    ctx: click.Context,
    documents: tuple[str, ...],
    from_stage: str,
    all_docs: bool,
    model: str | None,
    collection: str | None,
    as_json: bool,
) -> None:
    """Run documents again from a stage: bumps their generation, cancels live jobs of the
    old one and reuses the checkpoints of the stages before it."""
    app: App = ctx.obj
    ids = parse_ids(documents)
    if sum(bool(x) for x in (ids, all_docs, model)) != 1:
        raise click.UsageError("give document ids, --all or --model (one of them)")
    if model and from_stage == "embed":
        from stages.model_cli import migrate_model

        ctx.invoke(migrate_model, model=model, as_json=as_json)
        return
    tenant = None if collection is None else checked_collection(collection)

    async def go(dsn: str) -> list[dict[str, Any]]:
        async with open_pool(dsn) as pool:
            docs = DocumentRepository(pool)
            targets = ids or (
                await docs.all_ids(tenant)
                if all_docs
                else await store.documents_missing_model(pool, model or "")
            )
            if tenant is not None:  # only that collection's documents
                targets = [d.id for d in await docs.get_many(targets) if d.collection == tenant]
            out = []
            for doc_id in targets:
                generation = await docs.reprocess(doc_id, from_stage)
                out.append({"document_id": str(doc_id), "generation": generation})
            return out

    result = guarded(lambda: app.with_database(lambda dsn: run_async(go, dsn)))
    missing = [r["document_id"] for r in result if r["generation"] is None]
    if as_json:
        click.echo(json.dumps(result))
    else:
        click.echo(f"reprocessing {len(result) - len(missing)} document(s) from {from_stage}")
    for m in missing:
        click.echo(f"ragline: no document {m}", err=True)
    sys.exit(EXIT_FAILED if missing else EXIT_OK)


@click.command()
@click.argument("documents", nargs=-1, required=True)
@scope_option
@json_option
@click.pass_obj
def delete(app: App, documents: tuple[str, ...], collection: str | None, as_json: bool) -> None:
    """Delete documents: their rows, stored files and points in the vector index (with
    --collection, only documents of that collection; others count as not found)."""
    ids = parse_ids(documents)
    tenant = None if collection is None else checked_collection(collection)

    async def go(dsn: str) -> list[str]:
        from stages.assets import document_prefix
        from stages.verify import delete_everywhere

        services = services_for(app.build_context())
        async with services.lifespan(), open_pool(dsn) as pool:
            docs = DocumentRepository(pool)
            found = [d.id for d in await docs.get_many(ids) if tenant in (None, d.collection)]
            for doc_id in found:
                # Stop workers first (new generation), then remove what lives outside.
                await docs.reprocess(doc_id, "parse", max_attempts=1)
                await docs.delete([doc_id])
                await delete_everywhere(services, doc_id)  # every model's collection
                await services.assets.delete_prefix(document_prefix(doc_id))
            return [str(i) for i in found]

    deleted = guarded(lambda: app.with_database(lambda dsn: run_async(go, dsn)))
    missing = [str(i) for i in ids if str(i) not in deleted]
    if as_json:
        click.echo(json.dumps({"deleted": deleted, "missing": missing}))
    else:
        click.echo(f"deleted {len(deleted)} document(s)")
    for m in missing:
        click.echo(f"ragline: no document {m}", err=True)
    sys.exit(EXIT_FAILED if missing else EXIT_OK)


@click.command("verify")
@click.option("--repair", is_flag=True, help="Enqueue the jobs that fix what is found.")
@scope_option
@json_option
@click.pass_obj
def verify_cmd(app: App, repair: bool, collection: str | None, as_json: bool) -> None:
    """Reconcile chunks in PostgreSQL with the vector index and the asset store.

    Reports missing, extra (duplicate or orphan) and stale-generation points and missing
    files per document. Exit 0 when clean, 1 when something was found.
    """

    tenant = None if collection is None else checked_collection(collection)

    async def go(dsn: str) -> Report:
        from stages import verify as verify_mod

        services = services_for(app.build_context())
        async with services.lifespan(), open_pool(dsn) as pool:
            report = await verify_mod.verify(pool, services, tenant)
            if repair:
                await verify_mod.repair(pool, services, report)
            return report

    report = guarded(lambda: app.with_database(lambda dsn: run_async(go, dsn)))
    if as_json:
        click.echo(json.dumps(msgspec.to_builtins(report)))
    else:
        click.echo(
            f"{report.documents} document(s), {report.points} point(s), "
            f"{len(report.problems) + len(report.settled_store)} problem(s)"
        )
        for p in report.problems:
            click.echo(
                f"  {p.document_id} {escape_name(p.filename)}: missing {p.missing_points}, "
                f"extra {p.extra_points}, stale {p.stale_points}, "
                f"files missing {len(p.missing_files)}"
                + (f", {p.failed_points} point(s) of a failed document" if p.failed_points else "")
                + (f", points in {','.join(p.other_collections)}" if p.other_collections else "")
                + (" (orphan)" if p.orphan else "")
                + (f" -> {p.repair}" if p.repair else "")
            )
        for sp in report.store:
            click.echo(
                f"  asset store: {sp.kind} {escape_name(sp.path)} ({sp.age_s:.0f} s old"
                + (", recent: may be a write in flight)" if sp.recent else ")")
                + (f" -> {sp.repair}" if sp.repair else "")
            )
    sys.exit(EXIT_OK if report.clean else EXIT_FAILED)


COMMANDS.extend([reprocess, delete, verify_cmd])
COMMANDS.extend(MODEL_COMMANDS)
