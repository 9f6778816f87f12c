"""The faults of a multi-host run, each injected while documents flow, and what each one
cost: documents ready and failed, wasted provider calls, time to recover and to rejoin.

- ``worker-cut``: a worker host's link is cut for longer than a lease while its worker
  holds jobs and keeps running, then restored.
- ``flap``: the same host's link goes down and up every ``flap_s`` for ``cut_s``.
- ``db-cut``: PostgreSQL's host is cut (30 s in the benchmark).
- ``s3-cut``: the S3 host is cut as the submission's first upload lands.

Times: ``takeover_s`` runs from the moment the cut worker's leases ran out until every job
it held runs elsewhere or is done (worker faults); ``recover_s`` from the fault's end until
every document is ready or failed; ``rejoin_s`` from the fault's end until the workers
that were cut off heartbeat again (the same processes: none is restarted).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import anyio
import asyncpg
import msgspec

from bench.harness.chaos import Findings, inspect_at
from bench.harness.hosts.topology import BUCKET, Cluster, HostsConfig
from bench.harness.hosts.workers import Submitted

FAULTS = ("worker-cut", "flap", "db-cut", "s3-cut")
#: The worker host the worker faults cut off: it serves every stage but index.
TARGET = "w3"
#: The controller's reads give up this soon (PostgreSQL's host may be the one cut off).
PROBE_TIMEOUT_S = 2.0


class FaultReport(msgspec.Struct, kw_only=True):
    fault: str
    cut_s: float
    submitted: int
    refused: int
    ready: int
    failed: int
    wasted_calls: int
    embed_calls: int
    takeover_s: float | None
    recover_s: float | None
    rejoin_s: float | None
    #: Jobs still running once every document was final (must be 0).
    stuck_running: int
    #: Points in the index itself vs chunk rows of ready documents.
    points: int
    chunks: int
    duplicates: int
    missing: int
    extra: int
    verify_problems: int
    #: The cut-off workers still run as the same processes at the end.
    same_processes: bool
    #: Jobs the target held when it was cut off (worker faults and db-cut).
    held_at_cut: int
    #: Jobs the cut-off workers cancelled themselves, their lease unconfirmable (their logs).
    fenced: int
    #: Workers whose SIGTERM at the end did not exit 0.
    unclean_exits: int


class Window(msgspec.Struct, kw_only=True):
    """When a fault began and ended (monotonic and wall clock), and whom it cut off."""

    started: float
    ended: float
    ended_wall: float
    #: Pids of the workers that lost PostgreSQL, and the jobs the target held at the cut.
    cut_pids: list[int]
    held: list[int]
    takeover_s: float | None = None


class Probe:
    """The controller's view of the database: short reads that fail soft."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self._conn: asyncpg.Connection[Any] | None = None

    async def fetch(self, query: str, *args: object) -> list[asyncpg.Record] | None:
        try:
            with anyio.fail_after(PROBE_TIMEOUT_S):
                if self._conn is None or self._conn.is_closed():
                    self._conn = await asyncpg.connect(self.dsn, timeout=PROBE_TIMEOUT_S)
                return await self._conn.fetch(query, *args)
        except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError):
            await self.close()
            return None

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.terminate()

    async def until(
        self, check: Callable[[], Awaitable[bool]], timeout_s: float, what: str
    ) -> float:
        """Poll ``check`` until true; returns when (monotonic)."""
        deadline = time.monotonic() + timeout_s
        while not await check():
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out waiting for {what}")
            await anyio.sleep(0.1)
        return time.monotonic()

    async def held_by(self, pid: int, stage: str | None = None) -> list[int]:
        rows = await self.fetch(
            "SELECT id FROM stage_jobs WHERE state = 'running' AND lease_owner LIKE $1"
            " AND ($2::text IS NULL OR stage = $2)",
            f"%:{pid}:%",
            stage,
        )
        return [r["id"] for r in rows or []]

    async def taken_over(self, held: Sequence[int], pid: int) -> bool:
        """Every job in ``held`` is done, or running under another worker."""
        rows = await self.fetch(
            "SELECT count(*) AS n FROM stage_jobs WHERE id = ANY($1) AND (state = 'queued'"
            " OR (state = 'running' AND lease_owner LIKE $2))",
            list(held),
            f"%:{pid}:%",
        )
        return rows is not None and rows[0]["n"] == 0

    async def seen_since(self, pids: Sequence[int], wall: float) -> bool:
        """Every worker of ``pids`` heartbeat after ``wall`` (PostgreSQL shares our clock)."""
        rows = await self.fetch(
            "SELECT count(*) AS n FROM workers WHERE last_seen_at > to_timestamp($1)"
            " AND split_part(id, ':', 2) = ANY($2::text[])",
            wall,
            [str(p) for p in pids],
        )
        return rows is not None and rows[0]["n"] == len(pids)

    async def final(self, ids: Sequence[str]) -> bool:
        rows = await self.fetch(
            "SELECT count(*) AS n FROM documents WHERE id = ANY($1::uuid[])"
            " AND status IN ('ready', 'failed')",
            list(ids),
        )
        return rows is not None and rows[0]["n"] == len(ids)

    async def running(self) -> int:
        rows = await self.fetch("SELECT count(*) AS n FROM stage_jobs WHERE state = 'running'")
        return -1 if rows is None else int(rows[0]["n"])


