"""The exporter process's own OTLP encoding: for the same shipped spans, the request it
writes decodes to the message the SDK's OTLP exporter builds from them (the SDK's
``ReadableSpan``s, ``encode_spans``), field by field: ids, parent, names, kinds, times,
status, attributes of every type, events, links, resource, scopes, dropped counts."""

from __future__ import annotations

import math
import uuid
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource

from runtime.process.light_spans import WireSpan
from runtime.process.otlp_encoder import CACHE_PAIRS, Encoder, varint
from runtime.process.span_exporter import readable
from tests.support.wire_spans import PARENT, RESOURCE, TRACE, shipped, span


def sdks(spans: list[WireSpan], resource: dict[str, Any] = RESOURCE) -> bytes:
    """What the SDK's OTLP exporter sends for ``spans``."""
    sdk_resource = Resource(resource)
    body: bytes = encode_spans(
        [readable(s, sdk_resource) for s in spans]
    ).SerializePartialToString()
    return body


def decoded(body: bytes) -> ExportTraceServiceRequest:
    message = ExportTraceServiceRequest()
    message.ParseFromString(body)
    return message


def assert_same(spans: Sequence[tuple[Any, ...]], encoder: Encoder | None = None) -> bytes:
    wire = shipped(spans)
    ours = (encoder or Encoder(RESOURCE)).request(wire)
    assert decoded(ours) == decoded(sdks(wire))
    return ours


VARIED = [
    # a stage run: its figures made attributes by the exporter, one of them also set
    span(
        run=("chunk", 2, str(uuid.uuid4()), 12345, 3),
        attributes={"ragline.outcome": "retry", "ragline.attempt": 7, "ragline.chunks": 41},
        events=[("retry", 1_700_000_000_100_000_000, {"error.kind": "transient", "delay_s": 2.5})],
        status=2,
        description="TransientError: the provider said 503",
    ),
    # a root (no parent), an SDK scope with a version, every kind
    span(name="submit", parent_id="", parent_remote=False, kind=3, scope_version="1.2.3"),
    span(name="internal", kind=0, parent_remote=False),
    span(name="server", kind=1, scope="some.library"),
    span(name="client", kind=2, scope="some.library", scope_version="0.1"),
    # an OK status keeps no description (the SDK's Status drops it); an error's empty one
    span(status=1, description="fine"),
    span(status=2, description=""),
    # times unset, an empty name
    span(name="", start_ns=0, end_ns=0),
    # events and links, with and without attributes
    span(
        events=[("a", 1, {}), ("", 0, {"k": [1, 2, 3]}), ("lease_lost", 2**63, {"where": "x"})],
        links=[(TRACE, 1, 1, {}), ("f" * 32, 2**64 - 1, 0, {"link.kind": "follows", "n": -1})],
    ),
    # attribute values of every type the SDK encodes
    span(
        attributes={
            "str": "café ☕",
            "empty": "",
            "true": True,
            "false": False,
            "zero": 0,
            "int": 17,
            "negative": -5,
            "int64 max": 2**63 - 1,
            "int64 min": -(2**63),
            "double": 2.5,
            "-0.0": -0.0,
            "inf": math.inf,
            "bytes": b"\x00\xff",
            "strings": ["a", "", "b"],
            "bools": [True, False],
            "ints": [1, -1, 2**40],
            "doubles": [0.5, -1.25],
            "no values": [],
            "mixed": ["a", 1, True, 2.0, None],
            "nested": [[1, 2], ["x"]],
            "map": {"a": 1, "b": ["c"], "d": {"e": False}},
            "none": None,
            "": "an empty key",
            "long": "x" * 300,
            "longer": "y" * 20_000,
        }
    ),
    # what the SDK fails to encode is left out (with a log line), the rest kept
    # (msgpack carries up to 2**64 - 1; OTLP's int is an int64)
    span(attributes={"too big": 2**63, "kept": 1, "far too big": 2**64 - 1}),
]


def test_a_varied_batch_decodes_to_what_the_sdk_sends() -> None:
    ours = assert_same(VARIED)
    request = decoded(ours)
    # the grouping: one resource, the scopes in the order they first appear
    assert len(request.resource_spans) == 1
    scopes = [(s.scope.name, s.scope.version) for s in request.resource_spans[0].scope_spans]
    assert scopes == [
        ("ragline", ""),
        ("ragline", "1.2.3"),
        ("some.library", ""),
        ("some.library", "0.1"),
    ]
    first = request.resource_spans[0].scope_spans[0].spans[0]
    assert first.trace_id.hex() == TRACE and first.parent_span_id.hex() == PARENT
    assert first.flags == 0x300  # the parent is remote, and that is known


