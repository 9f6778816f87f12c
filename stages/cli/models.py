"""Commands for collections and the embedding model: ``migrate-model`` and ``collections``,
and the ``--collection`` options the other commands share."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

import click
import msgspec

from runtime.api import EXIT_FAILED, EXIT_OK, App, guarded, json_option, open_pool, run_async
from stages.db import model_switch
from stages.services import services_for

if TYPE_CHECKING:
    from stages.actions.migrate_model import Progress

collection_option = click.option(
    "--collection",
    default="default",
    show_default=True,
    help="The collection (tenant) the documents belong to.",
)
scope_option = click.option(
    "--collection", default=None, help="Only this collection's documents [default: all]."
)


def checked_collection(name: str) -> str:
    """A valid collection name, or one line and exit 2."""
    from stages.ports.collections import check_collection_name

    return guarded(lambda: check_collection_name(name))


def describe(p: Progress) -> str:
    return (
        f"model migration {p.from_model} -> {p.to_model}: {p.state}, "
        f"{p.migrated}/{p.ready} ready document(s) in {p.to_collection}"
    )


@click.command("migrate-model")
@click.argument("model", required=False)
@click.option("--cancel", is_flag=True, help="Give up the unfinished migration (before its swap).")
@click.option("--status", "show", is_flag=True, help="Show the migration's progress and exit.")
@click.option(
    "--rebuild",
    is_flag=True,
    help="Rebuild the live model's vector collection with today's layout (its keyword "
    "side for hybrid search), from the cached vectors: no embedding call.",
)
@json_option
@click.pass_obj
def migrate_model(
    app: App,
    model: str | None,
    as_json: bool,
    cancel: bool = False,
    show: bool = False,
    rebuild: bool = False,
) -> None:
    """Switch search to embedding model MODEL (``local`` or ``cohere/<model>@<dims>``)
    without a half-built index.

    Fills MODEL's vector collection while search keeps answering from the live one, swaps
    the alias only when every ready document is in the new collection, then deletes the
    old collection. Workers keep running meanwhile: new documents are indexed into both.
    Killed midway, the same command resumes where it was. Also run as
    ``reprocess --from embed --model MODEL``.
    """
    if sum((bool(model), cancel, show, rebuild)) != 1:
        raise click.UsageError("give MODEL, --rebuild, --cancel or --status (one of them)")

    async def go(dsn: str) -> dict[str, Any] | None:
        from stages.actions import migrate_model as mm

        services = services_for(app.build_context())
        async with services.lifespan(), open_pool(dsn) as pool:
            if show:
                found = await mm.progress(pool)
                shown: dict[str, Any] | None = None if found is None else msgspec.to_builtins(found)
                return shown
            if cancel:
                gone = await mm.cancel(pool, services)
                return None if gone is None else {"cancelled": gone.to_model}

            def report(p: Progress) -> None:
                if not as_json:
                    click.echo(describe(p), err=True)

            done = await mm.migrate(
                pool, services, model or "", rebuild=rebuild, on_progress=report
            )
            out: dict[str, Any] = msgspec.to_builtins(done)
            return out

    result = guarded(lambda: app.with_database(lambda dsn: run_async(go, dsn)))
    if as_json:
        click.echo(json.dumps(result))
    elif result is None:
        click.echo("no model migration in progress")
    elif "cancelled" in result:
        click.echo(f"cancelled the migration to {result['cancelled']}")
    else:
        click.echo(
            f"model migration {result['from_model']} -> {result['to_model']}: {result['state']}, "
            f"{result['migrated']}/{result['ready']} ready document(s) in {result['to_collection']}"
        )
    sys.exit(EXIT_OK)


@click.command("collections")
@json_option
@click.pass_obj
def collections(app: App, as_json: bool) -> None:
    """Collections and their documents per status."""

    async def go(dsn: str) -> dict[str, dict[str, int]]:
        async with open_pool(dsn) as pool:
            counts = await model_switch.collection_counts(pool)
        out: dict[str, dict[str, int]] = {}
        for c in counts:
            out.setdefault(c.collection, {})[c.status] = c.n
        return out

    result = guarded(lambda: app.with_database(lambda dsn: run_async(go, dsn)))
    if as_json:
        click.echo(json.dumps(result))
    else:
        for name, counts in sorted(result.items()):
            shown = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
            click.echo(f"{name}: {sum(counts.values())} document(s) ({shown})")
    sys.exit(EXIT_OK if result is not None else EXIT_FAILED)


MODEL_COMMANDS: list[click.Command] = [migrate_model, collections]
