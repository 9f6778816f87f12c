"""The exporter process's OTLP/HTTP client over real HTTP to a local receiver: it reads
the SDK exporter's variables as the SDK does, retries what the OTLP specification calls
retryable (honoring ``Retry-After``) so that spans arrive once, drops a batch it cannot
send with one log line and never raises, and compresses when told to. The backoff's
sleeps are recorded, not slept (no test here depends on time passing)."""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator
from typing import Any

import pytest

from bench.harness.otlp import Receiver, receiver
from runtime.process import otlp_http, tracing
from runtime.process.otlp_encoder import Encoder
from runtime.process.otlp_http import HttpxClient, KeptConnection, OtlpHttp, plain_http
from runtime.process.span_shipper import ExportingProvider
from tests.support.wire_spans import RESOURCE, TRACE, shipped, span


@pytest.fixture
def collector() -> Iterator[Receiver]:
    with receiver() as server:
        yield server


class Sleeps:
    def __init__(self) -> None:
        self.asked: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.asked.append(seconds)


def body(count: int = 3) -> bytes:
    spans = [span(span_id=i + 1, attributes={"ragline.job.id": i}) for i in range(count)]
    return Encoder(RESOURCE).request(shipped(spans))


#: The clients a test made, closed after it (the receiver keeps connections alive).
_made: list[OtlpHttp] = []


@pytest.fixture(autouse=True)
def _close_clients() -> Iterator[None]:
    yield
    while _made:
        _made.pop().shutdown()


@pytest.fixture(params=["http.client", "httpx"])
def transport(request: pytest.FixtureRequest) -> str:
    """Which client posts: http.client (a plain-HTTP endpoint) or httpx (HTTPS, a proxy);
    the retries around them are the same."""
    kind: str = request.param
    return kind


def kept(one: OtlpHttp, transport: str = "http.client") -> OtlpHttp:
    """``one``, closed after the test, posting through ``transport``."""
    if transport == "httpx":
        one.transport.close()
        one.transport = HttpxClient(one.url, True, one.timeout_s)
    _made.append(one)
    return one