class Scenario:
    """One fault on a fresh cluster: workers up, the corpus submitted, the fault injected
    while it flows, every document waited for, then the findings."""

    def __init__(
        self, cluster: Cluster, fault: str, cut_s: float, say: Callable[[str], None]
    ) -> None:
        if fault not in FAULTS:
            raise ValueError(f"unknown fault {fault!r}; one of {', '.join(FAULTS)}")
        self.c = cluster
        self.config: HostsConfig = cluster.config
        self.fault = fault
        self.cut_s = cut_s
        self.say = say
        self.probe = Probe(cluster.dsn)
        self.submitted: Submitted | None = None

    async def run(self, pdfs: Sequence[Path]) -> FaultReport:
        self.c.start_workers()
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._submit, list(pdfs))
                window = await self._inject()
            assert self.submitted is not None
            ids = self.submitted.ids
            done = await self.probe.until(
                lambda: self.probe.final(ids), self.config.drain_timeout_s, "every document"
            )
            rejoined = await self._rejoin(window)
            stuck = await self.probe.running()
            pids_now = {p.pid for p in self.c.workers.values() if p.alive()}
        finally:
            await self.probe.close()
            codes = self.c.stop_workers()
        found = await inspect_at(self.c.dsn, self.c.services(), self.c.server)
        report = self._report(window, found, done - window.ended, rejoined, stuck, pids_now)
        report.fenced = sum(_fenced(p.output()) for p in self.c.every if p.pid in window.cut_pids)
        report.unclean_exits = sum(1 for code in codes.values() if code != 0)
        return report

    async def _submit(self, pdfs: list[Path]) -> None:
        self.submitted = await anyio.to_thread.run_sync(self.c.submit, pdfs)
        self.say(f"submitted {len(self.submitted.ids)}, refused {len(self.submitted.refused)}")

    async def _inject(self) -> Window:
        if self.fault == "db-cut":
            return await self._cut_db()
        if self.fault == "s3-cut":
            return await self._cut_s3()
        return await self._cut_worker(flap=self.fault == "flap")

    async def _target_busy(self, pid: int) -> list[int]:
        """Wait until the target holds an embed job (any job, if none comes): its jobs."""
        held: list[int] = []

        async def holds(stage: str | None) -> bool:
            nonlocal held
            held = await self.probe.held_by(pid, stage)
            return bool(held)

        try:
            await self.probe.until(lambda: holds("embed"), 60, "the target to hold an embed job")
        except TimeoutError:
            await self.probe.until(lambda: holds(None), 30, "the target to hold a job")
        return held

    async def _cut_worker(self, *, flap: bool) -> Window:
        pid = self.c.workers[TARGET].pid
        held = await self._target_busy(pid)
        started = time.monotonic()
        self.say(f"{self.fault}: {TARGET} (pid {pid}) holds jobs {held}; cutting its link")
        takeover: float | None = None
        with self._down(TARGET):
            if flap:
                await self._flap()
            else:
                expiry = started + self.config.lease_s
                done = await self.probe.until(
                    lambda: self.probe.taken_over(held, pid), self.cut_s, "the takeover"
                )
                takeover = max(done - expiry, 0.0)
                await anyio.sleep(max(started + self.cut_s - time.monotonic(), 0.0))
        return Window(
            started=started,
            ended=time.monotonic(),
            ended_wall=time.time(),
            cut_pids=[pid],
            held=held,
            takeover_s=takeover,
        )

    @contextlib.contextmanager
    def _down(self, host: str) -> Iterator[None]:
        """``host``'s link cut for the block, and restored however the block ends."""
        self.c.cut(host)
        try:
            yield
        finally:
            self.c.restore(host)

    async def _flap(self) -> None:
        """Down and up every ``flap_s`` (half a lease) until ``cut_s`` has passed; down."""
        flap_s = self.config.lease_s / 2
        until = time.monotonic() + self.cut_s
        while time.monotonic() < until:
            await anyio.sleep(flap_s)
            self.c.restore(TARGET)
            await anyio.sleep(flap_s)
            self.c.cut(TARGET)

    async def _cut_db(self) -> Window:
        pids = [p.pid for p in self.c.workers.values()]
        embedder = self.c.workers[TARGET].pid
        held = await self._target_busy(embedder)
        started = time.monotonic()
        self.say(f"db-cut: PostgreSQL's host cut for {self.cut_s:g} s")
        with self._down("db"):
            await anyio.sleep(self.cut_s)
        return Window(
            started=started,
            ended=time.monotonic(),
            ended_wall=time.time(),
            cut_pids=pids,
            held=held,
        )

    async def _cut_s3(self) -> Window:
        log = self.c.logs / "s3.log"
        seen = len(_puts(log))
        await self.probe.until(_async(lambda: len(_puts(log)) > seen), 60, "the first upload")
        started = time.monotonic()
        self.say(f"s3-cut: the S3 host cut for {self.cut_s:g} s mid-submission")
        with self._down("s3"):
            await anyio.sleep(self.cut_s)
        return Window(
            started=started,
            ended=time.monotonic(),
            ended_wall=time.time(),
            cut_pids=[],
            held=[],
        )

    async def _rejoin(self, window: Window) -> float | None:
        if not window.cut_pids:
            return None
        done = await self.probe.until(
            lambda: self.probe.seen_since(window.cut_pids, window.ended_wall), 60, "the rejoin"
        )
        return done - window.ended

    def _report(
        self,
        window: Window,
        found: Findings,
        recover_s: float,
        rejoin_s: float | None,
        stuck: int,
        pids_now: set[int],
    ) -> FaultReport:
        assert self.submitted is not None
        ids = set(self.submitted.ids)
        docs = [d for d in found.docs.values() if str(d.id) in ids]
        ready = [d for d in docs if d.status == "ready"]
        return FaultReport(
            fault=self.fault,
            cut_s=round(window.ended - window.started, 1),
            submitted=len(self.submitted.ids),
            refused=len(self.submitted.refused),
            ready=len(ready),
            failed=sum(1 for d in docs if d.status == "failed"),
            wasted_calls=found.embed_ok - found.embed_needed,
            embed_calls=found.embed_ok,
            takeover_s=_round(window.takeover_s),
            recover_s=_round(recover_s),
            rejoin_s=_round(rejoin_s),
            stuck_running=stuck,
            points=found.total_points,
            chunks=sum(d.chunks for d in ready),
            duplicates=found.duplicates(),
            missing=found.missing(),
            extra=found.extra(),
            verify_problems=len(found.verify.problems) + len(found.verify.store),
            same_processes=set(window.cut_pids) <= pids_now,
            held_at_cut=len(window.held),
            fenced=0,
            unclean_exits=0,
        )


#: What a worker logs as it cancels a job whose lease it could not renew.
FENCED = "lease cannot be renewed"


def _fenced(log: str) -> int:
    return sum(1 for line in log.splitlines() if FENCED in line)


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def _puts(log: Path) -> list[str]:
    """The S3 server's log lines of object uploads."""
    if not log.exists():
        return []
    return [ln for ln in log.read_text(errors="replace").splitlines() if f'"PUT /{BUCKET}/' in ln]


def _async(check: Callable[[], bool]) -> Callable[[], Awaitable[bool]]:
    async def wrapped() -> bool:
        return check()

    return wrapped
