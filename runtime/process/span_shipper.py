"""A traced process's spans, shipped in batches to an exporter process of its own
(docs/tracing.md, "What it costs").

A worker is one Python process: encoding spans for OTLP and sending them, in a thread of
the worker, took the GIL from its event loop (on a no-op pipeline, half its throughput).
Here ended spans are tuples (:mod:`runtime.process.light_spans`) appended to a queue; a
thread writes them every ``OTEL_BSP_SCHEDULE_DELAY`` (or each ``..._MAX_EXPORT_BATCH_SIZE``
spans) as one msgpack frame to the stdin of ``python -m runtime.process.span_exporter``,
which runs the SDK's exporters the ``OTEL_*`` variables name.

The worker never waits on that process: a full queue (``OTEL_BSP_MAX_QUEUE_SIZE``) or a
dead exporter process drops spans, counted and logged once. Flushing (at shutdown,
however the command ends) waits for the exporter process to have exported everything,
up to ``OTEL_BSP_EXPORT_TIMEOUT``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import struct
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from typing import IO, Any

import msgspec
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, Tracer, TracerProvider
from opentelemetry.sdk.trace.sampling import ParentBased
from opentelemetry.trace import Link, Span

from runtime.process.light_spans import LightTracer, Wire

log = logging.getLogger(__name__)

#: Frame kinds: the first frame (resource and exporter names), a batch of spans, and a
#: flush request (answered on the exporter's stdout with the same sequence number).
HELLO, SPANS, FLUSH = b"H", b"S", b"F"
LENGTH = struct.Struct(">I")
SEQ = struct.Struct(">Q")
#: The pipe's capacity asked for (Linux): room for a few batches while the exporter works.
PIPE_BYTES = 1 << 20


class Hello(msgspec.Struct, frozen=True):
    resource: dict[str, Any]
    exporters: list[str]


class BatchSettings(msgspec.Struct, frozen=True):
    """The batch span processor's standard variables, as the shipper reads them."""

    max_queue: int = 2048
    batch: int = 512
    delay_s: float = 5.0
    timeout_s: float = 30.0

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> BatchSettings:
        def number(name: str, default: float) -> float:
            try:
                return float(env.get(name) or default)
            except ValueError:
                log.warning("%s: %r is not a number; using %g", name, env.get(name), default)
                return default

        return cls(
            max_queue=int(number("OTEL_BSP_MAX_QUEUE_SIZE", 2048)),
            batch=int(number("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512)),
            delay_s=number("OTEL_BSP_SCHEDULE_DELAY", 5000) / 1000,
            timeout_s=number("OTEL_BSP_EXPORT_TIMEOUT", 30000) / 1000,
        )


def frame(kind: bytes, payload: bytes) -> bytes:
    return LENGTH.pack(len(payload) + 1) + kind + payload


class Shipper:
    """The queue of ended spans, the thread that writes them, and the exporter process."""

    def __init__(
        self,
        resource: Mapping[str, Any],
        exporters: Sequence[str],
        settings: BatchSettings,
        env: Mapping[str, str] | None = None,
        command: Sequence[str] = (sys.executable, "-m", "runtime.process.span_exporter"),
    ) -> None:
        self.settings = settings
        self.queue: deque[Wire] = deque()
        self._max_queue, self._batch = settings.max_queue, settings.batch
        self.dropped = 0
        self.dead = False
        self.closed = False
        self._encode = msgspec.msgpack.Encoder().encode
        self._wake = threading.Event()
        self._write_lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._seq = 0
        self.proc = subprocess.Popen(
            list(command),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=None if env is None else {**os.environ, **env},
            # Out of the terminal's process group: a Ctrl-C goes to the worker, which
            # stops and then flushes through this process.
            start_new_session=True,
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self._stdin: IO[bytes] = self.proc.stdin
        self._stdout: IO[bytes] = self.proc.stdout
        _widen(self._stdin)
        self._write(frame(HELLO, self._encode(Hello(dict(resource), list(exporters)))))
        self._thread = threading.Thread(target=self._run, name="span-shipper", daemon=True)
        self._thread.start()

    # -- the worker's side: never blocks ---------------------------------------------------

    def add(self, span: Wire) -> None:
        queue = self.queue
        if len(queue) >= self._max_queue or self.dead:
            self._drop(1)
            return
        queue.append(span)
        if len(queue) == self._batch:
            self._wake.set()

    def _drop(self, count: int) -> None:
        if not self.dropped:
            why = "the exporter process is gone" if self.dead else "the span queue is full"
            log.warning(
                "tracing: dropping spans (%s; OTEL_BSP_MAX_QUEUE_SIZE=%d); the count is "
                "logged when the process ends",
                why,
                self.settings.max_queue,
            )
        self.dropped += count

    # -- the thread's side ------------------------------------------------------------------

    def _run(self) -> None:
        while not self.closed:
            self._wake.wait(self.settings.delay_s)
            self._wake.clear()
            self.ship()

    def ship(self) -> None:
        """Write every queued span, in frames of at most ``batch``."""
        with self._write_lock:
            queue, take = self.queue, self.queue.popleft
            while queue:
                # Encoded here, a batch at a time, not as each span ends: the worker's
                # loop only appends a tuple (the encoder's work stays warm in cache).
                spans = [take() for _ in range(min(len(queue), self._batch))]
                if self.dead or not self._write(frame(SPANS, self._encode(spans))):
                    self._drop(len(spans))

    def _write(self, data: bytes) -> bool:
        try:
            self._stdin.write(data)
            self._stdin.flush()
            return True
        except (OSError, ValueError):  # a broken pipe; ValueError: closed by shutdown
            if not self.dead:
                self.dead = True
                log.warning(
                    "tracing: the span exporter process ended (exit code %s); spans are "
                    "dropped from now on",
                    self.proc.poll(),
                )
            return False

    # -- flushing and shutting down -----------------------------------------------------------

    def flush(self, timeout_s: float | None = None) -> bool:
        """Ship what is queued and wait until the exporter process has exported it."""
        deadline = time.monotonic() + (self.settings.timeout_s if timeout_s is None else timeout_s)
        with self._flush_lock:
            self.ship()
            self._seq += 1
            with self._write_lock:
                if self.dead or not self._write(frame(FLUSH, SEQ.pack(self._seq))):
                    return False
            return self._acknowledged(self._seq, deadline)

    def _acknowledged(self, seq: int, deadline: float) -> bool:
        fd = self._stdout.fileno()
        while (left := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                break
            answer = os.read(fd, SEQ.size)
            if len(answer) < SEQ.size:
                return False  # it ended
            if SEQ.unpack(answer)[0] == seq:
                return True
        return False

    def shutdown(self) -> None:
        """Flush, then let the exporter process end (killed if it takes longer than the
        export timeout); logs how many spans were dropped, if any."""
        if self.closed:
            return
        self.closed = True
        deadline = time.monotonic() + self.settings.timeout_s
        # Whatever blocks below (a write to an exporter that stopped reading) ends when
        # the exporter process is killed at the deadline.
        killer = threading.Timer(self.settings.timeout_s, self.proc.kill)
        killer.daemon = True
        killer.start()
        try:
            self._wake.set()
            self._thread.join()
            self.flush(max(deadline - time.monotonic(), 0.0))
            with contextlib.suppress(OSError):
                self._stdin.close()
            self.proc.wait()
        finally:
            killer.cancel()
            self._stdout.close()
        if self.proc.returncode == -signal.SIGKILL:
            log.warning(
                "tracing: the span exporter process did not finish within "
                "OTEL_BSP_EXPORT_TIMEOUT (%g s); the spans it still held are lost",
                self.settings.timeout_s,
            )
        if self.dropped:
            log.warning("tracing: %d spans were dropped, not exported", self.dropped)


def _widen(pipe: IO[bytes]) -> None:
    """Ask for a larger pipe (Linux's F_SETPIPE_SZ) so a busy exporter does not make the
    shipper's thread wait on every batch."""
    import fcntl

    setpipe = getattr(fcntl, "F_SETPIPE_SZ", None)
    if setpipe is not None:
        with contextlib.suppress(OSError):
            fcntl.fcntl(pipe.fileno(), setpipe, PIPE_BYTES)


def to_wire(span: ReadableSpan) -> Wire:
    """An SDK span as the tuple the exporter process reads (a :class:`WireSpan`)."""
    ctx = span.context
    assert ctx is not None
    parent = span.parent
    scope = span.instrumentation_scope
    return (
        span.name,
        f"{ctx.trace_id:032x}",
        ctx.span_id,
        f"{parent.span_id:016x}" if parent else "",
        bool(parent and parent.is_remote),
        int(ctx.trace_flags),
        span.kind.value,
        span.start_time or 0,
        span.end_time or 0,
        dict(span.attributes or {}),
        [(e.name, e.timestamp, dict(e.attributes or {})) for e in span.events],
        [_link(link) for link in span.links],
        span.status.status_code.value,
        span.status.description,
        scope.name if scope else "",
        scope.version if scope else None,
        None,
    )


def _link(link: Link) -> Wire:
    ctx = link.context
    return (f"{ctx.trace_id:032x}", ctx.span_id, int(ctx.trace_flags), dict(link.attributes or {}))


class ShippingProcessor(SpanProcessor):
    """The SDK spans of the process (submissions, roots, libraries' own) to the shipper."""

    def __init__(self, shipper: Shipper) -> None:
        self.shipper = shipper

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        if span.context is not None and span.context.trace_flags.sampled:
            self.shipper.add(to_wire(span))

    def shutdown(self) -> None:
        self.shipper.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.shipper.flush(timeout_millis / 1000)


class ExportingProvider(TracerProvider):
    """The SDK's provider, exporting through a :class:`Shipper`. The tracers of the
    ``light`` scopes (ragline's own, whose attributes are known to be valid) record light
    spans under sampled parents when the sampler follows the parent; libraries' tracers
    are the SDK's."""

    def __init__(self, resource: Resource, shipper: Shipper, light: Sequence[str] = ()) -> None:
        super().__init__(resource=resource)
        self.shipper = shipper
        self.light = frozenset(light)
        self.add_span_processor(ShippingProcessor(shipper))

    def get_tracer(self, instrumenting_module_name: str, *args: Any, **kwargs: Any) -> trace.Tracer:
        sdk = super().get_tracer(instrumenting_module_name, *args, **kwargs)
        if (
            instrumenting_module_name not in self.light
            or not isinstance(self.sampler, ParentBased)
            or not isinstance(sdk, Tracer)
        ):
            return sdk
        return LightTracer(sdk, self.shipper.add, instrumenting_module_name)


def exporting_provider(
    resource: Mapping[str, Any],
    exporters: Sequence[str],
    env: Mapping[str, str],
    light: Sequence[str] = (),
) -> ExportingProvider:
    """A provider whose spans the ``exporters`` export in a process of their own (which
    reads the ``OTEL_*`` variables of ``env`` over this process's)."""
    full = Resource.create(dict(resource))
    shipper = Shipper(dict(full.attributes), exporters, BatchSettings.from_env(env), env)
    return ExportingProvider(full, shipper, light)
