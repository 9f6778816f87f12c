"""Stage-run spans recorded as plain tuples: what a traced worker pays per run when it
exports (docs/tracing.md, "What it costs").

The SDK's ``Span`` checks every attribute, locks, asks the sampler and its processors; at
hundreds of runs a second that was a third of a no-op hop's CPU. A :class:`LightSpan`
records ids, times, attributes, events and status, and at its end hands one tuple
(:data:`Wire`) to a sink: the batch that goes to the exporter process
(:mod:`runtime.process.span_shipper`), which turns it into the SDK's span and exports it.

:class:`LightTracer` opens one only where the SDK's default parent-based sampler would
record without asking anything else: under a parent that is valid and sampled. Roots,
unsampled parents and other samplers go to the SDK tracer it wraps.
"""

from __future__ import annotations

import contextlib
import random
import time
import traceback
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import msgspec
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import (
    Link,
    Span,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    Tracer,
    TraceState,
)
from opentelemetry.util import types

#: The tuple a span ends as (the fields of :class:`WireSpan`, in order).
Wire = tuple[Any, ...]
#: Where ended spans go.
Sink = Callable[[Wire], None]
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)


class WireEvent(msgspec.Struct, array_like=True, frozen=True):
    name: str
    time_ns: int
    attributes: dict[str, Any]


class WireLink(msgspec.Struct, array_like=True, frozen=True):
    trace_id: str
    span_id: int
    flags: int
    attributes: dict[str, Any]


#: A stage run's own figures, which the exporter process turns into its attributes
#: (:func:`runtime.process.tracing.run_attributes`): stage, attempt, document id, job id,
#: generation. Formatting them is left to that process.
Run = tuple[str, int, uuid.UUID, int, int]
#: A run as the exporter process reads it: the document id stays the string msgpack
#: carries (what its attribute is), not parsed into a UUID to be formatted back.
WireRun = tuple[str, int, str, int, int]


class WireSpan(msgspec.Struct, array_like=True, frozen=True):
    """An ended span as it travels to the exporter process (msgpack, an array)."""

    name: str
    #: 32 hex digits (a job's traceparent carries them so: no parsing in the worker).
    trace_id: str
    span_id: int
    #: 16 hex digits; empty for a root span.
    parent_id: str
    parent_remote: bool
    flags: int
    kind: int
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    events: list[WireEvent]
    links: list[WireLink]
    status: int
    description: str | None
    scope: str
    scope_version: str | None
    run: WireRun | None


def new_span_id() -> int:
    while True:
        span_id = random.getrandbits(64)
        if span_id:
            return span_id