def test_the_bytes_are_the_sdks_for_a_batch_of_stage_runs() -> None:
    runs = [
        span(
            span_id=i + 1,
            run=("parse", 1, str(uuid.uuid4()), i, 1),
            attributes={"ragline.outcome": "succeeded", "ragline.provider_calls": 0},
        )
        for i in range(300)
    ]
    wire = shipped(runs)
    assert Encoder(RESOURCE).request(wire) == sdks(wire)


def test_cached_pairs_keep_values_that_compare_equal_apart() -> None:
    # True == 1 == 1.0 in Python, and a dict would take one for the other.
    encoder = Encoder(RESOURCE)
    values: list[Any] = [True, 1, 1.0, "1", False, 0, 0.0, -0.0]
    assert_same([span(span_id=i + 1, attributes={"k": v}) for i, v in enumerate(values)], encoder)
    assert_same([span(span_id=i + 1, attributes={"k": v}) for i, v in enumerate(values)], encoder)


def test_the_cache_starts_over_when_full_and_stays_right() -> None:
    encoder = Encoder(RESOURCE)
    many = [span(span_id=i + 1, attributes={"job": i, "stage": "parse"}) for i in range(3000)]
    assert_same(many, encoder)
    assert_same(many, encoder)
    assert len(encoder._pairs) <= CACHE_PAIRS


# -- the stage run's fast path: the same bytes as the general one -----------------------------

_DOCUMENT = "3b241101-e2bb-4255-8caf-4136c566a962"
#: Runs as a worker ships them: written by the fast path.
RUN_FITS = [
    span(run=("parse", 1, _DOCUMENT, 1, 1)),
    # attempts and generations past one varint byte; job ids at each varint length
    span(run=("embed", 128, _DOCUMENT, 0, 300)),
    *(span(run=("chunk", 2, _DOCUMENT, job, 1)) for job in (127, 128, 2**14, 2**21, 2**28)),
    span(run=("index", 3, _DOCUMENT, 2**35 + 5, 2**40)),
    span(run=("index", 3, _DOCUMENT, 2**63 - 1, 1)),
    # attributes beside the run's, statuses, events, links, a local parent, long names
    span(run=("parse", 1, _DOCUMENT, 7, 1), attributes={"ragline.provider_calls": 2}),
    span(run=("parse", 1, _DOCUMENT, 7, 1), status=2, description="TransientError: 503"),
    span(run=("parse", 1, _DOCUMENT, 7, 1), status=2, description=None),
    span(run=("parse", 1, _DOCUMENT, 7, 1), status=1, description="ok is final"),
    span(run=("parse", 1, _DOCUMENT, 7, 1), status=0, description="dropped"),
    span(run=("parse", 1, _DOCUMENT, 7, 1), events=[("retry", 5, {"delay_s": 2.5})]),
    span(run=("parse", 1, _DOCUMENT, 7, 1), links=[(TRACE, 3, 1, {"k": "v"})]),
    span(run=("parse", 1, _DOCUMENT, 7, 1), parent_remote=False, kind=0),
    span(run=("s" * 200, 1, _DOCUMENT, 7, 1), name="stage " + "s" * 200),
    span(run=("parse", 1, _DOCUMENT, 7, 1), attributes={"long": "x" * 20_000}),
]
#: What the fast path's layout does not fit: written by the general path.
RUN_OTHERS = [
    span(run=("index", 1, _DOCUMENT, 2**63, 1)),  # not an int64: left out, logged
    span(run=("index", 1, _DOCUMENT, -1, 1)),
    span(run=("parse", 1, "not-a-uuid", 7, 1)),
    span(run=("parse", 1, "é" * 36, 7, 1)),
    span(run=("parse", 1, _DOCUMENT, 7, 1), parent_id="", parent_remote=False),
    span(run=("parse", 1, _DOCUMENT, 7, 1), start_ns=0),
    span(run=("parse", 1, _DOCUMENT, 7, 1), end_ns=0),
    span(run=("parse", 1, _DOCUMENT, 7, 1), attributes={"ragline.attempt": 9, "x": 1}),
    span(run=("parse", 1, _DOCUMENT, 7, 1), attributes={"ragline.document.id": "other"}),
]


@pytest.mark.parametrize("one", RUN_FITS + RUN_OTHERS)
def test_a_stage_runs_fast_path_writes_the_general_paths_bytes(one: tuple[Any, ...]) -> None:
    (wire,) = shipped([one])
    encoder = Encoder(RESOURCE)
    fast = encoder.run_span(wire)
    assert fast is None or fast == encoder.span(wire)
    assert_same([one])


def test_the_fast_path_takes_the_runs_a_worker_ships() -> None:
    encoder = Encoder(RESOURCE)
    assert all(encoder.run_span(wire) is not None for wire in shipped(RUN_FITS))
    assert all(encoder.run_span(wire) is None for wire in shipped(RUN_OTHERS))


