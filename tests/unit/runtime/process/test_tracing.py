"""One trace per document, on the in-memory job store: the submission's span is the
parent of every stage run, the provider calls are the runs' children, and retries,
deferrals and lost leases are events of the runs they ended.

Each test runs twice: on a provider of the test's own with the SDK's in-memory exporter
(what an application that sets up the SDK itself gets), and on the provider the
``OTEL_*`` variables set up (light spans, shipped to an exporter process, exported over
OTLP/HTTP to a real receiver), read back from what the receiver got."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from typing import Any, Protocol

import anyio
import anyio.lowlevel
import pytest
from opentelemetry.sdk.trace import Event, ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import (
    NoOpTracer,
    SpanContext,
    Status,
    StatusCode,
    TraceFlags,
    Tracer,
)

from bench.harness.otlp import ReceivedSpan, Receiver, receiver
from runtime.errors import ConfigurationError, TransientError
from runtime.jobs.in_memory import LONG_AGO, MemoryStore
from runtime.models import Job, JobState, NewJob
from runtime.process import tracing
from runtime.stage import DbConn, JobContext, Pipeline
from runtime.worker.config import WorkerConfig
from runtime.worker.rescuer import Rescuer, RescuerConfig
from runtime.worker.worker import Worker

pytestmark = pytest.mark.anyio
PROVIDER = "acme/model-1"


class Finished(Protocol):
    def get_finished_spans(self) -> tuple[ReadableSpan, ...]: ...

    def clear(self) -> None: ...


class Received:
    """What a real OTLP receiver got from the exporter process, once flushed, as the
    SDK's spans (the fields these tests read)."""

    def __init__(self, provider: Any, collector: Receiver) -> None:
        self.provider = provider
        self.collector = collector
        self.skip = 0

    def get_finished_spans(self) -> tuple[ReadableSpan, ...]:
        assert self.provider.force_flush()
        return tuple(readable(s) for s in self.collector.received()[self.skip :])

    def clear(self) -> None:
        assert self.provider.force_flush()
        self.skip = len(self.collector.received())


def readable(span: ReceivedSpan) -> ReadableSpan:
    def ids(trace_id: str, span_id: str) -> SpanContext:
        # OTLP does not carry the trace flags: every span exported was sampled.
        return SpanContext(int(trace_id, 16), int(span_id, 16), False, TraceFlags(1))

    parent = span.parent_span_id
    return ReadableSpan(
        name=span.name,
        context=ids(span.trace_id, span.span_id),
        parent=ids(span.trace_id, parent) if parent else None,
        attributes=span.attributes,
        events=[Event(e.name, e.attributes) for e in span.events],
        status=Status(StatusCode(span.status)),
        start_time=span.start_ns,
    )


