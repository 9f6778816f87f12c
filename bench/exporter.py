"""The exporter process's CPU per span, alone: shipped stage-run spans through a real
``python -m runtime.process.span_exporter`` to a receiver process (docs/tracing.md,
"What it costs").

``bench.queue --parts trace`` prints the same figure, but beside a worker and PostgreSQL
whose load moves it; here the only work is the exporter's. Spans are made as the worker
makes them (``LightTracer.start_run``, then ``end``), most plain, some with the attribute,
event and error status a retried run carries, and shipped in frames of the batch size
through the real :class:`~runtime.process.span_shipper.Shipper`. The CPU is the exporter
process's (``/proc``) from its first answered flush (started, imports done) to the last
(everything received), so its start-up is printed apart.

``--baseline DIR`` (repeatable): another source tree (say ``git archive main runtime | tar
-x -C DIR``) whose exporter runs alternately with this one's, named by its directory.
"""

from __future__ import annotations

import statistics
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

from opentelemetry.trace import StatusCode

from bench.args import bench_parser
from bench.harness.otlp import ReceiverProcess, cpu_s, receiver_process
from runtime.process.light_spans import LightSpan, LightTracer
from runtime.process.span_shipper import BatchSettings, Shipper
from runtime.process.tracing import SCOPE

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
RESOURCE = {"service.name": "ragline", "host.name": "bench", "process.pid": 4242}
STAGES = ("parse", "chunk", "embed", "index", "cleanup")


def make_span(tracer: LightTracer, i: int, retried_every: int) -> None:
    """One stage run's span, ended: every ``retried_every``-th carries what a retried
    run does (provider calls, a retry event, an error status)."""
    stage = STAGES[i % len(STAGES)]
    run = (stage, 1 + i % 3, uuid.uuid4(), 1_000_000 + i, 1)
    span = tracer.start_run(f"stage {stage}", TRACEPARENT, run)
    assert isinstance(span, LightSpan)
    if retried_every and i % retried_every == 0:
        span.set_attribute("ragline.provider_calls", 2)
        span.add_event("retry", {"ragline.error.kind": "transient", "ragline.delay_s": 2.5})
        span.set_status(StatusCode.ERROR, "TransientError: the provider said 503")
    span.end()


def exporter_command(tree: str) -> list[str]:
    """``python -m runtime.process.span_exporter`` with ``tree``'s ``runtime`` first on
    the path (``-m`` itself would put the working directory first)."""
    code = (
        f"import runpy, sys; sys.path.insert(0, {tree!r}); "
        "runpy.run_module('runtime.process.span_exporter', run_name='__main__')"
    )
    return [sys.executable, "-c", code]


def one_run(
    receiver: ReceiverProcess, spans: int, retried_every: int, tree: str
) -> tuple[float, float]:
    """The exporter's start-up CPU and its CPU per span (µs) for ``spans`` spans."""
    env = {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": receiver.url}
    settings = BatchSettings.from_env({"OTEL_BSP_MAX_QUEUE_SIZE": str(spans + 1)})
    shipper = Shipper(RESOURCE, ["otlp"], settings, env, exporter_command(tree))
    try:
        if not shipper.flush(60):
            raise RuntimeError("the exporter process did not start")
        pid = shipper.proc.pid
        started, before = cpu_s(pid), receiver.count()
        tracer = LightTracer(None, shipper.add, SCOPE)  # type: ignore[arg-type]
        for i in range(spans):
            make_span(tracer, i, retried_every)
            if i % settings.batch == settings.batch - 1:
                shipper.ship()
        if not shipper.flush(120):
            raise RuntimeError("the exporter process did not finish")
        used = cpu_s(pid) - started
        got = receiver.count() - before
        if got != spans:
            raise RuntimeError(f"the receiver got {got} spans of {spans}")
    finally:
        shipper.shutdown()
    return started, used * 1e6 / spans


def main(argv: Sequence[str] | None = None) -> None:
    parser = bench_parser("bench.exporter", __doc__)
    parser.add_argument("--spans", type=int, default=200_000, help="spans per run (200000)")
    parser.add_argument("--repeat", type=int, default=3, help="alternating runs (3)")
    parser.add_argument(
        "--retried-every", type=int, default=20, help="one span in N a retried run's (20)"
    )
    parser.add_argument(
        "--baseline",
        action="append",
        default=[],
        help="a source tree whose exporter to compare with (repeatable)",
    )
    args = parser.parse_args(argv)
    here = str(Path(__file__).resolve().parents[1])
    trees = {Path(tree).name: str(Path(tree).resolve()) for tree in args.baseline}
    trees["this"] = here
    figures: dict[str, list[tuple[float, float]]] = {name: [] for name in trees}
    with receiver_process() as receiver:
        for _ in range(args.repeat):
            for name, tree in trees.items():
                figures[name].append(one_run(receiver, args.spans, args.retried_every, tree))
                time.sleep(0.5)
    print(
        f"exporter process, {args.spans:,} spans a run (1 in {args.retried_every} a retried "
        f"run's), median of {args.repeat}, alternating"
    )
    print(f"{'tree':<14} {'start-up CPU s':>15} {'CPU µs a span':>14}  runs")
    for name, runs in figures.items():
        startup = statistics.median(s for s, _ in runs)
        per_span = statistics.median(u for _, u in runs)
        each = " ".join(f"{u:.2f}" for _, u in runs)
        print(f"{name:<14} {startup:>15.2f} {per_span:>14.2f}  {each}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
