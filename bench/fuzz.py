"""Fuzz the HTTP API from its own OpenAPI schema, longer than the test does.

``python -m bench.fuzz [--max-examples N] [--seed S]`` starts ``ragline serve`` on a
throwaway database (``DATABASE_URL``, default the local server) twice, without tokens and
with ``RAGLINE_API_TOKENS`` (schemathesis sends the bearer header), runs schemathesis
against each (:mod:`bench.harness.fuzz`) and prints how many cases it ran and what it
found. Exit 1 if it found anything. ``tests/acceptance/test_serve_fuzz.py`` runs the same
with a few examples per operation.
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
import tempfile
import time
from pathlib import Path

from bench.harness.cli import Cli
from bench.harness.db import throwaway_database
from bench.harness.fuzz import FuzzRun, fuzz
from bench.harness.serve import running_server


def one(server_dsn: str, tmp: Path, max_examples: int, seed: int, tokens: bool) -> FuzzRun:
    token = secrets.token_hex(16) if tokens else None
    env = {"RAGLINE_API_TOKENS": token} if token else {}
    with throwaway_database(server_dsn, "ragline_fuzz") as dsn:
        cli = Cli(dsn, tmp / "data", tmp / "logs")
        with running_server(cli, **env) as server:
            run = fuzz(server, tmp / "st", max_examples=max_examples, token=token, seed=seed)
            log = server.output()
    if "Traceback" in log or " failed: " in log:
        print(log[-5000:], file=sys.stderr)
    return run


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fuzz", description=__doc__)
    parser.add_argument("--max-examples", type=int, default=200, help="per operation (200)")
    parser.add_argument("--seed", type=int, default=39)
    args = parser.parse_args()
    server_dsn = os.environ.get("DATABASE_URL", "postgresql://root@127.0.0.1:5432/postgres")
    print(f"ragline HTTP API fuzz: schemathesis, {args.max_examples} examples per operation")
    found = 0
    with tempfile.TemporaryDirectory(prefix="ragline-bench-fuzz-") as raw:
        for tokens in (False, True):
            started = time.monotonic()
            tmp = Path(raw) / ("tokens" if tokens else "open")
            run = one(server_dsn, tmp, args.max_examples, args.seed, tokens)
            label = "with tokens" if tokens else "no tokens"
            print(
                f"{label}: {run.operations} operations, {run.cases} cases, "
                f"{run.failures} failure(s), {time.monotonic() - started:.0f} s "
                f"(schemathesis {run.seconds:.0f} s)"
            )
            for line in run.found:
                print(f"  {line}")
            if not run.clean and not run.found:
                print(run.output[-3000:])
            found += 0 if run.clean else 1
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
