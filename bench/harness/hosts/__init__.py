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

import pwd
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

import anyio

from bench.harness.hosts.documents import make_pdfs
from bench.harness.hosts.faults import FAULTS, TARGET, FaultReport, Scenario
from bench.harness.hosts.servers import PG_OS_USER, pg_bin
from bench.harness.hosts.topology import WORKERS, Cluster, HostsConfig, cluster
from bench.harness.netns import netns_problem


def hosts_problem() -> str | None:
    """Why the hosts cannot be built on this machine (None: they can)."""
    if (problem := netns_problem()) is not None:
        return problem
    if pg_bin() is None:
        return "no PostgreSQL binaries under /usr/lib/postgresql/*/bin"
    if shutil.which("setpriv") is None:
        return "no 'setpriv' (util-linux) to run PostgreSQL as its own user"
    try:
        pwd.getpwnam(PG_OS_USER)
    except KeyError:
        return f"no {PG_OS_USER!r} user to run PostgreSQL as"
    return None


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
    "hosts_problem",
    "make_pdfs",
    "run_fault",
]
