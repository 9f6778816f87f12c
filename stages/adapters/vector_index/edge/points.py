"""Points in qdrant-edge's form, with as little conversion work per point as it allows.

qdrant-edge turns a payload dict into JSON field by field, and a field is dear: for a
string it first tries bool, u64, i64 and f64, raising (and dropping) a Python error each
time (about 4-7 µs a string field, 1.5-2.5 µs an integer; a field stored also costs in the
upsert). With the eight fields a chunk's point carries, that conversion was the index
stage's largest CPU cost (about 43 µs of the ~100 µs a point cost all-in, on
bench.ingest's corpus; qdrant-edge's own upsert about 32 µs).

The embedded index therefore stores a point's payload in as few fields as its filters
need: ``document_id`` and ``generation`` (delete, ``verify``, ``reprocess``),
:data:`BODY_FIELD`, the whole payload as one JSON string (msgspec encodes it in about
2 µs), and ``collection`` only for a tenant other than ``default``: the tenant filter
already counts a point without the field as ``default`` (points written before
collections existed), so the common case saves a string field (measured on re-indexing
500-point documents: 5-10 µs per point of conversion and upsert).

:func:`payload_of` gives a stored payload back in the caller's form, so search shows the
same fields as before: the body holds the collection whatever was stored beside it.
Points of the earlier layouts are read as they are: with a body and a ``collection``
field (before default's was left out), or with plain fields and no body (before
packing). Nothing filters on the other fields in the embedded index (the Qdrant server
keeps them as plain fields: :mod:`stages.adapters.vector_index.qdrant`).
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
    Point,
)

__all__ = ["BODY_FIELD", "edge_points", "payload_of", "stored_payload"]

#: Payload field holding a point's whole payload as JSON text.
BODY_FIELD = "ragline_payload"

_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder(dict[str, Any]).decode


def edge_points(points: Sequence[Point]) -> list[qe.Point]:
    """qdrant-edge points for ``points``, their payloads packed as described above."""
    doc, gen, body = DOCUMENT_FIELD, GENERATION_FIELD, BODY_FIELD
    # Its stub says list; it reads any sequence of floats, the cache's arrays too.
    return [
        qe.Point(p.id, p.vector, stored_payload(p.payload, doc, gen, body))  # type: ignore[arg-type]
        for p in points
    ]


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
