"""The exporter process a traced process ships its spans to: nothing buffered is lost when
the process shuts down, a Ctrl-C meant for the worker does not end it first, and when it
dies the process that ships to it neither stops nor waits: spans are dropped, counted and
logged once."""

from __future__ import annotations

import logging
import signal
from collections.abc import Iterator

import pytest
from opentelemetry.trace import SpanKind

from bench.harness.otlp import Receiver, receiver
from runtime.process import tracing
from runtime.process.span_shipper import ExportingProvider

TRACE = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.fixture
def collector() -> Iterator[Receiver]:
    with receiver() as server:
        yield server


def provider_for(collector: Receiver, **env: str) -> ExportingProvider:
    settings = {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": collector.url, **env}
    provider = tracing.exporting_provider(settings)
    assert isinstance(provider, ExportingProvider)
    return provider


def runs(provider: ExportingProvider, count: int) -> None:
    """``count`` stage-run spans under the same (sampled, remote) parent."""
    tracer = provider.get_tracer(tracing.SCOPE)
    for i in range(count):
        span = tracer.start_span(
            "stage parse", tracing.parent_of(TRACE), SpanKind.CONSUMER, {"ragline.job.id": i}
        )
        span.end()


def test_spans_still_buffered_at_shutdown_are_exported(collector: Receiver) -> None:
    # A schedule delay no run reaches: only the shutdown's flush sends them.
    provider = provider_for(collector, OTEL_BSP_SCHEDULE_DELAY="600000")
    runs(provider, 1500)
    provider.shutdown()
    got = collector.received()
    assert sorted(s.attributes["ragline.job.id"] for s in got) == list(range(1500))
    assert {s.trace_id for s in got} == {TRACE[3:35]}
    assert {s.parent_span_id for s in got} == {TRACE[36:52]}
    assert provider.shipper.proc.returncode == 0


def test_a_ctrl_c_to_the_process_group_leaves_the_exporter_to_flush(collector: Receiver) -> None:
    provider = provider_for(collector, OTEL_BSP_SCHEDULE_DELAY="600000")
    assert provider.force_flush()  # it is up
    runs(provider, 10)
    provider.shipper.proc.send_signal(signal.SIGINT)
    provider.shipper.proc.send_signal(signal.SIGTERM)
    assert provider.force_flush()
    provider.shutdown()
    assert len(collector.received()) == 10


def test_a_dead_exporter_drops_spans_counted_and_logged_once(
    collector: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    provider = provider_for(collector, OTEL_BSP_SCHEDULE_DELAY="600000")
    runs(provider, 5)
    assert provider.force_flush()
    provider.shipper.proc.kill()
    provider.shipper.proc.wait()
    with caplog.at_level(logging.WARNING, "runtime.process.span_shipper"):
        runs(provider, 700)  # more than a batch: the thread writes to the dead pipe
        assert not provider.force_flush(5000)
        runs(provider, 300)  # known dead: dropped as they end
        provider.shutdown()
    assert provider.shipper.dead
    assert provider.shipper.dropped == 1000
    assert len(collector.received()) == 5
    lines = [r.getMessage() for r in caplog.records]
    assert sum("dropping spans" in line for line in lines) == 1, lines
    assert lines[-1] == "tracing: 1000 spans were dropped, not exported"


def test_a_full_queue_drops_instead_of_waiting(collector: Receiver) -> None:
    provider = provider_for(
        collector,
        OTEL_BSP_SCHEDULE_DELAY="600000",
        OTEL_BSP_MAX_QUEUE_SIZE="100",
        OTEL_BSP_MAX_EXPORT_BATCH_SIZE="1000",
    )
    runs(provider, 150)
    provider.shutdown()
    assert provider.shipper.dropped == 50
    assert len(collector.received()) == 100


def test_libraries_spans_and_roots_are_the_sdks_and_are_exported_too(
    collector: Receiver,
) -> None:
    provider = provider_for(collector)
    with (
        tracing.document_span(
            "submit", {"filename": "a.pdf"}, tracer=provider.get_tracer("ragline")
        ),
        provider.get_tracer("some.library").start_as_current_span("GET", kind=SpanKind.CLIENT),
    ):
        pass
    provider.shutdown()
    by_name = {s.name: s for s in collector.received()}
    assert by_name["GET"].parent_span_id == by_name["submit"].span_id
    assert by_name["submit"].attributes == {"ragline.filename": "a.pdf"}
    assert by_name["submit"].resource["service.name"] == "ragline"


def test_a_hung_exporter_is_killed_at_the_export_timeout(
    collector: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    provider = provider_for(collector, OTEL_BSP_EXPORT_TIMEOUT="1000")
    assert provider.force_flush()
    provider.shipper.proc.send_signal(signal.SIGSTOP)  # alive, reading nothing
    runs(provider, 10)
    with caplog.at_level(logging.WARNING, "runtime.process.span_shipper"):
        assert not provider.force_flush(200)
        provider.shutdown()  # returns: the exporter process is killed, not waited for
    assert provider.shipper.proc.returncode == -signal.SIGKILL
    assert "did not finish within OTEL_BSP_EXPORT_TIMEOUT (1 s)" in caplog.text
    assert collector.received() == []
