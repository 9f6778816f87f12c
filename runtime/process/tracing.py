"""One OpenTelemetry trace per document: the spans the engine opens, and how a process
exports them.

A document's trace starts where it is submitted (:func:`document_span`; or, when nothing
submitted it inside a span, a short root span of :func:`contexts_for`). Its W3C
``traceparent`` is stored with its jobs (``stage_jobs.trace_context``) and copied to the
next stage's job in the completion that enqueues it, so each run of a job is a span of that
trace (:meth:`JobSpans.start`) in whichever process claims it, the provider calls made
through the gate are its children, and retries, deferrals and lost leases are its events.

Only ``opentelemetry-api`` is imported here: with no SDK installed or configured every
call is a no-op and jobs carry no context. :func:`configure` installs the SDK from the
standard ``OTEL_*`` variables (``pip install 'ragline[otel]'``). docs/tracing.md.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import logging
import os
import socket
import sys
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextvars import Token
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import (
    INVALID_SPAN,
    NonRecordingSpan,
    Span,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    Tracer,
)
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from runtime.errors import ConfigurationError, one_line
from runtime.models import Job, NewJob
from runtime.process.light_spans import LightTracer, Run

log = logging.getLogger(__name__)

#: The instrumentation scope of every span ragline opens.
SCOPE = "ragline"
#: Attribute names are ``ragline.<key>`` (``ragline.pages``, ``ragline.attempt``, ...).
PREFIX = "ragline."
#: The tracer of the process's global provider: a no-op until an SDK provider is set
#: (a proxy, so a provider installed later by :func:`configure` is picked up).
TRACER = trace.get_tracer(SCOPE)
_W3C = TraceContextTextMapPropagator()
#: Attribute values a span takes.
Value = str | bool | int | float


def attributes(values: Mapping[str, Value | None]) -> dict[str, Value]:
    """``{"ragline.<key>": value}`` for each value that is not None."""
    return {PREFIX + k: v for k, v in values.items() if v is not None}


# -- the context a job carries ------------------------------------------------------------


def traceparent_of(span: Span) -> str | None:
    """The W3C ``traceparent`` of ``span`` (None for a span of no trace: tracing off)."""
    ctx = span.get_span_context()
    if not ctx.is_valid:
        return None
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


def engine_ids(traceparent: str) -> tuple[int, int, int] | None:
    """The trace id, span id and flags of the engine's own ``00-<32 hex>-<16 hex>-<2 hex>``
    (read by slicing: a fifth of the propagator's cost, paid per job run); None for
    anything else, or ids that are not valid."""
    if len(traceparent) != 55 or not traceparent.startswith("00-"):
        return None
    try:
        ids = int(traceparent[3:35], 16), int(traceparent[36:52], 16), int(traceparent[53:55], 16)
    except ValueError:
        return None
    return ids if ids[0] and ids[1] else None


def parent_of(traceparent: str) -> Context:
    """The context whose span is the (remote) parent that ``traceparent`` names; an
    unreadable value gives an empty context (a new trace), never an error."""
    ids = engine_ids(traceparent)
    if ids is not None:
        return trace.set_span_in_context(NonRecordingSpan(remote(ids)))
    if traceparent.startswith("00-") and len(traceparent) == 55:
        return Context()
    return _W3C.extract({"traceparent": traceparent})


def remote(ids: tuple[int, int, int]) -> SpanContext:
    return SpanContext(
        trace_id=ids[0], span_id=ids[1], is_remote=True, trace_flags=TraceFlags(ids[2])
    )


def sampled(parent: Context) -> bool:
    """Whether the trace ``parent`` belongs to was sampled at its root (the traceparent's
    flag). Workers follow it, as the SDK's default ``parentbased_always_on`` sampler would,
    without asking the SDK: a sampler that ignores the parent is not consulted for runs."""
    ids = trace.get_current_span(parent).get_span_context()
    return not ids.is_valid or ids.trace_flags.sampled


def contexts_for(jobs: Sequence[NewJob], tracer: Tracer = TRACER) -> list[str | None]:
    """The trace context each new job carries: its own, else the current span's (the
    submission's), else that of a root span opened (and ended) here for its document, so
    that a document enqueued outside any span (sync, reprocess) still gets a trace."""
    current = traceparent_of(trace.get_current_span())
    out: list[str | None] = []
    for job in jobs:
        given = job.trace_context or current
        if given is None:
            given = _root_for(job, tracer)
        out.append(given)
    return out


def _root_for(job: NewJob, tracer: Tracer) -> str | None:
    span = tracer.start_span(
        f"enqueue {job.stage}",
        kind=SpanKind.PRODUCER,
        attributes=attributes(
            {"document.id": str(job.document_id), "stage": job.stage, "generation": job.generation}
        ),
    )
    span.end()
    return traceparent_of(span)


@contextlib.contextmanager
def document_span(
    name: str,
    values: Mapping[str, Value | None],
    *,
    traceparent: str | None = None,
    tracer: Tracer = TRACER,
) -> Iterator[Span]:
    """The root span of a submission (``submit``, ``upload``), current while it runs, so
    the jobs it enqueues carry its context. ``traceparent``: a caller's own (an HTTP
    request's header) to continue its trace instead of starting one."""
    parent = parent_of(traceparent) if traceparent else None
    with tracer.start_as_current_span(
        name,
        context=parent,
        kind=SpanKind.PRODUCER,
        attributes=attributes(values),
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            yield span
        except Exception as exc:
            failed(span, exc)
            raise


def current(span: Span) -> contextlib.AbstractContextManager[None]:
    """``span`` as the current span in a block: what ``trace.use_span`` does when it
    neither ends the span nor records exceptions, without its generator (paid per run)."""
    return _Current(trace.set_span_in_context(span))


class _Current(contextlib.AbstractContextManager[None]):
    __slots__ = ("_context", "_token")

    def __init__(self, context: Context) -> None:
        self._context = context
        self._token: Token[Context] | None = None

    def __enter__(self) -> None:
        self._token = otel_context.attach(self._context)

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            otel_context.detach(self._token)


def annotate(span: Span, values: Mapping[str, Value | None]) -> None:
    """Set ``ragline.<key>`` attributes on ``span`` (nothing when it does not record)."""
    if span.is_recording():
        for key, value in values.items():
            if value is not None:
                span.set_attribute(PREFIX + key, value)


def event(span: Span, name: str, **values: Value | None) -> None:
    """Add the event ``name`` with ``ragline.<key>`` attributes (when ``span`` records)."""
    if span.is_recording():
        span.add_event(name, attributes(values))


def failed(span: Span, exc: BaseException | str) -> None:
    """Mark ``span`` as an error, with a one-line description."""
    if span.is_recording():
        text = exc if isinstance(exc, str) else f"{type(exc).__name__}: {exc}"
        span.set_status(Status(StatusCode.ERROR, one_line(text, 300)))


# -- the engine's spans ---------------------------------------------------------------------


def run_attributes(
    stage: str, attempt: int, document_id: uuid.UUID | str, job_id: int, generation: int
) -> dict[str, Value]:
    """A run's attributes at its start (a few: each one costs, docs/tracing.md)."""
    return {
        "ragline.stage": stage,
        "ragline.attempt": attempt,
        "ragline.document.id": str(document_id),
        "ragline.job.id": job_id,
        "ragline.generation": generation,
    }


def run_of(job: Job) -> Run:
    return job.stage, job.attempts, job.document_id, job.id, job.generation


class JobSpans:
    """Opens the span of each job run, parented by the context its job carries.

    ``tracer`` None: no span at all (what tracing costs is measured against that,
    ``python -m bench.queue --parts trace``). A job that carries no context (submitted
    while tracing was off) gets no span either: one trace per document, never a trace per
    stage run.
    """

    def __init__(self, tracer: Tracer | None, worker_id: str) -> None:
        self.tracer = tracer
        self.worker_id = worker_id
        #: The light tracer a run's span comes from directly (no context built for its
        #: parent), when ``tracer`` is one (or the global one resolves to one).
        self.light = tracer if isinstance(tracer, LightTracer) else None

    def start(self, job: Job) -> Span:
        """The run's span. Which process ran it is the resource's ``host.name`` and
        ``process.pid`` (:func:`process_resource`): the same for every span a worker
        exports, so not repeated on each (attributes are most of a span's cost)."""
        if job.trace_context is None or (self.light is None and not self.live()):
            return INVALID_SPAN
        ids = engine_ids(job.trace_context)
        if ids is None:
            return self._start(job, parent_of(job.trace_context))
        if not ids[2] & TraceFlags.SAMPLED:
            # The root's sampler left the document out: so would the default (parent-
            # based) sampler here, after the SDK's work for a span that records nothing.
            return NonRecordingSpan(remote(ids))
        if self.light is not None:
            run = job.stage, job.attempts, job.document_id, job.id, job.generation
            return self.light.start_run(f"stage {job.stage}", job.trace_context, run)
        return self._start(job, trace.set_span_in_context(NonRecordingSpan(remote(ids))))

    def _start(self, job: Job, parent: Context) -> Span:
        if not sampled(parent):
            return trace.get_current_span(parent)
        assert self.tracer is not None
        return self.tracer.start_span(
            f"stage {job.stage}",
            context=parent,
            kind=SpanKind.CONSUMER,
            attributes=run_attributes(*run_of(job)),
        )

    def live(self) -> bool:
        """Whether spans may record: a tracer of its own, or the global one once an SDK
        provider is set (before that, a run's context is not even read)."""
        if self.tracer is not TRACER:
            return self.tracer is not None
        if self.light is not None:
            return True
        provider = trace.get_tracer_provider()
        if isinstance(provider, trace.ProxyTracerProvider):
            return False
        # Set once per process: the tracer it gives ragline's scope is settled now.
        real = provider.get_tracer(SCOPE)
        self.light = real if isinstance(real, LightTracer) else None
        return True

    @contextlib.asynccontextmanager
    async def provider_call(
        self,
        parent: Span,
        provider: str,
        tokens: int,
        gate: contextlib.AbstractAsyncContextManager[None],
    ) -> AsyncIterator[None]:
        """One provider call, through ``gate``, as a child span of ``parent`` (the job's)
        that is current meanwhile (a client library's own spans nest under it)."""
        if self.tracer is None or not parent.is_recording():
            async with gate:
                yield
            return
        with self.tracer.start_as_current_span(
            f"provider {provider}",
            context=trace.set_span_in_context(parent),
            kind=SpanKind.CLIENT,
            attributes=attributes({"provider": provider, "provider.tokens": tokens}),
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                async with gate:
                    yield
            except BaseException as exc:
                failed(span, exc)
                span.set_attribute("error.type", type(exc).__name__)
                raise

    def rescued(self, stage: str, traceparent: str | None, **values: Value | None) -> None:
        """A job of another worker whose lease expired: a short span in its trace with
        the loss as an event (its own run's span ended with that worker, unexported)."""
        if self.tracer is None or traceparent is None:
            return
        span = self.tracer.start_span(
            f"rescue {stage}",
            context=parent_of(traceparent),
            attributes=attributes({"stage": stage, "worker.id": self.worker_id}),
        )
        event(span, "lease_lost", **values)
        span.end()


# -- a process's exporter, from the OTEL_* variables -----------------------------------------

#: Variables whose presence turns tracing on when ``OTEL_TRACES_EXPORTER`` is not set.
_ENDPOINTS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")


def _nothing() -> None:
    """Shut down nothing (tracing stayed a no-op)."""


def exporter_names(env: Mapping[str, str]) -> list[str]:
    """The exporters the environment asks for (none: tracing stays a no-op).

    ``OTEL_SDK_DISABLED=true`` or ``OTEL_TRACES_EXPORTER=none``: none. Unset, it is
    ``otlp`` only when an OTLP endpoint variable is set: a process that was told nothing
    does not send spans to a default address nobody listens on.
    """
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return []
    given = env.get("OTEL_TRACES_EXPORTER")
    if given is None:
        return ["otlp"] if any(env.get(v) for v in _ENDPOINTS) else []
    return [n for n in (p.strip().lower() for p in given.split(",")) if n and n != "none"]


def configure(env: Mapping[str, str] | None = None) -> Callable[[], None]:
    """Install the SDK as the global tracer provider when the ``OTEL_*`` variables ask
    for an exporter; returns what flushes and shuts it down (call it before exiting).

    Raises :class:`ConfigurationError` (one line) for an exporter that is unknown or not
    installed. Without the SDK installed, a warning says how to get it, and nothing is
    traced.
    """
    env = os.environ if env is None else env
    provider = exporting_provider(env)
    if provider is None:
        return _nothing
    trace.set_tracer_provider(provider)
    shutdown: Callable[[], None] = provider.shutdown
    return shutdown


def exporting_provider(env: Mapping[str, str]) -> Any:
    """The SDK provider the ``OTEL_*`` variables of ``env`` ask for (None: none, or no SDK
    installed), not yet installed as the global one.

    Its exporters run in a process of their own, which the provider's spans are shipped
    to in batches (:mod:`runtime.process.span_shipper`); ragline's own spans under a
    sampled parent (a stage run, its provider calls) are recorded as light spans
    (:mod:`runtime.process.light_spans`). The exporters are checked here, so that a
    wrong name stops the command before anything starts.
    """
    names = exporter_names(env)
    if not names:
        return None
    try:
        from runtime.process.span_shipper import exporting_provider as shipping
    except ImportError:
        log.warning(
            "OTEL_* variables ask for traces (%s) but the OpenTelemetry SDK is not "
            "installed: pip install 'ragline[otel]'; tracing stays off",
            ",".join(names),
        )
        return None
    for name in names:
        check_exporter(name, env)
    return shipping(process_resource(env), names, env, light=(SCOPE,))


def process_resource(env: Mapping[str, str]) -> dict[str, Value]:
    """What every span of this process shares: ``service.name`` ``ragline`` (unless
    ``OTEL_SERVICE_NAME`` or ``OTEL_RESOURCE_ATTRIBUTES`` name it), the host and the pid
    (which, with the span's time, tell which worker ran a job)."""
    named = "OTEL_SERVICE_NAME" in env or "service.name=" in env.get("OTEL_RESOURCE_ATTRIBUTES", "")
    out: dict[str, Value] = {"host.name": socket.gethostname(), "process.pid": os.getpid()}
    if not named:
        out["service.name"] = SCOPE
    return out


def exporter(name: str, env: Mapping[str, str]) -> Any:
    """The span exporter ``OTEL_TRACES_EXPORTER`` names: ``otlp`` (over
    ``OTEL_EXPORTER_OTLP[_TRACES]_PROTOCOL``, default ``http/protobuf``), ``console``
    (stderr: stdout is the commands' own), or any package's
    ``opentelemetry_traces_exporter`` entry point."""
    if name == "otlp":
        return importlib.import_module(_otlp_module(env)).OTLPSpanExporter()
    if name == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter(out=sys.stderr)
    return _entry_point(name).load()()


def check_exporter(name: str, env: Mapping[str, str]) -> None:
    """Raise :class:`ConfigurationError` unless :func:`exporter` can build ``name``
    (without building it: that is the exporter process's work)."""
    if name == "otlp":
        _otlp_module(env)
    elif name != "console":
        _entry_point(name)


def _entry_point(name: str) -> Any:
    from importlib.metadata import entry_points

    found = entry_points(group="opentelemetry_traces_exporter", name=name)
    if not found:
        raise ConfigurationError(
            f"OTEL_TRACES_EXPORTER: unknown exporter {name!r} (otlp, console, none, or an "
            "installed package's opentelemetry_traces_exporter entry point)"
        )
    return next(iter(found))


#: Variables naming a credential provider (an entry point giving a ``requests`` session)
#: for the SDK's OTLP/HTTP exporter: only that exporter knows how to use one.
_CREDENTIALS = (
    "OTEL_PYTHON_EXPORTER_OTLP_HTTP_CREDENTIAL_PROVIDER",
    "OTEL_PYTHON_EXPORTER_OTLP_HTTP_TRACES_CREDENTIAL_PROVIDER",
)


def otlp_protocol(env: Mapping[str, str]) -> str:
    """``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL``, else ``..._PROTOCOL``, else http/protobuf."""
    return (
        env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    ).strip()


def direct_otlp(name: str, env: Mapping[str, str]) -> bool:
    """Whether the exporter process sends ``name``'s spans itself, encoded without the
    SDK (:mod:`runtime.process.otlp_encoder`): OTLP over HTTP/protobuf with no
    credential provider. Everything else is the SDK's exporter."""
    return (
        name == "otlp"
        and otlp_protocol(env) == "http/protobuf"
        and not any(env.get(v) for v in _CREDENTIALS)
    )


def _otlp_module(env: Mapping[str, str]) -> str:
    protocol = otlp_protocol(env)
    modules = {"http/protobuf": "http", "grpc": "grpc"}
    if protocol not in modules:
        raise ConfigurationError(
            f"OTEL_EXPORTER_OTLP_PROTOCOL: {protocol!r} is not one of http/protobuf, grpc"
        )
    kind = modules[protocol]
    module = f"opentelemetry.exporter.otlp.proto.{kind}.trace_exporter"
    try:
        found = importlib.util.find_spec(module)
    except ImportError:
        found = None
    if found is None:
        raise ConfigurationError(
            f"the OTLP exporter over {protocol} is not installed: pip install "
            f"opentelemetry-exporter-otlp-proto-{kind} (http/protobuf: 'ragline[otel]')"
        )
    return module
