"""Collections: every document belongs to exactly one (a tenant), ``default`` unless named.

A collection is a name on the document row (``documents.collection``), which ``delete``,
``verify``, ``reprocess`` and ``status`` select by, and a payload field on each of its
points (:data:`COLLECTION_FIELD`), which search filters on. Every tenant shares one vector
collection per embedding model (Qdrant: a keyword index with ``is_tenant=true``, storing
each tenant's points together; embedded: a keyword index). Names are slugs
(``[a-z0-9][a-z0-9_-]{0,62}``), checked here with one clear line and by a CHECK constraint.
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
