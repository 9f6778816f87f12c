"""The multi-host harness shared by ``tests/acceptance/test_hosts.py`` and
``bench/hosts.py``: hosts are network namespaces on one bridge
(:mod:`bench.harness.netns`); PostgreSQL and an S3 server (moto) each run on a host of
their own, reachable only over the bridge; stage workers with split ``--stages`` sets run
on three worker hosts and the index stage on the host that keeps the index; the corpus is
submitted from a client host; the fake Cohere server (the provider, counting its calls)
runs on the controller, which is the calling process.

    with cluster(HostsConfig(), tmp, say=print) as c:
        report = run_fault(c, "worker-cut", pdfs, cut_s=9.0)

One module a role: :mod:`.topology` (who runs what, the cluster), :mod:`.servers`
(PostgreSQL and S3 in a namespace), :mod:`.workers` (processes on a host),
:mod:`.documents` (made PDFs) and :mod:`.faults` (each fault and what it cost).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import anyio

from bench.harness.hosts.documents import make_pdfs
from bench.harness.hosts.faults import FAULTS, TARGET, FaultReport, Scenario
from bench.harness.hosts.topology import WORKERS, Cluster, HostsConfig, cluster


def run_fault(
    c: Cluster,
    fault: str,
    pdfs: Sequence[Path],
    cut_s: float,
    say: Callable[[str], None] = lambda _s: None,
) -> FaultReport:
    """Run one fault on a fresh cluster (workers not started yet) and report it."""
    return anyio.run(Scenario(c, fault, cut_s, say).run, pdfs)


__all__ = [
    "FAULTS",
    "TARGET",
    "WORKERS",
    "Cluster",
    "FaultReport",
    "HostsConfig",
    "cluster",
    "make_pdfs",
    "run_fault",
]
