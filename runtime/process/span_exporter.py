"""The exporter process of a traced ragline process: ``python -m runtime.process.span_exporter``,
started by :class:`runtime.process.span_shipper.Shipper`, reading its frames on stdin.

OTLP over HTTP/protobuf (the common case) it sends itself: the shipped spans are written
straight into the request's protobuf bytes (:mod:`runtime.process.otlp_encoder`) and
POSTed as the SDK's exporter would (:mod:`runtime.process.otlp_http`), a seventh of the
CPU of building the SDK's spans and its protobuf objects. For every other exporter the
``OTEL_TRACES_EXPORTER`` names (OTLP over gRPC, console, entry points) it turns each span
back into the SDK's ``ReadableSpan`` and hands it to the SDK's exporter. Either way a
collector receives what the SDK in the worker would have sent; the encoding and the HTTP
round trips cost this process's CPU, not the worker's. A reader thread keeps the pipe
drained while an export is under way.
It ignores SIGINT and SIGTERM (a terminal's Ctrl-C reaches the whole process group: the
worker flushes through it on the way out) and ends when its stdin does.
"""

from __future__ import annotations

import logging
import os
import queue
import signal
import sys
import threading
from collections.abc import Mapping, Sequence
from typing import IO, Any

import msgspec
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from runtime.process.interpreter import tune_worker_interpreter
from runtime.process.light_spans import WireLink, WireSpan
from runtime.process.otlp_encoder import Encoder
from runtime.process.otlp_http import OtlpHttp
from runtime.process.span_shipper import FLUSH, HELLO, LENGTH, SEQ, SPANS, BatchSettings, Hello
from runtime.process.tracing import direct_otlp, exporter, run_attributes

log = logging.getLogger("ragline.span_exporter")

_spans = msgspec.msgpack.Decoder(list[WireSpan]).decode
_hello = msgspec.msgpack.Decoder(Hello).decode
#: What the reader hands the exporting loop: bytes read from the pipe, or None at the end
#: of the input.
Item = bytes | None


#: How much of the pipe one read takes: everything the shipper has written, several frames
#: of a batch each, in one system call.
READ_BYTES = 1 << 20


def read_chunks(fd: int, out: queue.SimpleQueue[Item]) -> None:
    """The pipe's bytes to ``out`` as they come, until it ends (then None).

    Raw bytes, not decoded spans: this thread only keeps the pipe drained (the shipper
    never waits on a full pipe while an export is under way) and hardly holds the GIL;
    the exporting loop splits and decodes the frames."""
    try:
        while chunk := os.read(fd, READ_BYTES):
            out.put(chunk)
    finally:
        out.put(None)


class Frames:
    """Splits the pipe's bytes into frames; a frame cut between two reads waits for the
    rest."""

    def __init__(self) -> None:
        self.rest = b""

    def feed(self, chunk: bytes) -> list[tuple[bytes, memoryview]]:
        """The whole frames ``chunk`` completes: (kind, payload) pairs, in order."""
        data = self.rest + chunk if self.rest else chunk
        view, size, at, out = memoryview(data), len(data), 0, []
        header = LENGTH.size
        while size - at >= header:
            (length,) = LENGTH.unpack_from(data, at)
            end = at + header + length
            if end > size:
                break
            out.append((data[at + header : at + header + 1], view[at + header + 1 : end]))
            at = end
        self.rest = data[at:]
        return out

    def first(self, fd: int) -> tuple[bytes, memoryview] | None:
        """The first frame (the hello), read from ``fd`` as far as it needs; the bytes
        after it stay for :meth:`feed`. None if the input ends first."""
        header = LENGTH.size
        while True:
            data = self.rest
            if len(data) >= header:
                end = header + LENGTH.unpack_from(data)[0]
                if len(data) >= end:
                    self.rest = data[end:]
                    return data[header : header + 1], memoryview(data)[header + 1 : end]
            chunk = os.read(fd, READ_BYTES)
            if not chunk:
                return None
            self.rest = data + chunk


def context_of(trace_id: str, span_id: int, flags: int, remote: bool = False) -> SpanContext:
    return SpanContext(int(trace_id, 16), span_id, remote, TraceFlags(flags))