def client(collector: Receiver, sleeps: Sleeps, transport: str, **env: str) -> OtlpHttp:
    url = collector.url
    return kept(OtlpHttp({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": url, **env}, sleeps), transport)


def error_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "ragline.span_exporter"]


def test_a_429_is_retried_after_what_retry_after_says_and_the_spans_arrive_once(
    collector: Receiver, caplog: pytest.LogCaptureFixture, transport: str
) -> None:
    collector.refuse(429, Retry_After="3")
    sleeps = Sleeps()
    with caplog.at_level(logging.INFO):
        assert client(collector, sleeps, transport).export(body(3), 3)
    assert sleeps.asked == [3.0]
    assert len(collector.requests) == 2
    assert sorted(s.attributes["ragline.job.id"] for s in collector.received()) == [0, 1, 2]
    assert error_lines(caplog) == []


def test_retryable_answers_back_off_then_the_batch_is_dropped_with_one_line(
    collector: Receiver, caplog: pytest.LogCaptureFixture, transport: str
) -> None:
    collector.refuse(503, times=100)
    sleeps = Sleeps()
    with caplog.at_level(logging.INFO):
        sender = client(collector, sleeps, transport, OTEL_EXPORTER_OTLP_TIMEOUT="10")
        assert not sender.export(body(), 3)
    # 1, 2, 4, 8 s with 20% jitter; 16 s is past the 10 s the export may take.
    assert len(sleeps.asked) == 4
    for asked, nominal in zip(sleeps.asked, [1, 2, 4, 8], strict=True):
        assert nominal * 0.8 <= asked <= nominal * 1.2
    assert len(collector.requests) == 5
    assert collector.received() == []
    assert error_lines(caplog) == [
        "tracing: dropped 3 spans: the OTLP endpoint answered HTTP 503 Service Unavailable"
    ]


def test_an_answer_that_is_not_retryable_drops_the_batch_at_once(
    collector: Receiver, caplog: pytest.LogCaptureFixture, transport: str
) -> None:
    collector.refuse(500, times=3)
    sleeps = Sleeps()
    with caplog.at_level(logging.INFO):
        assert not client(collector, sleeps, transport).export(body(), 3)
    assert sleeps.asked == [] and len(collector.requests) == 1
    assert error_lines(caplog) == [
        "tracing: dropped 3 spans: the OTLP endpoint answered HTTP 500 Internal Server Error"
    ]


def test_nobody_listening_drops_the_batch_and_raises_nothing(
    caplog: pytest.LogCaptureFixture, transport: str
) -> None:
    with receiver() as gone:
        url = gone.url
    sleeps = Sleeps()
    env = {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": url, "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "2.5"}
    with caplog.at_level(logging.INFO):
        assert not kept(OtlpHttp(env, sleeps), transport).export(body(), 3)
    assert len(sleeps.asked) == 2  # about 1 and 2 s; 4 s (±20%) is past the 2.5 s budget
    (line,) = error_lines(caplog)
    error = {"http.client": "ConnectionRefusedError", "httpx": "ConnectError"}[transport]
    assert line.startswith(f"tracing: dropped 3 spans: the OTLP endpoint answered {error}")


def test_gzip_and_headers_from_the_variables(collector: Receiver, transport: str) -> None:
    sleeps = Sleeps()
    sent = client(
        collector,
        sleeps,
        transport,
        OTEL_EXPORTER_OTLP_COMPRESSION="gzip",
        OTEL_EXPORTER_OTLP_HEADERS="api-key=s%20cret,X-Tenant=blue",
    )
    assert sent.export(body(2), 2)
    (headers,) = collector.requests
    assert headers["content-encoding"] == "gzip"
    assert headers["content-type"] == "application/x-protobuf"
    assert headers["api-key"] == "s cret" and headers["x-tenant"] == "blue"
    assert len(collector.received()) == 2  # the receiver un-gzipped a valid request


def test_the_variables_resolve_as_the_sdks_exporter_resolves_them() -> None:
    base = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318/"}
    assert otlp_http.endpoint(base) == "http://collector:4318/v1/traces"
    assert otlp_http.endpoint({}) == "http://localhost:4318/v1/traces"
    full = {**base, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://x/custom"}
    assert otlp_http.endpoint(full) == "https://x/custom"
    assert otlp_http.compression({"OTEL_EXPORTER_OTLP_TRACES_COMPRESSION": " GZIP "}) == "gzip"
    assert otlp_http.compression({"OTEL_EXPORTER_OTLP_COMPRESSION": "zstd"}) == "none"
    both = {"OTEL_EXPORTER_OTLP_TIMEOUT": "3", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "7.5"}
    assert otlp_http.timeout_s(both) == 7.5
    assert otlp_http.timeout_s({"OTEL_EXPORTER_OTLP_TIMEOUT": "soon"}) == 10.0
    assert otlp_http.retry_after_s("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0
    assert otlp_http.retry_after_s(" 2 ") == 2.0
    assert otlp_http.retry_after_s("later") is None


def test_only_otlp_over_http_protobuf_skips_the_sdk() -> None:
    assert tracing.direct_otlp("otlp", {})
    assert not tracing.direct_otlp("console", {})
    assert not tracing.direct_otlp("otlp", {"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc"})
    credentials = {"OTEL_PYTHON_EXPORTER_OTLP_HTTP_CREDENTIAL_PROVIDER": "vault"}
    assert not tracing.direct_otlp("otlp", credentials)


def test_a_broken_kept_connection_is_replaced_at_once(collector: Receiver) -> None:
    sleeps = Sleeps()
    sender = client(collector, sleeps, "http.client")
    assert sender.export(body(1), 1)
    assert isinstance(sender.transport, KeptConnection)
    sock = sender.transport.connection.sock
    assert sock is not None  # kept alive
    sock.shutdown(socket.SHUT_RDWR)  # as if the collector had closed it while idle
    assert sender.export(body(2), 2)
    assert sleeps.asked == [] and len(collector.received()) == 3


def test_a_connection_the_collector_closes_is_opened_again(collector: Receiver) -> None:
    collector.refuse(503, Retry_After="0", Connection="close")
    sleeps = Sleeps()
    assert client(collector, sleeps, "http.client").export(body(2), 2)
    assert sleeps.asked == [0.0] and len(collector.received()) == 2


def test_plain_http_without_a_proxy_skips_httpx(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY", "no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    assert plain_http("http://localhost:4318/v1/traces")
    assert not plain_http("https://collector:4318/v1/traces")
    monkeypatch.setenv("HTTP_PROXY", "http://proxy:3128")
    assert not plain_http("http://collector:4318/v1/traces")
    monkeypatch.setenv("NO_PROXY", "collector,localhost")
    assert plain_http("http://collector:4318/v1/traces")
    assert not plain_http("http://elsewhere:4318/v1/traces")
    proxied = OtlpHttp({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://elsewhere:4318/x"})
    assert isinstance(kept(proxied).transport, HttpxClient)


# -- through the exporter process ------------------------------------------------------------


def runs(provider: ExportingProvider, count: int) -> None:
    """``count`` stage-run spans under the same (sampled, remote) parent."""
    tracer = provider.get_tracer(tracing.SCOPE)
    parent = tracing.parent_of(f"00-{TRACE}-b7ad6b7169203331-01")
    for i in range(count):
        tracer.start_span("stage parse", parent, attributes={"ragline.job.id": i}).end()


def provider_for(collector: Receiver, **env: str) -> ExportingProvider:
    settings: dict[str, Any] = {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": collector.url, **env}
    provider = tracing.exporting_provider(settings)
    assert isinstance(provider, ExportingProvider)
    return provider


def test_a_throttled_collector_gets_every_span_once_from_the_exporter_process(
    collector: Receiver,
) -> None:
    collector.refuse(429, Retry_After="0")
    collector.refuse(503, Retry_After="0")
    provider = provider_for(collector, OTEL_BSP_SCHEDULE_DELAY="600000")
    runs(provider, 700)  # two batches
    provider.shutdown()
    assert provider.shipper.proc.returncode == 0
    got = sorted(s.attributes["ragline.job.id"] for s in collector.received())
    assert got == list(range(700))
    assert len(collector.requests) == 4


def test_a_failing_collector_costs_the_worker_nothing_and_logs_one_line_a_batch(
    collector: Receiver, capfd: pytest.CaptureFixture[str]
) -> None:
    collector.refuse(500, times=1000)
    provider = provider_for(collector, OTEL_BSP_SCHEDULE_DELAY="600000")
    runs(provider, 10)
    assert provider.force_flush()  # answered: the batch was tried and dropped
    runs(provider, 10)
    provider.shutdown()
    assert provider.shipper.dropped == 0  # the worker's side queued and shipped it all
    assert provider.shipper.proc.returncode == 0
    lines = [line for line in capfd.readouterr().err.splitlines() if "tracing:" in line]
    assert (
        lines
        == [
            "ragline: tracing: dropped 10 spans: the OTLP endpoint answered HTTP 500 "
            "Internal Server Error"
        ]
        * 2
    )