def test_the_bytes_are_the_sdks_for_runs_with_errors_and_events() -> None:
    runs = [
        span(
            span_id=i + 1,
            run=("embed", 1 + i % 200, str(uuid.uuid4()), 2**20 + i, 1 + i % 3),
            attributes={"ragline.provider_calls": i % 4} if i % 3 else {},
            events=[("retry", 1_700_000_000_100_000_000, {"ragline.kind": "transient"})]
            if i % 5 == 0
            else [],
            status=2 if i % 5 == 0 else 0,
            description="TransientError: the provider said 503" if i % 5 == 0 else None,
        )
        for i in range(300)
    ]
    wire = shipped(runs)
    assert Encoder(RESOURCE).request(wire) == sdks(wire)


@pytest.mark.parametrize(
    "n",
    [
        0,
        1,
        127,
        128,
        300,
        16383,
        16384,
        2**21 - 1,
        2**21,
        2**28 - 1,
        2**28,
        2**63 - 1,
        -1,
        -(2**63),
    ],
)
def test_varints_are_protobufs(n: int) -> None:
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue

    assert b"\x18" + varint(n) == AnyValue(int_value=n).SerializeToString()


# -- property: random attributes, events and links --------------------------------------------

_scalars = (
    st.text(max_size=40)
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False)
    | st.binary(max_size=20)
)
_arrays = (
    st.lists(st.text(max_size=10), max_size=5)
    | st.lists(st.booleans(), max_size=5)
    | st.lists(st.integers(min_value=-(2**63), max_value=2**63 - 1), max_size=5)
    | st.lists(st.floats(allow_nan=False), max_size=5)
)
_attributes = st.dictionaries(
    st.text(max_size=20) | st.sampled_from(["ragline.stage", "ragline.attempt", "k"]),
    _scalars | _arrays,
    max_size=8,
)
_ids = st.integers(min_value=1, max_value=2**64 - 1)
_traces = st.integers(min_value=1, max_value=2**128 - 1).map(lambda n: f"{n:032x}")
_runs = st.none() | st.tuples(
    st.sampled_from(["parse", "embed"]),
    st.integers(1, 3),
    st.uuids().map(str),
    st.integers(1, 2**63 - 1),
    st.integers(1, 2),
)
_events = st.lists(
    st.tuples(st.text(max_size=10), st.integers(0, 2**64 - 1), _attributes), max_size=3
)
_links = st.lists(st.tuples(_traces, _ids, st.integers(0, 255), _attributes).map(list), max_size=2)
_scopes = st.sampled_from([("ragline", None), ("ragline", "1"), ("lib", None), ("", None)])


@st.composite
def _spans(draw: st.DrawFn) -> tuple[Any, ...]:
    parent = draw(st.none() | _ids)
    status, description = draw(st.tuples(st.integers(0, 2), st.none() | st.text(max_size=30)))
    scope, version = draw(_scopes)
    return span(
        name=draw(st.text(max_size=30)),
        trace_id=draw(_traces),
        span_id=draw(_ids),
        parent_id="" if parent is None else f"{parent:016x}",
        parent_remote=parent is not None and draw(st.booleans()),
        kind=draw(st.integers(min_value=0, max_value=4)),
        start_ns=draw(st.integers(0, 2**64 - 1)),
        end_ns=draw(st.integers(0, 2**64 - 1)),
        # a stage run's figures are its attributes' first values (some keys set again)
        run=draw(_runs),
        attributes=draw(_attributes),
        events=draw(_events),
        links=draw(_links),
        status=status,
        description=description,
        scope=scope,
        scope_version=version,
    )


@settings(max_examples=150, deadline=None)
@given(st.lists(_spans(), min_size=1, max_size=6))
def test_random_spans_decode_to_what_the_sdk_sends(spans: list[tuple[Any, ...]]) -> None:
    assert_same(spans)


_run_spans = (
    _spans()
    .map(lambda s: s[:-1])
    .flatmap(
        lambda head: st.tuples(
            st.sampled_from(["parse", "embed", "x" * 130]),
            st.integers(0, 300),
            st.uuids().map(str) | st.text(max_size=40),
            st.integers(-(2**63), 2**64 - 1),
            st.integers(0, 2**64 - 1),
        ).map(lambda run: (*head, run))
    )
)


@settings(max_examples=200, deadline=None)
@given(_run_spans)
def test_random_stage_runs_take_the_fast_path_to_the_same_bytes(one: tuple[Any, ...]) -> None:
    (wire,) = shipped([one])
    encoder = Encoder(RESOURCE)
    fast = encoder.run_span(wire)
    assert fast is None or fast == encoder.span(wire)
