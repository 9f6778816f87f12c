"""Documents as the command line names them: by id, or by file name when the name is one
document's (``ragline delete lighthouses.pdf``). A name that is no document's, or
several documents', is refused in one line that says which, and what to give instead."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from pathlib import PurePath

import click

from runtime.errors import ConfigurationError
from runtime.jobs.documents import DocumentRepository
from runtime.jobs.postgres import Pool

__all__ = ["DocumentRef", "parse_refs", "resolve_refs"]

#: A document as given on the command line: its id, or its file name.
DocumentRef = uuid.UUID | str
#: Documents a name that is several documents' lists (their ids and collections).
SHOWN = 5


def parse_refs(values: Sequence[str]) -> list[DocumentRef]:
    """Each value an id if it is a UUID, else a file name (looked up by
    :func:`resolve_refs` once the database is open)."""
    refs: list[DocumentRef] = []
    for value in values:
        try:
            refs.append(uuid.UUID(value))
        except ValueError:
            if not value.strip():
                raise click.BadParameter(
                    "an empty document: give an id or a file name, as status and search print them"
                ) from None
            refs.append(value)
    return refs


async def resolve_refs(
    pool: Pool, refs: Sequence[DocumentRef], collection: str | None = None
) -> list[uuid.UUID]:
    """The ids of ``refs``: an id as it is (a missing one is the command's to report), a
    file name as the one document of that name (in ``collection`` when given); a path's
    last part is the name when the path as given is no document's."""
    repo = DocumentRepository(pool)
    return [
        ref if isinstance(ref, uuid.UUID) else await _named(repo, ref, collection) for ref in refs
    ]


async def _named(repo: DocumentRepository, name: str, collection: str | None) -> uuid.UUID:
    found = await repo.named(name, collection, limit=SHOWN + 1)
    base = PurePath(name).name
    if not found and base and base != name:
        found = await repo.named(base, collection, limit=SHOWN + 1)
    if len(found) == 1:
        return found[0][0]
    shown = repr(name[:80])
    where = f" in collection {collection!r}" if collection is not None else ""
    if not found:
        raise ConfigurationError(
            f"no document named {shown}{where} (give a document's id or file name, as status "
            "and search print them)"
        )
    count = f"more than {SHOWN}" if len(found) > SHOWN else str(len(found))
    listed = ", ".join(f"{doc_id} ({tenant})" for doc_id, tenant in found[:SHOWN])
    raise ConfigurationError(
        f"{shown} names {count} documents{where}: {listed}; give the id of the one you mean"
    )
