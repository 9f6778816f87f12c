"""Chaos soak: the acceptance chaos scenario, longer, with PostgreSQL restarts; prints figures.

``python -m bench.chaos [--pdfs 150] [--chaos-s 90] [--pg-restarts 2]`` runs the harness
of :mod:`bench.harness.chaos` against a private embedded PostgreSQL that it starts (and
restarts, ``--pg-restarts`` times, during the chaos) in a temporary directory. With
``--database-url URL`` it uses that server instead (a throwaway database is created and
dropped) and restarts nothing unless ``--restart-command CMD`` is given explicitly, e.g.
``--restart-command 'pg_ctlcluster 16 main restart'``.

Figures are printed, and the run exits 1 if an invariant broke (a good document not ready,
a point duplicated, missing or orphaned, more wasted embed requests than interrupted embed
jobs, verify not clean), so it can gate a nightly job.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import anyio
import msgspec

from bench.harness.chaos import (
    Chaos,
    ChaosConfig,
    CountingCohere,
    Docs,
    Findings,
    inspect,
    small_pdfs,
)
from bench.harness.corpus import BROKEN_KINDS, CORPUS_DIR
from bench.harness.db import migrate_database, throwaway_database
from runtime.db.embedded import EmbeddedPostgres


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.chaos", description=__doc__)
    p.add_argument("--pdfs", type=int, default=150)
    p.add_argument("--max-pages", type=int, default=30)
    p.add_argument("--chaos-s", type=float, default=90.0)
    p.add_argument("--kill-every-s", default="2,3", help="min,max seconds between SIGKILLs")
    p.add_argument("--pg-restarts", type=int, default=2)
    p.add_argument(
        "--kill-postmaster",
        type=int,
        default=2,
        help="SIGKILLs of the embedded postmaster (the workers then run on the embedded "
        "defaults of the data dir and must bring it back themselves)",
    )
    p.add_argument("--drain-timeout-s", type=float, default=600.0)
    p.add_argument("--seed", type=int, default=11)
    p.add_argument("--database-url", default=None, help="use this server, not an embedded one")
    p.add_argument("--restart-command", default=None, help="shell command restarting it")
    p.add_argument("--keep", action="store_true", help="keep the temporary directory")
    p.add_argument("--quiet", action="store_true", help="do not print each injected fault")
    return p.parse_args(argv)


def _kill_postmaster(pg: EmbeddedPostgres, data_dir: Path) -> Callable[[], float]:
    """SIGKILL the postmaster, then wait for the workers' supervisors to start it again;
    returns how long it was down."""

    def kill() -> float:
        location = data_dir / "pg.location"
        cluster = Path(location.read_text().strip()) if location.exists() else data_dir / "pg"
        pid = int((cluster / "data" / "postmaster.pid").read_text().split()[0])
        began = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        while not pg.is_running():
            if time.monotonic() - began > 120:
                raise TimeoutError("the embedded PostgreSQL was not started again in 120 s")
            time.sleep(0.05)
        return time.monotonic() - began

    return kill


@contextlib.contextmanager
def _embedded_fleet(tmp: Path) -> Iterator[tuple[str, Callable[[], None], Callable[[], float]]]:
    """The data dir's own embedded cluster, used by the workers as they ship (no
    DATABASE_URL): (its DSN, a restart, a postmaster kill)."""
    data_dir = tmp / "data"
    pg = EmbeddedPostgres(data_dir)
    dsn = pg.acquire()

    def restart() -> None:
        pg.stop()
        pg.acquire()

    try:
        migrate_database(dsn)
        yield dsn, restart, _kill_postmaster(pg, data_dir)
    finally:
        pg.stop()


@contextlib.contextmanager
def _server(args: argparse.Namespace, tmp: Path) -> Iterator[tuple[str, Callable[[], None] | None]]:
    """(server DSN, restart function or None)."""
    if args.database_url:
        command = args.restart_command
        yield args.database_url, (lambda: _run_shell(command)) if command else None
        return
    from runtime.db.embedded import EmbeddedPostgres

    pg = EmbeddedPostgres(tmp / "pg")
    dsn = pg.acquire()

    def restart() -> None:
        pg.stop()
        pg.acquire()

    try:
        yield dsn, restart
    finally:
        pg.stop()


def _run_shell(command: str) -> None:
    subprocess.run(command, shell=True, check=True)


def _config(args: argparse.Namespace, restarts: int) -> ChaosConfig:
    low, high = (float(x) for x in args.kill_every_s.split(","))
    return ChaosConfig(
        pdfs=args.pdfs,
        max_pages=args.max_pages,
        chaos_s=args.chaos_s,
        kill_every_s=(low, high),
        pg_restarts=restarts,
        drain_timeout_s=args.drain_timeout_s,
        seed=args.seed,
    )


def _corpus(config: ChaosConfig) -> tuple[list[Path], list[Path]]:
    if not (CORPUS_DIR / ".complete").is_file():
        sys.exit("corpus not fetched: run tests/corpus/fetch.sh")
    good = small_pdfs(sorted((CORPUS_DIR / "pdfs").glob("*.pdf")), config.pdfs, config.max_pages)
    broken = [CORPUS_DIR / "broken" / f"{k}.pdf" for k in BROKEN_KINDS]
    return good, broken


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="ragline-chaos-"))
    # mkdtemp makes it 0700; as root the embedded server runs as another user, who must
    # enter it (else its cluster would be placed under /var/tmp and outlive the run).
    tmp.chmod(0o711)
    try:
        if args.kill_postmaster and not args.database_url:
            with _embedded_fleet(tmp) as (dsn, restart, kill):
                config = _config(args, args.pg_restarts)
                config = msgspec.structs.replace(config, pg_kills=args.kill_postmaster)
                return _soak(config, dsn, tmp, restart, quiet=args.quiet, kill=kill)
        with (
            _server(args, tmp) as (server, restart),
            throwaway_database(server, "ragline_chaos") as dsn,
        ):
            config = _config(args, args.pg_restarts if restart else 0)
            return _soak(config, dsn, tmp, restart, quiet=args.quiet)
    finally:
        if not args.keep:
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print(f"kept {tmp}")


def _soak(
    config: ChaosConfig,
    dsn: str,
    tmp: Path,
    restart: Callable[[], None] | None,
    *,
    quiet: bool,
    kill: Callable[[], float] | None = None,
) -> int:
    good, broken = _corpus(config)
    (tmp / "logs").mkdir()
    server = CountingCohere(dims=config.dims, rates=config.fault_rates()).start()
    say: Callable[[str], None] = (lambda _m: None) if quiet else print
    chaos = Chaos(
        config,
        dsn,
        tmp / "data",
        tmp / "logs",
        server,
        restart_db=restart,
        kill_db=kill,
        embedded=kill is not None,
        say=say,
    )
    try:
        docs = anyio.run(chaos.submit, good, broken)
        began = time.monotonic()
        chaos.run()
        wall = time.monotonic() - began
        found = anyio.run(inspect, chaos)
    finally:
        chaos.fleet.kill_all()
        server.stop()
    return _report(chaos, docs, found, wall)


def _report(chaos: Chaos, docs: Docs, found: Findings, wall_s: float) -> int:
    good, broken, refused = docs.good, docs.broken, docs.refused
    ready = sum(1 for i in good if found.docs[i].status == "ready")
    failed_broken = sum(
        1
        for i in broken
        if found.docs[i].status == "failed" and (found.docs[i].error or "").startswith("parse: ")
    )
    good_failed = sum(1 for i in good if found.docs[i].status == "failed")
    chunk_rows = sum(d.chunks for d in found.docs.values() if d.status == "ready")
    bound = chaos.interrupted_embed_jobs()
    wasted = max(0, found.embed_ok - found.embed_needed)
    lost = sum(j.lost for j in found.jobs)
    worst = max((j.attempts for j in found.jobs), default=0)
    rows = [
        ("documents", f"{len(good)} good, {len(broken)} broken, {len(refused)} refused at submit"),
        ("ready", f"{ready}/{len(good)}"),
        ("good documents failed", good_failed),
        ("broken failed once at parse", f"{failed_broken}/{len(broken)}"),
        ("SIGKILLs", chaos.kills()),
        ("PostgreSQL restarts", chaos.injected("pg-restart")),
        ("embedded postmaster SIGKILLs", chaos.injected("pg-kill")),
        ("backend terminations", chaos.injected("terminate-backends")),
        (
            "SIGSTOP past lease / SIGTERM mid-embed",
            f"{chaos.injected('sigstop')} / {chaos.injected('sigterm-mid-embed')}",
        ),
        ("worker processes started", len(chaos.fleet.every)),
        ("workers crashed on their own", len(chaos.crashes())),
        (
            "chaos (of --chaos-s), then time to drain",
            f"{chaos.chaos_s:.1f}s (of {chaos.config.chaos_s:.0f}s), {chaos.drain_s:.1f}s",
        ),
        ("wall time (fleet up to drained)", f"{wall_s:.1f}s"),
        ("faults injected", ", ".join(f"{k} {v}" for k, v in sorted(found.faults.items()))),
        ("embed 200s / batches needed", f"{found.embed_ok} / {found.embed_needed}"),
        ("wasted embed requests / bound", f"{wasted} / {bound} (embed jobs interrupted)"),
        ("texts embedded / distinct", f"{found.texts_embedded} / {found.distinct_texts}"),
        ("attempts lost to dead workers", lost),
        ("highest attempts / max", f"{worst} / {chaos.config.max_attempts}"),
        (
            "points / chunk rows of ready docs",
            f"{found.total_points} / {chunk_rows}",
        ),
        (
            "duplicates / orphans / missing",
            f"{found.duplicates()} / {found.orphan_points} / {found.missing()}",
        ),
        (
            "verify",
            ("clean" if found.verify.clean else f"{len(found.verify.problems)} problem(s)")
            + f"; asset store: {len(found.verify.store)} leftover(s) of killed writes "
            f"({len(found.verify.settled_store)} older than the grace period)",
        ),
    ]
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")
    ok = (
        ready == len(good)
        and failed_broken == len(broken)
        and found.duplicates() == found.orphan_points == found.missing() == found.extra() == 0
        and wasted <= bound
        and found.verify.clean
    )
    for event in chaos.crashes():
        print(f"  crash at {event.at_s:.1f}s ({event.role}, pid {event.pid}): {event.note}")
    print("result:", "OK" if ok else "INVARIANT BROKEN")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
