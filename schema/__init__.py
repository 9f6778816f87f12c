"""ragline's SQL: the full schema, numbered migrations and named queries.

Queries live in ``queries/<group>.sql`` as blocks headed ``-- name: some_query``, followed
by a one-line purpose and the ordered ``$n`` parameters as comments. :func:`load` reads a
group once and returns a name-keyed mapping of ``LiteralString``.
"""

from __future__ import annotations

import functools
import re
from importlib import resources
from typing import LiteralString, cast

_HEADER = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)


def read(relative: str) -> str:
    """The text of a SQL file shipped in this package, e.g. ``schema.sql``."""
    return resources.files(__package__).joinpath(relative).read_text(encoding="utf-8")


def parse(text: str) -> dict[str, LiteralString]:
    """Split a queries file into ``{name: sql}``."""
    parts = _HEADER.split(text)
    queries: dict[str, LiteralString] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in queries:
            raise ValueError(f"query {name!r} defined twice")
        queries[name] = cast(LiteralString, body.strip())
    return queries


@functools.cache
def load(group: str) -> dict[str, LiteralString]:
    """The named queries of ``queries/<group>.sql``."""
    return parse(read(f"queries/{group}.sql"))


def migrations() -> list[tuple[int, str, str]]:
    """``(version, name, sql)`` for each file in ``migrations/``, in order."""
    found: list[tuple[int, str, str]] = []
    for entry in resources.files(__package__).joinpath("migrations").iterdir():
        match = re.fullmatch(r"(\d{4})_([a-z0-9_]+)\.sql", entry.name)
        if match:
            found.append((int(match[1]), match[2], entry.read_text(encoding="utf-8")))
    found.sort()
    return found
