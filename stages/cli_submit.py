"""``submit``: store PDFs (files, directories, globs) and queue them; what ``ingest`` and
``serve`` share with it (expanding paths, refusals)."""

from __future__ import annotations

import glob
import json
import sys
import uuid
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import asyncpg
import click
import msgspec

from runtime.api import (
    EXIT_FAILED,
    EXIT_OK,
    App,
    Pool,
    RaglineError,
    StorageFull,
    escape_name,
    guarded,
    is_storage_full,
    json_option,
    one_line,
    open_pool,
    run_async,
)
from stages.pipeline import services_for

# The services pull in PyMuPDF, onnxruntime, qdrant-client and minio (seconds of imports):
# commands import them when they run, so `--help` and `status` stay quick.
if TYPE_CHECKING:
    from stages.services import Services

force_option = click.option(
    "--force", is_flag=True, help="Submit again even if the same bytes are already there."
)


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
    pool: Pool, services: Services, files: Iterable[Path], force: bool
) -> tuple[list[SubmitResult], list[Refused]]:
    from stages.submit import submit as submit_one

    done: list[SubmitResult] = []
    refused: list[Refused] = []
    for path in files:
        shown = escape_name(str(path))
        try:
            result = await submit_one(pool, services.assets, path, force=force)
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
@json_option
@click.pass_obj
def submit(app: App, paths: tuple[str, ...], force: bool, as_json: bool) -> None:
    """Store PDFs and queue them for processing (files, directories, globs).

    A file that is not a PDF or cannot be read is refused with one line; the rest go in.
    Exit 0 when everything went in, 1 when something was refused.
    """
    files, refused = expand(paths)

    async def go(dsn: str) -> tuple[list[SubmitResult], list[Refused]]:
        services = services_for(app.build_context())
        async with services.lifespan(), open_pool(dsn) as pool:
            return await submit_paths(pool, services, files, force)

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
