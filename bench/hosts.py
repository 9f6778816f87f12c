"""Faults of a multi-host fleet: hosts as network namespaces on one bridge, each fault on a
fresh cluster, with figures per fault.

``python -m bench.hosts [--fault worker-cut] [--docs 12] [--cut-s 9] [--db-cut-s 30]``
builds the hosts of :mod:`bench.harness.hosts` (root, ``ip netns``): PostgreSQL and an S3
server each on a host of their own, reachable only over the bridge; split stage workers on
three hosts; the index stage on the host that keeps the index; submission from a client
host; the fake Cohere server on the controller. Faults (all by default, in this order):

- ``worker-cut``: a worker host that holds embed jobs is cut off for ``--cut-s`` (three
  leases) while its worker keeps running, then restored;
- ``flap``: the same host's link goes down and up every half lease for ``--cut-s``;
- ``db-cut``: PostgreSQL's host is cut off for ``--db-cut-s``;
- ``s3-cut``: the S3 host is cut off for ``--s3-cut-s`` as the first upload lands.

Per fault: documents ready and failed (of those submitted; refused ones are counted
apart), wasted provider calls (embed calls beyond one per document batch), the takeover
(worker faults: from the cut worker's lease running out until its jobs run elsewhere),
the recovery (from the fault's end until every document is final) and the rejoin (until
every cut-off worker heartbeats again, as the same process). Exits 1 if an invariant broke:
a submitted document not ready, a point duplicated, missing or extra, a job left running,
verify not clean, a cut-off worker that did not rejoin.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

import msgspec

from bench.args import bench_parser
from bench.harness.hosts import (
    FAULTS,
    FaultReport,
    HostsConfig,
    cluster,
    hosts_problem,
    make_pdfs,
    run_fault,
)
from bench.report import heading, row

WIDTHS = (10, 5, 9, 6, 7, 6, 8, 8, 8, 6, 6, 3)


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = bench_parser("bench.hosts", __doc__)
    p.add_argument("--fault", action="append", choices=FAULTS, help="repeatable (all)")
    p.add_argument("--docs", type=int, default=12)
    p.add_argument("--lease-s", type=float, default=3.0)
    p.add_argument("--cut-s", type=float, default=None, help="worker faults (3 leases)")
    p.add_argument("--db-cut-s", type=float, default=30.0)
    p.add_argument("--s3-cut-s", type=float, default=20.0)
    p.add_argument("--json", type=Path, default=None, help="also write the reports here")
    p.add_argument("--keep", action="store_true", help="keep the temporary directory")
    return p.parse_args(argv)


def _cut_s(args: argparse.Namespace, fault: str) -> float:
    if fault == "db-cut":
        return float(args.db_cut_s)
    if fault == "s3-cut":
        return float(args.s3_cut_s)
    return float(args.cut_s) if args.cut_s is not None else 3 * args.lease_s


def ok(r: FaultReport) -> bool:
    return (
        r.ready == r.submitted
        and r.failed == 0
        and r.points == r.chunks
        and (r.duplicates, r.missing, r.extra, r.verify_problems, r.stuck_running) == (0,) * 5
        and r.same_processes
        and (r.fault == "s3-cut" or r.rejoin_s is not None)
    )


def _print(reports: list[FaultReport]) -> None:
    heading("faults")
    cells = ("fault", "cut s", "ready", "failed", "refused", "wasted", "takeover", "recover")
    row(*cells, "rejoin", "held", "fenced", "ok", widths=WIDTHS)
    for r in reports:
        row(
            r.fault,
            r.cut_s,
            f"{r.ready}/{r.submitted}",
            r.failed,
            r.refused,
            r.wasted_calls,
            _s(r.takeover_s),
            _s(r.recover_s),
            _s(r.rejoin_s),
            r.held_at_cut,
            r.fenced,
            "ok" if ok(r) else "NO",
            widths=WIDTHS,
        )


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    if (problem := hosts_problem()) is not None:
        print(f"bench.hosts cannot run here: {problem}", file=sys.stderr)
        return 2
    config = HostsConfig(docs=args.docs, lease_s=args.lease_s, heartbeat_s=args.lease_s / 3)
    tmp = Path(tempfile.mkdtemp(prefix="ragline-hosts-"))
    reports: list[FaultReport] = []
    try:
        pdfs = make_pdfs(tmp / "docs", config.docs, config.pages)
        for n, fault in enumerate(args.fault or FAULTS):
            with cluster(config, tmp / f"{n}-{fault}", say=print) as c:
                reports.append(run_fault(c, fault, pdfs, _cut_s(args, fault), say=print))
            print(reports[-1])
    finally:
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    _print(reports)
    if args.json is not None:
        args.json.write_bytes(msgspec.json.encode(reports))
    return 0 if all(ok(r) for r in reports) else 1


if __name__ == "__main__":
    sys.exit(main())