@pytest.fixture(params=["in-memory", "otlp"])
def exported(request: pytest.FixtureRequest) -> Iterator[tuple[Tracer, Finished]]:
    if request.param == "otlp":
        with receiver() as collector:
            provider = tracing.exporting_provider(
                {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": collector.url}
            )
            try:
                yield provider.get_tracer(tracing.SCOPE), Received(provider, collector)
            finally:
                provider.shutdown()
        return
    exporter = InMemorySpanExporter()
    sdk = TracerProvider()
    sdk.add_span_processor(SimpleSpanProcessor(exporter))
    try:
        yield sdk.get_tracer(tracing.SCOPE), exporter
    finally:
        sdk.shutdown()


class Step:
    """A stage that fails its first ``failures`` calls with ``error``, notes figures,
    calls the provider ``calls`` times, and optionally takes its own lease away."""

    def __init__(
        self,
        name: str,
        *,
        failures: int = 0,
        error: Exception | None = None,
        calls: int = 0,
        steal_lease: MemoryStore | None = None,
    ) -> None:
        self.name = name
        self.failures = failures
        self.error = error or ValueError("a bug")
        self.calls = calls
        self.steal_lease = steal_lease
        self.runs = 0

    async def process(self, ctx: JobContext) -> Any:
        self.runs += 1
        ctx.note(pages=3, images=None, bytes=1024)
        for _ in range(self.calls):
            async with ctx.calling(PROVIDER, tokens=7):
                await anyio.lowlevel.checkpoint()
        if self.runs <= self.failures:
            raise self.error
        if self.steal_lease is not None and self.runs == 1:
            # Another worker's now, as if this one had stalled past its lease.
            row = self.steal_lease.jobs[ctx.job.id]
            row.lease_token, row.lease_expires_at = uuid.uuid4(), LONG_AGO
        return None

    async def write(self, conn: DbConn, job: Job, output: Any) -> None:
        raise AssertionError("no output here")

    async def on_failed(self, job: Job) -> None:
        pass


def config(stages: Sequence[str], **kw: Any) -> WorkerConfig:
    fields: dict[str, Any] = {
        "stages": tuple(stages),
        "concurrency": dict.fromkeys(stages, 1),
        "poll_s": 0.02,
        "grace_s": 0.0,
        "retry_base_s": 0.01,
        "listen": False,
        "rescue_every_s": 3600.0,
        "exit_when_idle": True,
    }
    fields.update(kw)
    return WorkerConfig(**fields)


async def run(stages: Sequence[Step], store: MemoryStore, tracer: Tracer, **kw: Any) -> None:
    cfg = config([s.name for s in stages], **kw)
    worker = Worker(Pipeline(stages=stages), "", cfg, tracer=tracer)
    with anyio.fail_after(10):
        await worker.serve(store)


async def submitted(store: MemoryStore, tracer: Tracer, stage: str) -> uuid.UUID:
    """A document submitted inside its root span, as submit and upload do."""
    doc = uuid.uuid4()
    with tracing.document_span("submit", {"document.id": str(doc)}, tracer=tracer):
        await store.enqueue([NewJob(document_id=doc, stage=stage)])
    return doc


def named(spans: Sequence[ReadableSpan], name: str) -> list[ReadableSpan]:
    return sorted((s for s in spans if s.name == name), key=lambda s: s.start_time or 0)


def parent_id(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


async def test_a_document_is_one_trace_with_a_span_per_stage_run(
    exported: tuple[Tracer, Finished],
) -> None:
    tracer, exporter = exported
    store = MemoryStore()
    stages = [Step("parse", calls=2), Step("chunk", failures=1), Step("embed")]
    doc = await submitted(store, tracer, "parse")
    await run(stages, store, tracer)
    assert [r.state for r in store.jobs.values()] == [JobState.SUCCEEDED] * 3

    spans = exporter.get_finished_spans()
    [root] = [s for s in spans if s.name == "submit"]
    assert {s.context.trace_id for s in spans} == {root.context.trace_id}
    runs = [s for s in spans if s.name.startswith("stage ")]
    assert [s.name for s in runs] == ["stage parse", "stage chunk", "stage chunk", "stage embed"]
    assert {parent_id(s) for s in runs} == {root.context.span_id}
    for span in runs:
        attrs = span.attributes or {}
        assert attrs["ragline.document.id"] == str(doc)
        assert attrs["ragline.pages"] == 3 and attrs["ragline.bytes"] == 1024
        assert "ragline.images" not in attrs  # a None is left out

    first, second = named(spans, "stage chunk")
    assert (first.attributes or {})["ragline.attempt"] == 1
    assert first.status.status_code is StatusCode.ERROR
    assert (first.attributes or {})["ragline.outcome"] == "retry"
    [retry] = first.events
    assert retry.name == "retry"
    assert (retry.attributes or {})["ragline.error.message"] == "ValueError: a bug"
    assert (second.attributes or {})["ragline.attempt"] == 2
    assert (second.attributes or {})["ragline.outcome"] == "succeeded"
    assert second.status.status_code is StatusCode.UNSET

    [parse] = named(spans, "stage parse")
    calls = [s for s in spans if s.name == f"provider {PROVIDER}"]
    assert len(calls) == 2
    assert {parent_id(s) for s in calls} == {parse.context.span_id}
    assert (parse.attributes or {})["ragline.provider_calls"] == 2
    assert (calls[0].attributes or {})["ragline.provider.tokens"] == 7


async def test_a_deferral_and_a_lost_lease_are_events_of_their_runs(
    exported: tuple[Tracer, Finished],
) -> None:
    tracer, exporter = exported
    store = MemoryStore()
    flaky = Step("parse", failures=1, error=TransientError("provider hiccup"))
    robbed = Step("chunk", steal_lease=store)
    await submitted(store, tracer, "parse")
    await run([flaky, robbed], store, tracer, rescue_every_s=0.05)
    spans = exporter.get_finished_spans()

    deferred, parsed = named(spans, "stage parse")
    assert [e.name for e in deferred.events] == ["deferred"]
    assert (deferred.attributes or {})["ragline.outcome"] == "deferred"
    # The deferral did not count the attempt: the next run is attempt 1 again.
    assert (parsed.attributes or {})["ragline.attempt"] == 1

    lost, again = named(spans, "stage chunk")
    assert [e.name for e in lost.events] == ["lease_lost"]
    assert (lost.events[0].attributes or {})["ragline.where"] == "commit"
    assert (lost.attributes or {})["ragline.outcome"] == "lost"
    # The sweep requeued it (the lost attempt counts): the next run is attempt 2.
    assert (again.attributes or {})["ragline.attempt"] == 2
    [rescue] = [s for s in spans if s.name == "rescue chunk"]
    assert [e.name for e in rescue.events] == ["lease_lost"]


async def test_the_rescuer_records_a_dead_workers_lost_lease_in_the_trace(
    exported: tuple[Tracer, Finished],
) -> None:
    tracer, exporter = exported
    store = MemoryStore()
    await submitted(store, tracer, "parse")
    [job] = await store.claim("parse", "elsewhere:1:1.x", 1, lease_s=-1.0)
    rescuer = Rescuer(store, RescuerConfig(), spans=tracing.JobSpans(tracer, "me"))
    await rescuer.run_once()
    [root] = [s for s in exporter.get_finished_spans() if s.name == "submit"]
    [rescue] = [s for s in exporter.get_finished_spans() if s.name == "rescue parse"]
    assert parent_id(rescue) == root.context.span_id
    [lost] = rescue.events
    assert lost.name == "lease_lost"
    assert (lost.attributes or {})["ragline.owner"] == "elsewhere:1:1.x"
    assert job.trace_context is not None


async def test_no_span_without_a_context_or_with_tracing_off(
    exported: tuple[Tracer, Finished],
) -> None:
    tracer, exporter = exported
    store = MemoryStore()
    # Submitted while tracing was off (no SDK): the job carries no context.
    await store.enqueue([NewJob(document_id=uuid.uuid4(), stage="parse")])
    assert [r.trace_context for r in store.jobs.values()] == [None]
    await submitted(store, tracer, "parse")
    exporter.clear()
    await run([Step("parse")], store, tracer, trace=False)
    assert exporter.get_finished_spans() == ()


async def test_a_job_enqueued_outside_any_span_gets_a_trace_of_its_own(
    exported: tuple[Tracer, Finished],
) -> None:
    tracer, exporter = exported
    given = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    jobs = [
        NewJob(document_id=uuid.uuid4(), stage="parse"),
        NewJob(document_id=uuid.uuid4(), stage="parse", trace_context=given),
    ]
    contexts = tracing.contexts_for(jobs, tracer)
    [root] = exporter.get_finished_spans()
    assert root.name == "enqueue parse" and root.parent is None
    ids = root.context
    made, kept = contexts
    assert kept == given
    assert made is not None and made[:52] == f"00-{ids.trace_id:032x}-{ids.span_id:016x}"
    assert int(made[53:], 16) & TraceFlags.SAMPLED
    # With no SDK (the API's no-op tracer) there is nothing to carry.
    assert tracing.contexts_for(jobs[:1], NoOpTracer()) == [None]


def test_the_environment_picks_the_exporters() -> None:
    assert tracing.exporter_names({}) == []
    assert tracing.exporter_names({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}) == ["otlp"]
    assert tracing.exporter_names({"OTEL_TRACES_EXPORTER": "none"}) == []
    assert tracing.exporter_names({"OTEL_TRACES_EXPORTER": "otlp, console"}) == ["otlp", "console"]
    off = {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "true"}
    assert tracing.exporter_names(off) == []


def test_an_unknown_exporter_is_one_line() -> None:
    with pytest.raises(ConfigurationError, match="unknown exporter 'zipkn'"):
        tracing.configure({"OTEL_TRACES_EXPORTER": "zipkn"})
    with pytest.raises(ConfigurationError, match="not one of http/protobuf, grpc"):
        tracing.configure({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "x"})


def test_a_bad_traceparent_starts_a_new_trace_instead_of_failing() -> None:
    from opentelemetry import trace

    ctx = tracing.parent_of("not a traceparent")
    assert not trace.get_current_span(ctx).get_span_context().is_valid


async def test_a_document_left_out_at_its_root_opens_no_span_in_the_workers(
    exported: tuple[Tracer, Finished],
) -> None:
    tracer, exporter = exported
    store = MemoryStore()
    unsampled = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"
    new = NewJob(document_id=uuid.uuid4(), stage="parse", trace_context=unsampled)
    await store.enqueue([new])
    await run([Step("parse", calls=1), Step("chunk")], store, tracer)
    assert exporter.get_finished_spans() == ()
    # The context still travels: a sampler that samples later sees the same trace.
    assert {r.trace_context for r in store.jobs.values()} == {unsampled}
