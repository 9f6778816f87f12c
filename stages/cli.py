"""The pipeline's commands for what is already in: search, reprocess, delete, verify.

They run under ``python -m runtime`` (the engine's CLI loads them through the plugin,
``stages.app``, with ``submit`` and ``ingest``) and share its global options: database,
data dir, log format, worker flags.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

import click
import msgspec

from runtime.api import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    App,
    DocumentRepository,
    MissingInput,
    escape_name,
    guarded,
    json_option,
    open_pool,
    parse_ids,
    run_async,
)
from stages import store
from stages.pipeline import STAGES, services_for

if TYPE_CHECKING:
    from stages.verify import Report


@click.command()
@click.argument("query")
@click.option("--limit", "-k", default=5, show_default=True, help="How many chunks to show.")
@json_option
@click.pass_obj
def search(app: App, query: str, limit: int, as_json: bool) -> None:
    """Embed QUERY with the configured embedder and print the closest chunks."""
    check_query(query, limit)

    async def go() -> list[dict[str, Any]]:
        services = services_for(app.build_context())
        async with services.lifespan():
            [vector] = await services.embedder.embed([query], "search_query")
            try:
                hits = await services.index.search(services.collection, vector, limit)
            except MissingInput:  # nothing indexed yet with this embedding model
                hits = []
        return [{"score": round(h.score, 4), **h.payload} for h in hits]

    # The index and the embedder answer this; PostgreSQL is not needed.
    hits = guarded(lambda: run_async(go))
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


@click.command()
@click.argument("documents", nargs=-1)
@click.option(
    "--from",
    "from_stage",
    required=True,
    type=click.Choice(STAGES),
    help="First stage to run again; earlier stages' checkpoints are reused.",
)
@click.option("--all", "all_docs", is_flag=True, help="Every document.")
@click.option("--model", help="Documents with chunks that have no vector for this model.")
@json_option
@click.pass_obj
def reprocess(
    app: App,
    documents: tuple[str, ...],
    from_stage: str,
    all_docs: bool,
    model: str | None,
    as_json: bool,
) -> None:
    """Run documents again from a stage: bumps their generation, cancels live jobs of the
    old one and reuses the checkpoints of the stages before it."""
    ids = parse_ids(documents)
    if sum(bool(x) for x in (ids, all_docs, model)) != 1:
        raise click.UsageError("give document ids, --all or --model (one of them)")

    async def go(dsn: str) -> list[dict[str, Any]]:
        async with open_pool(dsn) as pool:
            docs = DocumentRepository(pool)
            targets = ids or (
                await docs.all_ids()
                if all_docs
                else await store.documents_missing_model(pool, model or "")
            )
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
@json_option
@click.pass_obj
def delete(app: App, documents: tuple[str, ...], as_json: bool) -> None:
    """Delete documents: their rows, stored files and points in the vector index."""
    ids = parse_ids(documents)

    async def go(dsn: str) -> list[str]:
        from stages.assets import document_prefix
        from stages.verify import delete_everywhere

        services = services_for(app.build_context())
        async with services.lifespan(), open_pool(dsn) as pool:
            docs = DocumentRepository(pool)
            found = [d.id for d in await docs.get_many(ids)]
            for doc_id in found:
                # Stop workers first (new generation), then remove what lives outside.
                await docs.reprocess(doc_id, STAGES[0], max_attempts=1)
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
@json_option
@click.pass_obj
def verify_cmd(app: App, repair: bool, as_json: bool) -> None:
    """Reconcile chunks in PostgreSQL with the vector index and the asset store.

    Reports missing, extra (duplicate or orphan) and stale-generation points and missing
    files per document. Exit 0 when clean, 1 when something was found.
    """

    async def go(dsn: str) -> Report:
        from stages import verify as verify_mod

        services = services_for(app.build_context())
        async with services.lifespan(), open_pool(dsn) as pool:
            report = await verify_mod.verify(pool, services)
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
