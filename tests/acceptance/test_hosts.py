"""Many hosts against one PostgreSQL, one of them cut off: hosts are network namespaces on
a bridge (as root, which CI is), PostgreSQL and S3 each on a host of their own and
reachable only over the bridge, split stage workers on three hosts, the index stage where
the index is, the corpus submitted from a fifth. One worker host's link is cut for three
leases while it holds embed jobs and keeps running, then restored.

Nothing is lost and nothing is doubled (points counted in the index itself), the cut
worker fences its own jobs and commits nothing after its lease, another takes them over,
no job is left running, ``verify`` is clean, and the cut worker rejoins as the same
process. The harness is :mod:`bench.harness.hosts`; ``python -m bench.hosts`` runs every
fault.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bench.harness.hosts import (
    FaultReport,
    HostsConfig,
    cluster,
    hosts_problem,
    make_pdfs,
    run_fault,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

CONFIG = HostsConfig(docs=12, lease_s=3.0, heartbeat_s=1.0)
#: Longer than a lease: the cut worker's leases run out and others take its jobs.
CUT_S = 3 * CONFIG.lease_s


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultReport]:
    if (problem := hosts_problem()) is not None:
        pytest.skip(f"cannot build hosts here: {problem}")
    root = tmp_path_factory.mktemp("hosts")
    pdfs = make_pdfs(root / "docs", CONFIG.docs, CONFIG.pages)
    with cluster(CONFIG, root, say=print) as c:
        found = run_fault(c, "worker-cut", pdfs, CUT_S, say=print)
    print(found)
    yield found


def test_every_document_is_ready_and_none_failed_by_the_partition(report: FaultReport) -> None:
    assert (report.submitted, report.refused) == (CONFIG.docs, 0)
    assert (report.ready, report.failed) == (CONFIG.docs, 0)


def test_the_index_holds_each_chunk_once(report: FaultReport) -> None:
    assert report.points == report.chunks > 0
    assert (report.duplicates, report.missing, report.extra) == (0, 0, 0)
    assert report.verify_problems == 0


def test_the_cut_worker_fenced_its_jobs_and_others_took_them_over(report: FaultReport) -> None:
    assert report.held_at_cut >= 1
    assert report.fenced >= 1
    assert report.takeover_s is not None
    # Each job it held wastes at most the one call it had in flight (small documents: one
    # embed batch each); it can start no other.
    assert 0 <= report.wasted_calls <= report.held_at_cut


def test_no_job_is_left_running(report: FaultReport) -> None:
    assert report.stuck_running == 0


def test_the_cut_worker_rejoins_without_a_restart(report: FaultReport) -> None:
    assert report.rejoin_s is not None
    assert report.same_processes
    assert report.unclean_exits == 0
