"""Pure engine logic: backoff, classification, configuration, CLI parsing, query files."""

from __future__ import annotations

import random

import pytest

import schema
from bench.harness.pipelines import STAGES, ScriptedStage
from runtime.cli.options import parse_concurrency, parse_stages
from runtime.errors import (
    ConfigurationError,
    InvalidDocument,
    PermanentError,
    RateLimited,
    TransientError,
    one_line,
)
from runtime.providers.backoff import Reconnect, retry_delay_s
from runtime.stage import Pipeline
from runtime.worker.config import WorkerConfig
from runtime.worker.outcome import failure_of


def test_backoff_bounds_and_jitter() -> None:
    rng = random.Random(7)
    for attempt in range(1, 12):
        ceiling = min(2.0 * 2 ** (attempt - 1), 300.0)
        delays = [retry_delay_s(attempt, base_s=2.0, rng=rng) for _ in range(200)]
        assert all(ceiling / 2 <= d <= ceiling for d in delays)
        assert len({round(d, 6) for d in delays}) > 150  # jittered, not constant
    assert retry_delay_s(40) <= 300.0


def test_backoff_honours_retry_after() -> None:
    assert retry_delay_s(1, base_s=1.0, retry_after_s=30.0) == 30.0
    assert retry_delay_s(1, base_s=1.0, retry_after_s=10_000.0) == 300.0  # capped
    assert retry_delay_s(5, base_s=10.0, retry_after_s=1.0) >= 80.0  # backoff wins
    with pytest.raises(ValueError):
        retry_delay_s(0)


def test_reconnect_backoff_grows_to_its_cap_and_resets() -> None:
    r = Reconnect(max_s=1.0, first_s=0.1)
    delays = [r.next_s() for _ in range(10)]
    assert delays[0] <= 0.1 and all(d <= 1.0 for d in delays) and delays[-1] >= 0.5
    r.reset()
    assert r.next_s() <= 0.1


def test_failure_classification() -> None:
    assert failure_of(InvalidDocument("a.pdf: encrypted")).permanent
    assert failure_of(PermanentError("x")).kind == "permanent"
    transient = failure_of(TransientError("HTTP 503", retry_after_s=4))
    assert not transient.permanent and transient.retry_after_s == 4
    assert failure_of(RateLimited("429")).kind == "rate_limited"
    bug = failure_of(KeyError("k"))
    assert not bug.permanent and bug.message == "KeyError: 'k'"
    assert "\n" not in failure_of(TransientError("line one\nline two")).message


def test_one_line_collapses_and_truncates() -> None:
    assert one_line("a\n  b\tc") == "a b c"
    assert len(one_line("x" * 1000, limit=50)) == 50


def test_worker_config_validation() -> None:
    with pytest.raises(ConfigurationError):
        WorkerConfig(stages=(), concurrency={})
    with pytest.raises(ConfigurationError):
        WorkerConfig(stages=("parse",), concurrency={"parse": 0})
    with pytest.raises(ConfigurationError):
        WorkerConfig(stages=("parse",), concurrency={"parse": 1}, lease_s=5, heartbeat_s=5)
    assert (
        WorkerConfig(stages=("parse",), concurrency={"parse": 1}, lease_s=30).heartbeat_every_s
        == 10
    )


def test_pipeline_order_and_validation() -> None:
    pipeline = Pipeline(stages=[ScriptedStage(s) for s in STAGES])
    assert pipeline.next_stage("parse") == "chunk" and pipeline.next_stage("index") is None
    with pytest.raises(ConfigurationError):
        Pipeline(stages=[ScriptedStage("a"), ScriptedStage("a")])
    with pytest.raises(ConfigurationError):
        pipeline.stage("nope")


def test_stage_and_concurrency_flags() -> None:
    assert parse_stages("embed, index", STAGES) == ("embed", "index")
    assert parse_stages(None, STAGES) == STAGES
    with pytest.raises(ConfigurationError):
        parse_stages("embed,bogus", STAGES)
    defaults = {"parse": 2}
    assert parse_concurrency(None, ("parse", "embed"), defaults) == {"parse": 2, "embed": 1}
    assert parse_concurrency("4", ("parse", "embed"), defaults) == {"parse": 4, "embed": 4}
    assert parse_concurrency("embed=8", ("parse", "embed"), defaults) == {"parse": 2, "embed": 8}
    for bad in ("x", "chunk=2", "embed=0"):
        with pytest.raises(ConfigurationError):
            parse_concurrency(bad, ("parse", "embed"), defaults)


def test_query_file_parsing() -> None:
    text = "-- name: a\n-- purpose\nSELECT 1;\n\n-- name: b\nSELECT 2;\n"
    assert schema.parse(text) == {"a": "-- purpose\nSELECT 1;", "b": "SELECT 2;"}
    with pytest.raises(ValueError):
        schema.parse("-- name: a\nSELECT 1;\n-- name: a\nSELECT 2;\n")