def readable(span: WireSpan, resource: Resource) -> ReadableSpan:
    """The SDK's span for one shipped span."""
    parent = (
        context_of(span.trace_id, int(span.parent_id, 16), span.flags, span.parent_remote)
        if span.parent_id
        else None
    )
    attributes = span.attributes
    if span.run is not None:
        attributes = {**run_attributes(*span.run), **attributes}
    return ReadableSpan(
        name=span.name,
        context=context_of(span.trace_id, span.span_id, span.flags),
        parent=parent,
        resource=resource,
        attributes=attributes,
        events=[Event(e.name, e.attributes, e.time_ns) for e in span.events],
        links=[_link(link) for link in span.links],
        kind=SpanKind(span.kind),
        status=Status(StatusCode(span.status), span.description),
        start_time=span.start_ns,
        end_time=span.end_ns,
        instrumentation_scope=InstrumentationScope(span.scope, span.scope_version),
    )


def _link(link: WireLink) -> Link:
    return Link(context_of(link.trace_id, link.span_id, link.flags), link.attributes)


class Exporting:
    """The loop: export what arrives, in batches of at most ``batch``; answer flushes.

    ``direct``: the OTLP/HTTP endpoints sent to without the SDK (one request body, encoded
    once, for all of them); ``exporters``: the SDK's, given ``ReadableSpan``s."""

    def __init__(
        self,
        exporters: Sequence[SpanExporter],
        resource: Mapping[str, Any],
        answers: IO[bytes],
        direct: Sequence[OtlpHttp] = (),
    ) -> None:
        self.exporters = exporters
        self.direct = direct
        self.resource = Resource(resource)
        self.encoder = Encoder(resource)
        self.answers = answers
        self.batch = BatchSettings.from_env(os.environ).batch

    def run(self, items: queue.SimpleQueue[Item], frames: Frames) -> None:
        """Until the input ends: take every chunk already read, then export. Spans that
        arrived together go out in whole batches; what is left (less than a batch) goes
        once nothing more is waiting, or with a flush."""
        pending: list[WireSpan] = []
        while True:
            item = items.get()
            while True:  # take what else is there before exporting
                if item is None:
                    self.export(pending)
                    return
                pending = self.take(frames.feed(item), pending)
                if items.empty():
                    break
                item = items.get()
            pending = self.export(pending)

    def take(self, got: list[tuple[bytes, memoryview]], pending: list[WireSpan]) -> list[WireSpan]:
        """Decode ``got``'s frames onto ``pending``, exporting each whole batch and, at a
        flush, everything before it; returns what is still pending."""
        batch = self.batch
        for kind, payload in got:
            if kind == SPANS:
                pending += _spans(payload)
                if len(pending) >= batch:
                    whole = len(pending) - len(pending) % batch
                    self.export(pending[:whole])
                    del pending[:whole]
            elif kind == FLUSH:
                pending = self.export(pending)
                self.answer(SEQ.unpack(payload)[0])
        return pending

    def export(self, spans: list[WireSpan]) -> list[WireSpan]:
        for start in range(0, len(spans), self.batch):
            chunk = spans[start : start + self.batch]
            if self.direct:
                self.send(chunk)
            if self.exporters:
                self.through_sdk(chunk)
        return []

    def send(self, chunk: list[WireSpan]) -> None:
        try:
            body = self.encoder.request(chunk)
        except Exception:
            log.exception("tracing: encoding %d spans failed", len(chunk))
            return
        for one in self.direct:
            one.export(body, len(chunk))

    def through_sdk(self, chunk: list[WireSpan]) -> None:
        spans = [readable(s, self.resource) for s in chunk]
        for one in self.exporters:
            try:
                one.export(spans)
            except Exception:
                log.exception("tracing: exporting %d spans failed", len(spans))

    def answer(self, seq: int) -> None:
        try:
            self.answers.write(SEQ.pack(seq))
            self.answers.flush()
        except OSError:
            pass


def main(stdin: IO[bytes] = sys.stdin.buffer, stdout: IO[bytes] = sys.stdout.buffer) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="ragline: %(message)s")
    fd, frames = stdin.fileno(), Frames()
    first = frames.first(fd)
    if first is None:
        return 0
    kind, payload = first
    if kind != HELLO:
        log.error("tracing: the span exporter got no hello frame")
        return 2
    hello = _hello(payload)
    env = os.environ
    direct = [OtlpHttp(env) for name in hello.exporters if direct_otlp(name, env)]
    exporters = [exporter(name, env) for name in hello.exporters if not direct_otlp(name, env)]
    exporting = Exporting(exporters, hello.resource, stdout, direct)
    tune_worker_interpreter()  # start-up's objects out of the collector's walks
    items: queue.SimpleQueue[Item] = queue.SimpleQueue()
    items.put(b"")  # the frames read with the hello, if any, come first
    reader = threading.Thread(target=read_chunks, args=(fd, items), daemon=True)
    reader.start()
    exporting.run(items, frames)
    for one in exporters:
        one.shutdown()
    for sender in direct:
        sender.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
