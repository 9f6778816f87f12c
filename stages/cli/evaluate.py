"""``eval``: score search against judged queries (a qrels JSONL file), per query kind and
mode: recall@k, MRR@10, nDCG@10 (:mod:`stages.actions.evaluate`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import cast

import click
import msgspec

from runtime.api import App, guarded, json_option, open_pool, run_async
from stages.actions.evaluate import ALL, Evaluation, Qrel, Scores, evaluate, parse_qrels
from stages.actions.search import MODES, Mode
from stages.cli.models import checked_collection, scope_option
from stages.services import services_for

#: ``--mode all``: every mode, dense and keyword first, then the fused one.
EVERY_MODE: tuple[Mode, ...] = ("dense", "keyword", "hybrid")


@click.command("eval")
@click.argument("qrels", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--k", "-k", "k", default=5, show_default=True, type=click.IntRange(1, 100),
              help="The cut of recall@k.")  # fmt: skip
@click.option(
    "--mode",
    type=click.Choice([*MODES, "all"]),
    default=MODES[0],
    show_default=True,
    help="The search mode to score, or all of them side by side.",
)
@scope_option
@json_option
@click.pass_obj
def evaluate_cmd(
    app: App, qrels: Path, k: int, mode: str, collection: str | None, as_json: bool
) -> None:
    """Score search against QRELS, a JSONL file of judged queries, one a line:

    \b
    {"query": "...", "kind": "identifier", "file": "manual.pdf", "pages": [12]}

    ("document": an id instead of "file"; "kind" and "pages" optional). A hit is relevant
    when it is of that document and overlaps those pages. Prints recall@k (a relevant
    hit in the top k), MRR@10 and nDCG@10 per kind and overall."""
    tenant = None if collection is None else checked_collection(collection)
    judged = guarded(lambda: _read(qrels))
    modes = EVERY_MODE if mode == "all" else (cast("Mode", mode),)

    async def go(dsn: str) -> Evaluation:
        services = services_for(app.build_context())
        async with services.lifespan(), open_pool(dsn) as pool:
            return await evaluate(pool, services, judged, k=k, modes=modes, collection=tenant)

    result = guarded(lambda: app.with_database(lambda dsn: run_async(go, dsn)))
    if as_json:
        click.echo(json.dumps(msgspec.to_builtins(result)))
        return
    for line in table(result):
        click.echo(line)


def _read(path: Path) -> list[Qrel]:
    with path.open(encoding="utf-8", errors="replace") as lines:
        return parse_qrels(lines, path.name)


def table(result: Evaluation) -> list[str]:
    """One row per mode and kind, the overall row last in each mode."""
    width = max(len(kind) for m in result.modes.values() for kind in m.kinds)
    header = f"{'mode':<8} {'kind':<{width}} {'queries':>7} {f'recall@{result.k}':>9} "
    lines = [header + f"{'MRR@10':>7} {'nDCG@10':>8}"]
    for mode, found in result.modes.items():
        lines += [_row(mode, kind, s, width) for kind, s in found.kinds.items() if kind != ALL]
        lines.append(_row(mode, ALL, found.kinds[ALL], width))
    return lines


def _row(mode: str, kind: str, s: Scores, width: int) -> str:
    return (
        f"{mode:<8} {kind:<{width}} {s.queries:>7} {s.recall_at_k:>9.3f} "
        f"{s.mrr_at_10:>7.3f} {s.ndcg_at_10:>8.3f}"
    )
