"""Collections: every document belongs to exactly one (a tenant), ``default`` unless named.

A collection is a name on the document row (``documents.collection``) and a payload field
on each of its points (:data:`COLLECTION_FIELD`). Search filters on that field, so a
query in one collection never returns another's chunks; ``delete``, ``verify``,
``reprocess`` and ``status`` select documents by the row. The vector index keeps one
physical collection per embedding model for every tenant (Qdrant: a keyword payload
index with ``is_tenant=true`` on the field, so each tenant's points are stored together;
the embedded index: a keyword index and the same filter).

Names are slugs (``[a-z0-9][a-z0-9_-]{0,62}``), checked here with one clear line and by a
CHECK constraint in PostgreSQL.
"""

from __future__ import annotations

import re

from runtime.api import ConfigurationError
from stages.ports.vector_index import COLLECTION_FIELD, DEFAULT_COLLECTION

__all__ = [
    "COLLECTION_FIELD",
    "DEFAULT_COLLECTION",
    "check_collection_name",
]

_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")


def check_collection_name(name: str) -> str:
    """``name`` if it can be a collection; else a ConfigurationError naming the rule."""
    if not _NAME.fullmatch(name):
        raise ConfigurationError(
            f"invalid collection name {name!r}: use 1-63 of a-z, 0-9, '_' and '-', "
            "starting with a letter or digit"
        )
    return name


def optional_collection(name: str | None) -> str | None:
    """A checked name, or None for 'every collection'."""
    return None if name is None else check_collection_name(name)
