"""The HTTP API fuzzed from its own OpenAPI schema: schemathesis (``st run``) against a
live ``serve`` (:mod:`bench.harness.serve`), with or without a bearer token.

One run covers every operation of ``/v1/schema/openapi.json`` in schemathesis's phases
(the schema's boundary values, then random cases, positive and negative, then stateful
sequences that follow the links it infers, e.g. upload → read → delete) and checks each
answer: no 5xx, status codes, content types, headers and bodies as the schema says,
schema-invalid input refused, and with a token, the token required where the schema says
so. The event stream never ends by itself: schemathesis reads it until one event or half
a second (:data:`CONFIG`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import msgspec

from bench.harness.serve import Server

#: schemathesis's checks we hold the API to.
CHECKS = (
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_headers_conformance",
    "response_schema_conformance",
    "negative_data_rejection_on_the_wire",  # schemathesis's, less a false alarm
    "missing_required_header",
    "unsupported_method",
    "use_after_free",
    "ensure_resource_availability",
    "ignored_auth",
)
#: ``schemathesis.toml`` of a run: the event stream is read for one event or 0.5 s.
CONFIG = """request-timeout = 30

[[operations]]
include-path = "/v1/events"
request-timeout = 0.5
max-stream-events = 1
"""
#: schemathesis's command line (``st``) run by this interpreter: it has no ``__main__``,
#: and a console script's path depends on how the environment was made.
SCHEMATHESIS = (sys.executable, "-c", "from schemathesis.cli import schemathesis; schemathesis()")
#: The hooks file that defines ``negative_data_rejection_on_the_wire``.
HOOKS = Path(__file__).with_name("fuzz_checks.py")
#: Not checked, and why. ``positive_data_acceptance``: some rules are not the schema's to
#: state (a cursor must be one the API returned, reprocess takes exactly one of ids, all
#: and model, a search needs a non-blank q); their 400s are documented answers.
#: ``allow_header_conformance``: Litestar answers OPTIONS for the methods of one handler
#: per path, not all of them (a framework quirk no client relies on).
UNCHECKED = ("positive_data_acceptance", "allow_header_conformance")


class FuzzRun(msgspec.Struct, frozen=True, kw_only=True):
    """One ``st run``: its exit code, how much it tried, what it found."""

    code: int
    operations: int
    cases: int
    failures: int
    seconds: float
    #: The failures' codes and titles (e.g. ``ST103 Undocumented status code``) with the
    #: operations they were seen on.
    found: list[str]
    output: str

    @property
    def clean(self) -> bool:
        return self.code == 0 and self.failures == 0


def st_command(server: Server, *, max_examples: int, token: str | None, seed: int) -> list[str]:
    args = [
        *SCHEMATHESIS,
        "run",
        f"{server.url}/v1/schema/openapi.json",
        "--max-examples",
        str(max_examples),
        "--seed",
        str(seed),
        "--checks",
        ",".join(CHECKS),
        "--workers",
        "1",
        "--report",
        "json",
        "--report-json-path",
        "report.json",
    ]
    if token is not None:
        args += ["--header", f"Authorization: Bearer {token}"]
    return args


def fuzz(
    server: Server,
    workdir: Path,
    *,
    max_examples: int,
    token: str | None = None,
    seed: int = 39,
    timeout_s: float = 600,
) -> FuzzRun:
    """Run schemathesis once against ``server`` (in ``workdir``: its report and its
    example database stay there); what it tried and found."""
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "schemathesis.toml").write_text(CONFIG)
    args = st_command(server, max_examples=max_examples, token=token, seed=seed)
    env = {**os.environ, "SCHEMATHESIS_HOOKS": str(HOOKS)}
    done = subprocess.run(
        args, cwd=workdir, env=env, capture_output=True, text=True, timeout=timeout_s, check=False
    )
    report = json.loads((workdir / "report.json").read_text())
    found = [f"{f['code']} {f['title']}: {', '.join(f['operations'])}" for f in report["failures"]]
    found += [f"error: {e}" for e in report["errors"]]
    return FuzzRun(
        code=done.returncode,
        operations=int(report["operations"]["tested"]),
        cases=int(report["test_cases"]["generated"]),
        failures=int(report["test_cases"]["unique_failures"]) + len(report["errors"]),
        seconds=float(report["running_time"]),
        found=found,
        output=done.stdout[-20000:] + done.stderr[-5000:],
    )
