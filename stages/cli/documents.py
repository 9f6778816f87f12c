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
    MissingInput,
    escape_name,
    guarded,
    json_option,
    open_pool,
    parse_refs,
    resolve_refs,
    run_async,
)
from stages.actions import documents as actions
from stages.actions.documents import Deleted, Reprocessing
from stages.actions.metadata import check_principals
from stages.actions.search import MODES, Answers, Filters, Mode, filters_of
from stages.actions.search import search as run_search
from stages.cli.filters import filter_options, filters_from
from stages.cli.models import checked_collection, migrate_model, scope_option
from stages.db import search as search_db
from stages.pipeline import STAGES
from stages.services import services_for

if TYPE_CHECKING:
    from stages.actions.verify import Report


@click.command()
@click.argument("query")
@click.option("--limit", "-k", default=5, show_default=True, help="How many chunks to show.")
@click.option(
    "--mode",
    type=click.Choice(MODES),
    default=MODES[0],
    show_default=True,
    help="hybrid: keywords (BM25) and meaning (the embedding) fused; dense: the embedding "
    "alone; keyword: the words alone (exact identifiers, error codes).",
)
@scope_option
@filter_options
@click.option(
    "--as",
    "principals",
    multiple=True,
    metavar="PRINCIPAL",
    help="Search as a caller with this principal would (repeat): only documents it may "
    "read. Without it, every document (the operator's view).",
)
@json_option
@click.pass_obj
def search(
    app: App,
    /,
    query: str,
    limit: int,
    mode: Mode,
    collection: str | None,
    principals: tuple[str, ...],
    as_json: bool,
    **filters: Any,
) -> None:
    """Search the index for QUERY and print the best chunks, as PostgreSQL has them now
    (the current file name, only documents ready at their indexed version; of one
    collection with --collection). The filter options narrow it: all must hold."""
    within = filters_from(filters)
    caller = guarded(lambda: check_principals(principals)) if principals else None
    check_query(query, limit)
    tenant = None if collection is None else checked_collection(collection)

    async def go(dsn: str) -> Answers:
        services = services_for(app.build_context())
        async with services.lifespan(), open_pool(dsn) as pool:
            # PostgreSQL names the live model and collection (a model switch moves them).
            return await run_search(
                pool, services, query, limit, mode=mode, collection=tenant, filters=within,
                principals=caller,
            )  # fmt: skip

    found = guarded(lambda: app.with_database(lambda dsn: run_async(go, dsn)))
    if found.note:  # a reranker is configured but did not answer: fused order
        click.echo(f"ragline: search: {found.note}", err=True)
    if as_json:
        where = {
            "vector_collection": found.vector_collection,
            "mode": found.mode,
            "reranked": found.reranked,
        }
        click.echo(json.dumps([{**msgspec.to_builtins(h), **where} for h in found.hits]))
        return
    if not found.hits:
        click.echo(f"no results ({_why_none(within, tenant, caller)})", err=True)
    for h in found.hits:
        text = " ".join(h.text.split())
        # Formats without pages: "p." counts sections, and the section label follows.
        section = f" · {escape_name(h.section)}" if h.section else ""
        click.echo(
            f"{h.score:.3f}  {escape_name(h.filename)}  p.{h.page_start}-{h.page_end}"
            f"{section}  {h.document_id}\n    {text[:200]}"
        )


def _why_none(within: Filters, tenant: str | None, caller: object) -> str:
    """What an empty answer most likely means: the filters left nothing, or nothing is
    indexed yet."""
    narrowed = [
        *(["filters"] if within != Filters() else []),
        *(["--collection"] if tenant is not None else []),
        *(["--as"] if caller is not None else []),
    ]
    if narrowed:
        return f"no chunk matches the query within {', '.join(narrowed)}"
    return "nothing indexed with this embedding model yet?"


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
    old one and reuses the checkpoints of the stages before it.

    DOCUMENTS: ids, or file names that are one document's each (of --collection)."""
    app: App = ctx.obj
    refs = parse_refs(documents)
    if sum(bool(x) for x in (refs, all_docs, model)) != 1:
        raise click.UsageError("give documents (ids or file names), --all or --model (one of them)")
    if model and from_stage == "embed":
        ctx.invoke(migrate_model, model=model, as_json=as_json)
        return
    tenant = None if collection is None else checked_collection(collection)

    async def go(dsn: str) -> Reprocessing:
        async with open_pool(dsn) as pool:
            ids = await resolve_refs(pool, refs, tenant)
            return await actions.reprocess(
                pool, from_stage, ids=ids, every=all_docs, missing_model=model, collection=tenant
            )

    result = guarded(lambda: app.with_database(lambda dsn: run_async(go, dsn)))
    if as_json:  # a missing document has a null generation
        gone = [{"document_id": str(m), "generation": None} for m in result.missing]
        click.echo(json.dumps([*msgspec.to_builtins(result.reprocessing), *gone]))
    else:
        click.echo(f"reprocessing {len(result.reprocessing)} document(s) from {from_stage}")
    for m in result.missing:
        click.echo(f"ragline: no document {m}", err=True)
    sys.exit(EXIT_FAILED if result.missing else EXIT_OK)


