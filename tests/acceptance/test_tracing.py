"""One trace per document across worker processes (issue 36, item 4): a document crosses
the five stages in three ``python -m runtime --stages ...`` processes that export over
OTLP/HTTP to a receiver this test runs; the submission's span (the SDK's in-memory
exporter, in this process) is the parent of a span per stage run, and the stage that
failed once shows both attempts."""

from __future__ import annotations

import signal
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Tracer

from bench.harness.cli import Cli
from bench.harness.db import Databases, sql
from bench.harness.fleet import submit_jobs
from bench.harness.otlp import ReceivedSpan, receiver
from bench.harness.procs import REPO, StartWorker, WorkerProcess, wait_for
from bench.harness.serve import running_server
from runtime.process import tracing

SPLIT = ("parse,chunk", "vision,embed", "index")
STAGES = ("parse", "chunk", "vision", "embed", "index")
SAMPLES = REPO / "samples"
FAST = ("--poll", "0.2", "--rescue-every", "0.5")


@pytest.fixture
def in_memory() -> Iterator[tuple[Tracer, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    try:
        yield provider.get_tracer(tracing.SCOPE), exporter
    finally:
        provider.shutdown()


def ready(dsn: str) -> bool:
    return bool(sql(dsn, "SELECT status::text FROM documents")[0][0] == "ready")


def stop(workers: list[WorkerProcess]) -> None:
    """SIGTERM: a worker stops, then flushes its spans on the way out."""
    for w in workers:
        w.signal(signal.SIGTERM)
    for w in workers:
        assert w.wait(30) == 0, w.output()


def runs(spans: list[ReceivedSpan]) -> list[ReceivedSpan]:
    return sorted((s for s in spans if s.name.startswith("stage ")), key=lambda s: s.start_ns)


def test_a_document_in_three_worker_processes_is_one_trace(
    dsn: str, start_worker: StartWorker, in_memory: tuple[Tracer, InMemorySpanExporter]
) -> None:
    tracer, exporter = in_memory
    with receiver() as collector:
        with tracing.document_span("submit", {"test": True}, tracer=tracer):
            [doc] = submit_jobs(dsn, 1)
        env = {
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": collector.url,
            "OTEL_SERVICE_NAME": "ragline-test-worker",
            # A delay no run reaches: every span arrives in the flush a SIGTERM'd worker
            # makes on its way out (through its exporter process).
            "OTEL_BSP_SCHEDULE_DELAY": "600000",
            # chunk fails its first attempt (an unclassified error: counted, retried)
            "RAGLINE_TEST_FAIL": "chunk=crash",
            "RAGLINE_TEST_FAIL_CALLS": "chunk=1",
            "RAGLINE_RETRY_BASE_S": "0.1",
        }
        workers = [start_worker(dsn, "--stages", s, *FAST, **env) for s in SPLIT]
        wait_for(lambda: ready(dsn), timeout_s=60, what="the document to be ready")
        stop(workers)
        spans = collector.received()

    [root] = exporter.get_finished_spans()
    trace_id = f"{root.context.trace_id:032x}"
    root_id = f"{root.context.span_id:016x}"
    stage_runs = runs(spans)
    names = [s.name.removeprefix("stage ") for s in stage_runs]
    assert names == ["parse", "chunk", "chunk", "vision", "embed", "index"], names
    assert {s.trace_id for s in spans} == {trace_id}
    assert {s.parent_span_id for s in stage_runs} == {root_id}
    assert {s.attributes["ragline.document.id"] for s in stage_runs} == {str(doc)}
    assert {s.resource["service.name"] for s in spans} == {"ragline-test-worker"}

    # Each stage ran in the process that serves it: three processes, by their ids.
    pids = {w.pid for w in workers}
    where = {s.name: s.resource["process.pid"] for s in stage_runs}
    assert set(where.values()) == pids
    assert where["stage parse"] == where["stage chunk"] == workers[0].pid
    assert where["stage vision"] == where["stage embed"] == workers[1].pid
    assert where["stage index"] == workers[2].pid

    failed, retried = (s for s in stage_runs if s.name == "stage chunk")
    assert (failed.attributes["ragline.attempt"], retried.attributes["ragline.attempt"]) == (1, 2)
    assert failed.status == 2  # ERROR
    assert [e.name for e in failed.events] == ["retry"]
    assert failed.events[0].attributes["ragline.error.kind"] == "error"
    assert failed.attributes["ragline.outcome"] == "retry"
    outcomes = Counter(s.attributes["ragline.outcome"] for s in stage_runs)
    assert outcomes == {"succeeded": 5, "retry": 1}


def test_without_exporter_settings_nothing_is_sent_and_jobs_carry_no_context(
    dsn: str, start_worker: StartWorker
) -> None:
    with receiver() as collector:
        submit_jobs(dsn, 1)  # no SDK provider in this process: the API is a no-op
        assert sql(dsn, "SELECT trace_context FROM stage_jobs")[0][0] is None
        env = {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": collector.url, "OTEL_TRACES_EXPORTER": "none"}
        worker = start_worker(dsn, "--exit-when-idle", *FAST, **env)
        assert worker.wait(60) == 0, worker.output()
        assert ready(dsn)
        assert collector.received() == []


def test_an_unknown_exporter_stops_the_worker_with_one_line(
    dsn: str, start_worker: StartWorker
) -> None:
    worker = start_worker(dsn, "--exit-when-idle", OTEL_TRACES_EXPORTER="jaeger-thrift")
    assert worker.wait(30) == 2
    out = worker.output().strip().splitlines()
    assert out[-1].startswith("ragline: OTEL_TRACES_EXPORTER: unknown exporter 'jaeger-thrift'")
    assert "Traceback" not in worker.output()


def test_an_upload_continues_the_callers_trace_through_the_real_stages(
    databases: Databases, tmp_path: Path
) -> None:
    """``serve`` and a worker of the real pipeline, both exporting: the upload's span is a
    child of the request's ``traceparent``, each stage run a child of the upload's span,
    with the figures the stages note; ``submit`` starts a trace of its own."""
    caller_trace, caller_span = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    with databases.fresh() as dsn, receiver() as collector:
        otel = {
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": collector.url,
            "OTEL_BSP_SCHEDULE_DELAY": "50",
        }
        cli = Cli(dsn, tmp_path / "data", tmp_path / "logs", **otel)
        with running_server(cli) as server, server.client() as http:
            answer = http.post(
                "/v1/documents",
                content=(SAMPLES / "tides.md").read_bytes(),
                headers={
                    "Content-Disposition": 'attachment; filename="tides.md"',
                    "traceparent": f"00-{caller_trace}-{caller_span}-01",
                },
            )
            assert answer.status_code == 202, answer.text
            wait_for(
                lambda: any(s.name == "upload" for s in collector.received()), what="upload span"
            )
        submitted = cli.run("submit", str(SAMPLES / "lighthouses.pdf"))
        assert submitted.code == 0, submitted
        worker = cli.run("--exit-when-idle", timeout_s=240)
        assert worker.code == 0, worker
        spans = collector.received()

    [upload] = [s for s in spans if s.name == "upload"]
    assert (upload.trace_id, upload.parent_span_id) == (caller_trace, caller_span)
    assert upload.attributes["ragline.filename"] == "tides.md"
    [submit] = [s for s in spans if s.name == "submit"]
    assert submit.parent_span_id == "" and submit.trace_id != caller_trace
    for root in (upload, submit):
        mine = [s for s in runs(spans) if s.trace_id == root.trace_id]
        assert [s.name for s in mine] == [f"stage {n}" for n in STAGES]
        assert {s.parent_span_id for s in mine} == {root.span_id}
        by_stage = {s.name: s.attributes for s in mine}
        assert by_stage["stage parse"]["ragline.pages"] >= 1
        assert by_stage["stage chunk"]["ragline.chunks"] >= 1
        assert by_stage["stage index"]["ragline.chunks"] >= 1
