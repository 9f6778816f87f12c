"""The search filters as command-line options (``search`` and ``eval`` take them; the
HTTP API's query parameters have the same names and forms)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from runtime.api import guarded
from stages.actions.search import Filters, filters_of

__all__ = ["filter_options", "filters_from"]

F = TypeVar("F", bound=Callable[..., Any])

_OPTIONS = (
    click.option("--document", "documents", multiple=True, help="Only this document (repeat)."),
    click.option("--source", help="Only documents of this sync source (its folder or s3://…)."),
    click.option("--path", "path_prefix", help="Only documents whose path in their source "
                 "(or whose file name) starts with this."),
    click.option("--type", "media_types", multiple=True,
                 help="Only documents of this media type, e.g. application/pdf (repeat)."),
    click.option("--since", help="Only documents dated from this day or time (ISO; the "
                 "file's modification time, else when it was submitted)."),
    click.option("--until", help="Only documents dated before this day or time (ISO)."),
    click.option("--meta", "metadata", multiple=True, metavar="KEY=VALUE",
                 help="Only documents whose metadata has this value (repeat: all must hold)."),
    click.option("--pages", help="Only chunks on these pages: 7, 3-9, 3- or -9."),
    click.option("--section", help="Only chunks of a section whose label starts with this."),
)  # fmt: skip

FILTER_NAMES = (
    "documents", "source", "path_prefix", "media_types", "since", "until", "metadata",
    "pages", "section",
)  # fmt: skip


def filter_options(command: F) -> F:
    """Add the filter options to a click command (they arrive as keyword arguments;
    :func:`filters_from` takes them out)."""
    for option in reversed(_OPTIONS):
        command = option(command)
    return command


def filters_from(kwargs: dict[str, Any]) -> Filters:
    """The filters given on the command line (removed from ``kwargs``); a bad one is one
    line and exit 2."""
    given = {name: kwargs.pop(name) for name in FILTER_NAMES}
    source = given["source"]
    if source and "://" not in source:  # a folder: its URI is its resolved path, as sync's
        given["source"] = str(Path(source).resolve())
    return guarded(lambda: filters_of(**given))
