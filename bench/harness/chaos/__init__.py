"""The chaos harness shared by ``tests/acceptance/test_chaos.py`` and ``bench/chaos.py``.

Real PDFs go through the real pipeline (``stages.app:plugin``) in worker processes split
by stage sets, against a local Cohere-compatible server that fails 20% of requests with
500, answers 10% with 429 + Retry-After and delays some; meanwhile a driver SIGKILLs a
random worker every few seconds (and starts another with the same stages), terminates
every database backend, SIGSTOPs a worker past its lease, SIGTERMs one in the middle of an
embed job and, when it controls the server, restarts PostgreSQL. :func:`inspect` then
collects what PostgreSQL, the vector index (counted in the index itself) and the fake
server say, for the test to assert and the benchmark to print.

    server = CountingCohere(dims=64, rates=config.fault_rates()).start()
    chaos = Chaos(config, dsn, data_dir, logs, server)
    docs = anyio.run(chaos.submit, good, broken)
    chaos.run(docs)                      # chaos, then drain; workers stopped at the end
    found = anyio.run(inspect, chaos, docs)

One module a role: :mod:`.config` (the run's knobs, roles, environment and the counting
server), :mod:`.corpus` (which PDFs), :mod:`.fleet` (the worker processes), :mod:`.faults`
(what is injected, and its record), :mod:`.driver` (submit, chaos, drain) and
:mod:`.findings` (what is left, and the after-run probes).
"""

from bench.harness.chaos.config import ChaosConfig, CountingCohere, chaos_env
from bench.harness.chaos.corpus import nul_text_pdfs, small_pdfs
from bench.harness.chaos.driver import Chaos, Docs
from bench.harness.chaos.findings import (
    Findings,
    inspect,
    inspect_at,
    run_index_worker,
    verify_now,
    zombie_writes,
)

__all__ = [
    "Chaos",
    "ChaosConfig",
    "CountingCohere",
    "Docs",
    "Findings",
    "chaos_env",
    "inspect",
    "inspect_at",
    "nul_text_pdfs",
    "run_index_worker",
    "small_pdfs",
    "verify_now",
    "zombie_writes",
]
