"""A tiny OTLP/HTTP trace receiver: what a collector is to ragline's exporter, for tests
and benchmarks (docs/tracing.md).

It accepts ``POST /v1/traces`` (``application/x-protobuf``, gzip or not), decodes each
``ExportTraceServiceRequest`` with ``opentelemetry-proto`` (installed with the OTLP
exporter) and keeps the spans as :class:`ReceivedSpan`. :func:`receiver` runs one in a
thread; ``python -m bench.harness.otlp PORT_FILE`` runs one as a process of its own (a
benchmark's exporter should not share the measured process's CPU) that writes its port to
``PORT_FILE`` and counts spans only.
"""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import msgspec
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

PATH = "/v1/traces"


class ReceivedEvent(msgspec.Struct, frozen=True):
    name: str
    attributes: dict[str, Any]


class ReceivedSpan(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    trace_id: str
    span_id: str
    #: Empty for a root span.
    parent_span_id: str
    attributes: dict[str, Any]
    events: list[ReceivedEvent]
    #: 0 unset, 1 ok, 2 error (OTLP's Status.StatusCode).
    status: int
    #: The exporting process's resource (``service.name``, ...).
    resource: dict[str, Any]
    start_ns: int


def _value(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    return getattr(any_value, kind) if kind else None


def _attrs(pairs: Any) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in pairs}


def decode(body: bytes) -> list[ReceivedSpan]:
    """The spans of one export request."""
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    return [
        ReceivedSpan(
            name=span.name,
            trace_id=span.trace_id.hex(),
            span_id=span.span_id.hex(),
            parent_span_id=span.parent_span_id.hex(),
            attributes=_attrs(span.attributes),
            events=[ReceivedEvent(e.name, _attrs(e.attributes)) for e in span.events],
            status=int(span.status.code),
            resource=_attrs(rs.resource.attributes),
            start_ns=span.start_time_unix_nano,
        )
        for rs in request.resource_spans
        for ss in rs.scope_spans
        for span in ss.spans
    ]


def count(body: bytes) -> int:
    """How many spans one export request holds."""
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    return sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans)


class Receiver(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, keep: bool = True) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.keep = keep
        self.lock = threading.Lock()
        self.spans: list[ReceivedSpan] = []
        self.count = 0
        #: Answers to give before accepting (status, headers), first first: a collector
        #: that is throttling (429 and ``Retry-After``) or failing.
        self.refusals: list[tuple[int, dict[str, str]]] = []
        #: Each request's headers (lower-cased names), refused or not.
        self.requests: list[dict[str, str]] = []

    def refuse(self, status: int, times: int = 1, **headers: str) -> None:
        """Answer the next ``times`` requests ``status`` (with ``headers``: ``Retry_After``
        is ``Retry-After``), accepting nothing from them."""
        named = {k.replace("_", "-"): v for k, v in headers.items()}
        with self.lock:
            self.refusals += [(status, named)] * times

    def refusal(self, headers: dict[str, str]) -> tuple[int, dict[str, str]] | None:
        """Record a request; the answer to give it instead of accepting it, if any."""
        with self.lock:
            self.requests.append(headers)
            return self.refusals.pop(0) if self.refusals else None

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}{PATH}"

    def take(self, body: bytes) -> None:
        if not self.keep:
            # Count only: the protobuf's parse, not a Python object per span (a
            # collector's cost, not a test's, on the host the benchmark measures).
            with self.lock:
                self.count += count(body)
            return
        spans = decode(body)
        with self.lock:
            self.count += len(spans)
            self.spans.extend(spans)

    def received(self) -> list[ReceivedSpan]:
        with self.lock:
            return list(self.spans)


class _Handler(BaseHTTPRequestHandler):
    server: Receiver
    #: Keep-alive, as a collector keeps its clients' connections: with HTTP/1.0's close
    #: after each answer the exporter would pay a connection (and a name lookup) a batch.
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        if self.path != PATH:
            self.send_error(404)
            return
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        refused = self.server.refusal({k.lower(): v for k, v in self.headers.items()})
        if refused is not None:
            status, headers = refused
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        self.server.take(body)
        answer = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def do_GET(self) -> None:
        """``GET /count``: spans received so far (for a receiver in another process)."""
        text = str(self.server.count).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(text)))
        self.end_headers()
        self.wfile.write(text)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: one line per export would drown the test's output."""


@contextmanager
def receiver(keep: bool = True) -> Iterator[Receiver]:
    """A receiver serving from a thread of this process until the block ends."""
    server = Receiver(keep)
    thread = threading.Thread(target=server.serve_forever, name="otlp-receiver", daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def main(port_file: str) -> None:
    server = Receiver(keep=False)
    Path(port_file).write_text(str(server.server_address[1]))
    server.serve_forever()


if __name__ == "__main__":
    main(sys.argv[1])


class ReceiverProcess:
    """A receiver running as ``python -m bench.harness.otlp``."""

    def __init__(self, url: str) -> None:
        self.url = url

    def count(self) -> int:
        """Spans it received so far."""
        base = self.url.removesuffix(PATH)
        with urllib.request.urlopen(f"{base}/count", timeout=10) as answer:
            return int(answer.read())


@contextmanager
def receiver_process() -> Iterator[ReceiverProcess]:
    """A receiver in a process of its own (not competing for this one's GIL)."""
    with tempfile.TemporaryDirectory() as tmp:
        port_file = Path(tmp) / "port"
        proc = subprocess.Popen([sys.executable, "-m", "bench.harness.otlp", str(port_file)])
        try:
            deadline = time.monotonic() + 30
            while not port_file.exists() or not port_file.read_text():
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the OTLP receiver did not start")
                time.sleep(0.05)
            yield ReceiverProcess(f"http://127.0.0.1:{port_file.read_text()}{PATH}")
        finally:
            proc.kill()
            proc.wait(10)


def exporting_provider(url: str, **env: str) -> Any:
    """The tracer provider a ragline process gets from
    ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=url`` (:func:`runtime.process.tracing.
    exporting_provider`, not installed as the global one):
    spans shipped to an exporter process running the OTLP/HTTP exporter; ``env``: more
    ``OTEL_*`` variables (the batch's, ``OTEL_BSP_*``)."""
    from runtime.process.tracing import exporting_provider as configured

    return configured({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": url, **env})


def cpu_s(pid: int) -> float:
    """The CPU time (user and system) process ``pid`` has used so far (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
