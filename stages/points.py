"""Points in qdrant-edge's form, with as little conversion work per point as it allows.

qdrant-edge turns a payload dict into JSON field by field, and a field is dear: for a
string it first tries bool, u64, i64 and f64, raising (and dropping) a Python error each
time. With the eight fields a chunk's point carries, that conversion was the index
stage's largest CPU cost (about 43 µs of the ~100 µs a point cost all-in, on
bench.ingest's corpus; qdrant-edge's own upsert about 32 µs).

The embedded index therefore stores a point's payload as four fields: ``document_id``,
``generation`` and ``collection`` (what its filters and ``verify`` read) and
:data:`BODY_FIELD`, the
whole payload as one JSON string (msgspec encodes it in about 2 µs). :func:`payload_of`
gives a stored payload back in the caller's form, so search shows the same fields as
before; a point written before this layout (no body field) is returned as it is.
Nothing filters on the other fields in the embedded index (the Qdrant server keeps them
as plain fields: :mod:`stages.qdrant_index`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec
import qdrant_edge as qe

from stages.vector_index import COLLECTION_FIELD, DOCUMENT_FIELD, GENERATION_FIELD, Point

__all__ = ["BODY_FIELD", "edge_points", "payload_of"]

#: Payload field holding a point's whole payload as JSON text.
BODY_FIELD = "ragline_payload"

_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder(dict[str, Any]).decode


def edge_points(points: Sequence[Point]) -> list[qe.Point]:
    """qdrant-edge points for ``points``, their payloads packed as described above."""
    doc, gen, body = DOCUMENT_FIELD, GENERATION_FIELD, BODY_FIELD
    return [qe.Point(p.id, p.vector, _stored(p.payload, doc, gen, body)) for p in points]


def _stored(payload: Mapping[str, Any], doc: str, gen: str, body: str) -> dict[str, Any]:
    stored = {doc: payload[doc], gen: payload[gen], body: _encode(payload).decode()}
    tenant = payload.get(COLLECTION_FIELD)
    if tenant is not None:  # the tenant filter reads it (a keyword index in the shard)
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
