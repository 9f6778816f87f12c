"""Spans as a traced process ships them to its exporter process (the tuples of
:class:`runtime.process.light_spans.WireSpan`), for the tests of what that process
sends."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from runtime.process.light_spans import WireSpan

RESOURCE: dict[str, Any] = {
    "service.name": "ragline",
    "host.name": "worker-1",
    "process.pid": 4242,
    "telemetry.sdk.language": "python",
}
TRACE = "0af7651916cd43dd8448eb211c80319c"
PARENT = "b7ad6b7169203331"
_wire = msgspec.msgpack.Decoder(list[WireSpan]).decode
_encode = msgspec.msgpack.Encoder().encode


def span(**given: Any) -> tuple[Any, ...]:
    """A shipped span's tuple (the fields of :class:`WireSpan`), defaults overridden: a
    stage run's span under a remote parent."""
    fields = {
        "name": "stage parse",
        "trace_id": TRACE,
        "span_id": 0x00F067AA0BA902B7,
        "parent_id": PARENT,
        "parent_remote": True,
        "flags": 1,
        "kind": 4,
        "start_ns": 1_700_000_000_000_000_000,
        "end_ns": 1_700_000_000_250_000_000,
        "attributes": {},
        "events": [],
        "links": [],
        "status": 0,
        "description": None,
        "scope": "ragline",
        "scope_version": None,
        "run": None,
    }
    unknown = set(given) - set(fields)
    assert not unknown, unknown
    return tuple({**fields, **given}.values())


def shipped(spans: Sequence[tuple[Any, ...]]) -> list[WireSpan]:
    """The spans as the exporter process reads them: through msgpack, as shipped."""
    return _wire(_encode(list(spans)))
