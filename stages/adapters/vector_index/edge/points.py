"""Points in qdrant-edge's form, with as little conversion work per point as it allows.

qdrant-edge converts a payload dict field by field, dearly (a string field first tries bool,
u64, i64 and f64, each failure a Python exception), so the embedded index stores only what
its filters need: ``document_id``, ``generation``, :data:`BODY_FIELD` (the whole payload
as one JSON string) and ``collection`` only for a tenant other than ``default``.
:func:`payload_of` gives a stored payload back in the caller's form, earlier layouts
included. Figures: docs/architecture.md, "The index stage's CPU per point".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec
import qdrant_edge as qe

from stages.ports.vector_index import (
    COLLECTION_FIELD,
    DEFAULT_COLLECTION,
    DOCUMENT_FIELD,
    GENERATION_FIELD,
    KEYWORDS_VECTOR,
    Point,
)

__all__ = ["BODY_FIELD", "edge_points", "payload_of", "stored_payload"]

#: Payload field holding a point's whole payload as JSON text.
BODY_FIELD = "ragline_payload"

_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder(dict[str, Any]).decode


def edge_points(points: Sequence[Point], keywords: bool = False) -> list[qe.Point]:
    """qdrant-edge points for ``points``, their payloads packed as described above; with
    ``keywords`` (the shard has the keyword side), their keywords beside the vector."""
    doc, gen, body = DOCUMENT_FIELD, GENERATION_FIELD, BODY_FIELD
    if keywords:
        return [
            qe.Point(p.id, vectors_of(p), stored_payload(p.payload, doc, gen, body)) for p in points
        ]
    # Its stub says list; it reads any sequence of floats, the cache's arrays too.
    return [
        qe.Point(p.id, p.vector, stored_payload(p.payload, doc, gen, body))  # type: ignore[arg-type]
        for p in points
    ]


def vectors_of(point: Point) -> Any:
    """The point's named vectors: the dense one (unnamed) and its keywords, if any."""
    if point.keywords is None or not point.keywords.indices:
        return {"": point.vector}
    # Its stub says lists; it reads any sequence, a stored vector's arrays too.
    words = point.keywords
    sparse = qe.SparseVector(indices=words.indices, values=words.values)  # type: ignore[arg-type]
    return {"": point.vector, KEYWORDS_VECTOR: sparse}


def stored_payload(
    payload: Mapping[str, Any],
    doc: str = DOCUMENT_FIELD,
    gen: str = GENERATION_FIELD,
    body: str = BODY_FIELD,
) -> dict[str, Any]:
    """The fields the shard stores for ``payload`` (the field names are arguments only
    so that :func:`edge_points` passes them as locals)."""
    stored = {doc: payload[doc], gen: payload[gen], body: _encode(payload).decode()}
    tenant = payload.get(COLLECTION_FIELD)
    # The tenant filter reads it (a keyword index in the shard); no field means default.
    if tenant is not None and tenant != DEFAULT_COLLECTION:
        stored[COLLECTION_FIELD] = tenant
    return stored


def payload_of(stored: Mapping[str, Any] | None) -> dict[str, Any]:
    """The payload a point was written with, from what the shard holds."""
    if not stored:
        return {}
    body = stored.get(BODY_FIELD)
    if isinstance(body, str):
        return _decode(body)
    return dict(stored)
