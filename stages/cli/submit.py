"""``submit``: store documents (files, directories, globs) and queue them; what ``ingest`` and
``serve`` share with it (expanding paths, refusals)."""

from __future__ import annotations

import glob
import json
import sys
import uuid
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

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
from stages.cli.models import checked_collection, collection_option
from stages.services import services_for

# The services pull in PyMuPDF, onnxruntime, qdrant-client and minio (seconds of imports):
# commands import them when they run, so `--help` and `status` stay quick.
if TYPE_CHECKING:
    from stages.actions.metadata import Labels
    from stages.services import Services

force_option = click.option(
    "--force", is_flag=True, help="Submit again even if the same bytes are already there."
)


def labels_options(command: Any) -> Any:
    """``--meta KEY=VALUE`` (repeat) and ``--readers P1,P2``: what new documents are given
    (search filters on the metadata; readers say who may read them)."""
    command = click.option(
        "--readers",
        metavar="P1,P2",
        help="Only callers with one of these principals may read the new documents "
        "[default: every caller].",
    )(command)
    return click.option(
        "--meta",
        "metadata",
        multiple=True,
        metavar="KEY=VALUE",
        help="Metadata of the new documents (repeat); search filters on it with --meta.",
    )(command)


def labels_from(metadata: Sequence[str], readers: str | None) -> Labels:
    """The labels given on the command line; a bad one is one line and exit 2."""
    from stages.actions.metadata import labels_of
    from stages.actions.search import filters_of

    def checked() -> Labels:
        pairs = filters_of(metadata=metadata).metadata
        names = None if readers is None else [r.strip() for r in readers.split(",") if r.strip()]
        return labels_of(pairs, names)

    return guarded(checked)


class Refused(msgspec.Struct, frozen=True):
    path: str
    reason: str


class SubmitResult(msgspec.Struct, frozen=True):
    path: str
    document_id: uuid.UUID
    created: bool


class Expanded(msgspec.Struct, frozen=True):
    files: list[Path]
    refused: list[Refused]
    #: Files under the directories given whose names are of no type ragline reads, per
    #: suffix ("" for none): left out, and said so in one line (:func:`report_skipped`).
    skipped: dict[str, int]


def expand(paths: Sequence[str]) -> Expanded:
    """Files as given, documents found in directories (recursively), globs expanded."""
    files: list[Path] = []
    refused: list[Refused] = []
    skipped: Counter[str] = Counter()
    for raw in paths:
        matches = sorted(glob.glob(raw, recursive=True)) if glob.has_magic(raw) else [raw]
        if not matches:
            refused.append(Refused(escape_name(raw), "no file matches"))
        for match in matches:
            path = Path(match)
            if path.is_dir():
                found = documents_under(path)
                files.extend(found.files)
                refused.extend(found.refused)
                skipped.update(found.skipped)
            elif path.is_file():
                files.append(path)
            elif path.is_symlink() and not path.exists():
                refused.append(Refused(escape_name(match), DANGLING))
            elif path.exists():  # a FIFO, socket or device: submit says which, in one line
                files.append(path)
            else:
                refused.append(Refused(escape_name(raw), "no such file or directory"))
    return Expanded(files, refused, dict(sorted(skipped.items())))


DANGLING = "symbolic link to a file that does not exist"


def documents_under(directory: Path) -> Expanded:
    """The documents below ``directory``: files named with the suffix of a format ragline
    reads, and files without a suffix whose content is a document format other than text
    (a PDF saved as ``scan_001``); each is detected from its content again at submit. A
    dangling symlink among them is refused with one line. Every other file is counted as
    skipped by its suffix, hidden ones (``.git``, ``.DS_Store``) aside: a text file of
    another name (``notes.csv``, ``README``) goes in only when it is named on its own."""
    from stages.parsing.formats import named_as_document

    files: list[Path] = []
    refused: list[Refused] = []
    skipped: Counter[str] = Counter()
    for path in sorted(directory.rglob("*")):
        if named_as_document(path.name):
            if path.is_file():
                files.append(path)
            elif path.is_symlink() and not path.exists():
                refused.append(Refused(escape_name(str(path)), DANGLING))
            continue
        hidden = any(part.startswith(".") for part in path.relative_to(directory).parts)
        if hidden or not path.is_file():
            continue
        suffix = path.suffix.lower()
        if not suffix and _binary_document(path):
            files.append(path)
        else:
            skipped[suffix] += 1
    return Expanded(files, refused, dict(skipped))


def _binary_document(path: Path) -> bool:
    from stages.parsing.formats.detect import TEXT_READERS, detect

    try:
        return detect(path, escape_name(path.name)).reader not in TEXT_READERS
    except (RaglineError, OSError):
        return False


async def submit_paths(
    pool: Pool,
    services: Services,
    files: Iterable[Path],
    force: bool,
    collection: str = "default",
    labels: Labels | None = None,
) -> tuple[list[SubmitResult], list[Refused]]:
    from stages.actions.submit import submit as submit_one

    done: list[SubmitResult] = []
    refused: list[Refused] = []
    for path in files:
        shown = escape_name(str(path))
        try:
            result = await submit_one(
                pool, services.assets, path, force=force, collection=collection, labels=labels
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


def report_skipped(skipped: Mapping[str, int]) -> None:
    """One line for the files a directory walk left out (none: nothing)."""
    if not skipped:
        return
    kinds = ", ".join(f"{suffix or 'no suffix'} {n}" for suffix, n in skipped.items())
    click.echo(
        f"skipped {sum(skipped.values())} file(s) in the directories given, named as no "
        f"type ragline reads ({kinds}); name a file on its own to have its content checked",
        err=True,
    )


@click.command()
@click.argument("paths", nargs=-1, required=True)
@force_option
@collection_option
@labels_options
@json_option
@click.pass_obj
def submit(
    app: App,
    paths: tuple[str, ...],
    force: bool,
    collection: str,
    metadata: tuple[str, ...],
    readers: str | None,
    as_json: bool,
) -> None:
    """Store documents and queue them for processing (files, directories, globs).

    PDF, XPS, EPUB, MOBI, FB2, CBZ, SVG, PNG, JPEG, TIFF, GIF, BMP, JPEG 2000, DOCX, HTML,
    Markdown and text, detected from their content; any other file, or one that cannot be
    read, is refused with one line; the rest go in.
    Exit 0 when everything went in, 1 when something was refused.
    """
    collection = checked_collection(collection)
    labels = labels_from(metadata, readers)
    expanded = expand(paths)

    async def go(dsn: str) -> tuple[list[SubmitResult], list[Refused]]:
        services = services_for(app.build_context())
        async with services.lifespan(), open_pool(dsn) as pool:
            return await submit_paths(pool, services, expanded.files, force, collection, labels)

    done, more = guarded(lambda: app.with_database(lambda dsn: run_async(go, dsn)))
    refused = expanded.refused + more
    if as_json:
        click.echo(
            json.dumps(
                {
                    "submitted": msgspec.to_builtins(done),
                    "refused": msgspec.to_builtins(refused),
                    "skipped": expanded.skipped,
                }
            )
        )
    else:
        for d in done:
            click.echo(f"{'submitted' if d.created else 'already there'} {d.path} {d.document_id}")
    report_refused(refused)
    report_skipped(expanded.skipped)
    sys.exit(EXIT_FAILED if refused else EXIT_OK)