@click.command()
@click.argument("documents", nargs=-1, required=True)
@scope_option
@json_option
@click.pass_obj
def delete(app: App, documents: tuple[str, ...], collection: str | None, as_json: bool) -> None:
    """Delete documents: their rows, stored files and points in the vector index (with
    --collection, only documents of that collection; others count as not found).

    DOCUMENTS: ids, or file names that are one document's each (a name that is several
    documents' is refused, with their ids)."""
    refs = parse_refs(documents)
    tenant = None if collection is None else checked_collection(collection)

    async def go(dsn: str) -> Deleted:
        services = services_for(app.build_context())
        async with services.lifespan(), open_pool(dsn) as pool:
            ids = await resolve_refs(pool, refs, tenant)
            return await actions.delete(pool, services, ids, collection=tenant)

    result = guarded(lambda: app.with_database(lambda dsn: run_async(go, dsn)))
    if as_json:
        click.echo(json.dumps(msgspec.to_builtins(result)))
    else:
        click.echo(f"deleted {len(result.deleted)} document(s)")
    for m in result.missing:
        click.echo(f"ragline: no document {m}", err=True)
    sys.exit(EXIT_FAILED if result.missing else EXIT_OK)


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
        from stages.actions import verify as verify_mod

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


@click.command("metadata")
@click.argument("documents", nargs=-1, required=True)
@click.option("--set", "pairs", multiple=True, metavar="KEY=VALUE", help="Set a key (repeat).")
@click.option("--unset", "keys", multiple=True, metavar="KEY", help="Remove a key (repeat).")
@click.option("--replace", is_flag=True, help="Replace the metadata whole with the --set ones.")
@click.option(
    "--readers",
    metavar="P1,P2",
    help="Only callers with one of these principals may read them (search, API, events, "
    "web view); an empty value: only tokens without principals.",
)
@click.option("--everyone", is_flag=True, help="Every caller may read them (the default).")
@scope_option
@json_option
@click.pass_obj
def metadata_cmd(
    app: App,
    documents: tuple[str, ...],
    pairs: tuple[str, ...],
    keys: tuple[str, ...],
    replace: bool,
    readers: str | None,
    everyone: bool,
    collection: str | None,
    as_json: bool,
) -> None:
    """Show or change what is said about documents: their metadata (the key/values search
    filters on with --meta) and their readers (who may read them). Both live in
    PostgreSQL only: a change re-embeds nothing and writes nothing to the index; the next
    search sees it.

    DOCUMENTS: ids, or file names that are one document's each (of --collection)."""
    from stages.actions import metadata as about

    refs = parse_refs(documents)
    tenant = None if collection is None else checked_collection(collection)
    if readers is not None and everyone:
        raise click.UsageError("give --readers or --everyone, not both")
    values: dict[str, Any] = dict(guarded(lambda: filters_of(metadata=pairs)).metadata or {})
    values.update(dict.fromkeys(keys))
    names = None if readers is None else [r.strip() for r in readers.split(",") if r.strip()]

    async def go(dsn: str) -> tuple[list[Any], dict[Any, Any]]:
        async with open_pool(dsn) as pool:
            ids = await resolve_refs(pool, refs, tenant)
            if values or replace:
                await about.set_metadata(pool, ids, values, replace=replace, collection=tenant)
            if names is not None or everyone:
                await about.set_readers(pool, ids, names, collection=tenant)
            found = await search_db.about_documents(pool, ids, tenant)
        missing = [str(d) for d in ids if d not in found]
        if missing:
            raise MissingInput(f"metadata: no such document: {', '.join(missing)}")
        return ids, found

    ids, found = guarded(lambda: app.with_database(lambda dsn: run_async(go, dsn)))
    if as_json:
        click.echo(json.dumps({str(k): msgspec.to_builtins(v) for k, v in found.items()}))
        return
    for doc in ids:
        readers_line = "everyone" if found[doc].readers is None else ",".join(found[doc].readers)
        metadata = json.dumps(found[doc].metadata, ensure_ascii=False)
        click.echo(f"{doc}  {metadata}  readers: {readers_line or '(tokens without principals)'}")