class LightSpan(Span):
    """A recording span that is only its data (no checks, no locks, no processors)."""

    __slots__ = (
        "_attributes",
        "_context",
        "_description",
        "_end_ns",
        "_events",
        "_kind",
        "_name",
        "_parent_id",
        "_remote",
        "_run",
        "_scope",
        "_sink",
        "_span_id",
        "_start_ns",
        "_status",
        "_trace_id",
        "_trace_state",
    )

    def __init__(
        self,
        sink: Sink,
        scope: str,
        name: str,
        parent: tuple[str, str, bool],
        kind: SpanKind,
        attributes: types.Attributes = None,
        trace_state: TraceState | None = None,
        run: Run | None = None,
    ) -> None:
        """``parent``: its trace id and span id (hex) and whether it is remote (valid,
        sampled); ``run``: a stage run's figures, made attributes by the exporter."""
        self._sink = sink
        self._scope = scope
        self._name = name
        self._trace_id, self._parent_id, self._remote = parent
        self._trace_state = trace_state
        self._kind = kind
        self._run = run
        self._span_id = random.getrandbits(64) or new_span_id()
        self._attributes: dict[str, Any] = dict(attributes) if attributes else {}
        self._events: list[tuple[str, int, dict[str, Any]]] | tuple[()] = ()
        self._status = 0
        self._description: str | None = None
        self._context: SpanContext | None = None
        self._end_ns = 0
        self._start_ns = time.time_ns()

    def get_span_context(self) -> SpanContext:
        if self._context is None:
            self._context = SpanContext(
                int(self._trace_id, 16), self._span_id, False, _SAMPLED, self._trace_state
            )
        return self._context

    def is_recording(self) -> bool:
        return not self._end_ns

    def set_attribute(self, key: str, value: types.AnyValue) -> None:
        if not self._end_ns and value is not None:
            self._attributes[key] = value

    def set_attributes(self, attributes: Mapping[str, types.AnyValue]) -> None:
        for key, value in attributes.items():
            self.set_attribute(key, value)

    def add_event(
        self, name: str, attributes: types.Attributes = None, timestamp: int | None = None
    ) -> None:
        if not self._end_ns:
            at = time.time_ns() if timestamp is None else timestamp
            event = (name, at, dict(attributes) if attributes else {})
            self._events = [*self._events, event]

    def update_name(self, name: str) -> None:
        if not self._end_ns:
            self._name = name

    def set_status(self, status: Status | StatusCode, description: str | None = None) -> None:
        if self._end_ns:
            return
        code = status.status_code if isinstance(status, Status) else status
        if isinstance(status, Status):
            description = status.description
        if self._status == StatusCode.OK.value:
            return  # OK is final, as in the SDK
        self._status = code.value
        self._description = description if code is StatusCode.ERROR else None

    def record_exception(
        self,
        exception: BaseException,
        attributes: types.Attributes = None,
        timestamp: int | None = None,
        escaped: bool = False,
    ) -> None:
        values: dict[str, Any] = {
            "exception.type": type(exception).__qualname__,
            "exception.message": str(exception),
            "exception.stacktrace": "".join(traceback.format_exception(exception)),
            "exception.escaped": str(escaped),
        }
        values.update(attributes or {})
        self.add_event("exception", values, timestamp)

    def end(self, end_time: int | None = None) -> None:
        if self._end_ns:
            return
        self._end_ns = end_time or time.time_ns()
        self._sink(
            (
                self._name,
                self._trace_id,
                self._span_id,
                self._parent_id,
                self._remote,
                1,
                self._kind.value,
                self._start_ns,
                self._end_ns,
                self._attributes,
                self._events,
                (),
                self._status,
                self._description,
                self._scope,
                None,
                self._run,
            )
        )


class LightTracer(Tracer):
    """Light spans under sampled parents; everything else from the SDK tracer ``sdk``."""

    def __init__(self, sdk: Tracer, sink: Sink, scope: str) -> None:
        self.sdk = sdk
        self.sink = sink
        self.scope = scope

    def start_span(
        self,
        name: str,
        context: Context | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: types.Attributes = None,
        links: Sequence[Link] | None = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
    ) -> Span:
        parent = trace.get_current_span(context).get_span_context()
        if links or start_time is not None or not (parent.is_valid and parent.trace_flags.sampled):
            return self.sdk.start_span(
                name,
                context,
                kind,
                attributes,
                links,
                start_time,
                record_exception,
                set_status_on_exception,
            )
        ids = (f"{parent.trace_id:032x}", f"{parent.span_id:016x}", parent.is_remote)
        return LightSpan(self.sink, self.scope, name, ids, kind, attributes, parent.trace_state)

    def start_run(self, name: str, traceparent: str, run: Run) -> Span:
        """A stage run's span (kind consumer) under the sampled parent its job's
        ``traceparent`` names (``00-<trace id>-<span id>-<flags>``, already checked):
        no context built around the parent, no attribute formatted here."""
        parent = (traceparent[3:35], traceparent[36:52], True)
        return LightSpan(self.sink, self.scope, name, parent, SpanKind.CONSUMER, run=run)

    # The API declares its own private context-manager type; this one behaves the same.
    @contextlib.contextmanager
    def start_as_current_span(  # type: ignore[override]
        self,
        name: str,
        context: Context | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: types.Attributes = None,
        links: Sequence[Link] | None = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
        end_on_exit: bool = True,
    ) -> Iterator[Span]:
        span = self.start_span(name, context, kind, attributes, links, start_time)
        with trace.use_span(
            span,
            end_on_exit=end_on_exit,
            record_exception=record_exception,
            set_status_on_exception=set_status_on_exception,
        ) as current:
            yield current
