"""What the CLI says while a provider's circuit is open, and its settings' validation."""

from __future__ import annotations

import re
from pathlib import Path

from bench.harness.cli import Cli
from bench.harness.db import sql
from bench.harness.fleet import submit_jobs
from runtime.cli.common import EXIT_OK, EXIT_USAGE

PROVIDER = "cohere/embed-v4.0"
WAITING = re.compile(
    rf"embed: provider {re.escape(PROVIDER)} unavailable since \d\d:\d\d:\d\d "
    r"\(HTTP 503\), next try \d\d:\d\d:\d\d"
)


def open_circuit(dsn: str) -> None:
    sql(
        dsn,
        "INSERT INTO providers (name, stages, state, failures, failing_since, last_error,"
        " next_probe_at) VALUES ($1, '{embed}', 'open', 5, now() - interval '1 minute',"
        " 'cohere embed: HTTP 503: service unavailable', now() + interval '2 minutes')",
        PROVIDER,
    )


def test_status_and_failures_say_why_jobs_wait_on_a_provider(dsn: str, tmp_path: Path) -> None:
    [doc] = submit_jobs(dsn, 1, "embed")
    open_circuit(dsn)
    cli = Cli(dsn, tmp_path / "data", tmp_path / "logs")
    table, as_json, timeline, failures = cli.run_all(
        ("status",), ("status", "--json"), ("status", str(doc)), ("failures",)
    )
    for result in (table, as_json, timeline, failures):
        assert result.code == EXIT_OK, result
    assert f"{PROVIDER} (embed): open -- provider {PROVIDER} unavailable since" in table.out
    [embed] = [s for s in as_json.json() if s["stage"] == "embed"]
    assert [(p["name"], p["state"], p["failures"]) for p in embed["providers"]] == [
        (PROVIDER, "open", 5)
    ]
    assert WAITING.search(timeline.out), timeline.out
    assert WAITING.search(failures.out) and failures.out.startswith("waiting: "), failures.out


def test_a_bad_retry_budget_is_one_line_naming_the_variable(dsn: str, tmp_path: Path) -> None:
    cli = Cli(dsn, tmp_path / "data", tmp_path / "logs")
    result = cli.run("--exit-when-idle", RAGLINE_RETRY_FOR="forever")
    assert result.code == EXIT_USAGE, result
    assert "RAGLINE_RETRY_FOR" in result.err and "Traceback" not in result.err, result
