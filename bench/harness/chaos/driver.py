"""The chaos driver: submits the corpus, runs the fleet under faults, drains it."""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

import asyncpg
import msgspec

from bench.harness.chaos.config import ROLES, ChaosConfig, CountingCohere, chaos_env
from bench.harness.chaos.faults import Event, Injector, Paused, Postgres
from bench.harness.chaos.fleet import Fleet, last_error
from bench.harness.db import sql, try_sql
from runtime.errors import InvalidDocument, one_line
from stages.actions.submit import submit
from stages.services import Services

UNFINISHED = "SELECT count(*) FROM documents WHERE status NOT IN ('ready', 'failed')"
#: Held documents: their parse jobs wait until the chaos releases them.
HOLD = """
UPDATE stage_jobs SET run_after = now() + interval '1 day'
WHERE document_id = ANY($1::uuid[]) AND state = 'queued'
"""
RELEASE = """
UPDATE stage_jobs j SET run_after = now() + make_interval(secs => r.after_s)
FROM unnest($1::uuid[], $2::float8[]) AS r(document_id, after_s)
WHERE j.document_id = r.document_id AND j.state = 'queued'
"""
#: Running jobs whose lease ran out long ago although a live worker (registered before the
#: expiry, heard from within the last 2 s) was sweeping all along: nobody takes them back.
ABANDONED = """
SELECT count(*) FROM stage_jobs j
WHERE j.state = 'running' AND j.lease_expires_at < now() - make_interval(secs => $1)
  AND EXISTS (SELECT 1 FROM workers w
              WHERE w.started_at < j.lease_expires_at
                AND w.last_seen_at > now() - interval '2 seconds')
"""
DOCS_BY_STATUS = "SELECT status::text, count(*) FROM documents GROUP BY 1"
LIVE_JOBS = """
SELECT stage, state::text, count(*) FROM stage_jobs
WHERE state IN ('queued', 'running') GROUP BY 1, 2
"""


class Docs(msgspec.Struct, kw_only=True):
    """What was submitted: good and broken documents by id, refused files with reasons."""

    good: dict[uuid.UUID, str]
    broken: dict[uuid.UUID, str]
    refused: dict[str, str]


class Chaos:
    """Submits the corpus, runs the fleet under faults, drains it. See the package doc."""

    def __init__(
        self,
        config: ChaosConfig,
        dsn: str,
        data_dir: Path,
        logs: Path,
        server: CountingCohere,
        *,
        restart_db: Callable[[], None] | None = None,
        kill_db: Callable[[], float] | None = None,
        embedded: bool = False,
        say: Callable[[str], None] = lambda _m: None,
    ) -> None:
        self.config = config
        self.dsn = dsn
        self.data_dir = data_dir
        self.server = server
        self.env = chaos_env(config, dsn, data_dir, server.base_url)
        if embedded:  # the workers run on the embedded PostgreSQL of the data dir
            del self.env["DATABASE_URL"]
        self.fleet = Fleet(config, self.env, logs)
        db = Postgres(dsn=dsn, restart=restart_db, kill=kill_db)
        self.faults = Injector(config, self.fleet, db, say)
        self.say = say
        self.drain_s = 0.0
        #: How long the chaos really lasted (it ends early once every document is final).
        self.chaos_s = 0.0
        self.abandoned_seen = 0
        self.stop_codes: dict[int, int | None] = {}
        self.held: list[uuid.UUID] = []

    def services(self) -> Services:
        return Services(self.env, self.data_dir)

    async def submit(self, good: Sequence[Path], broken: Sequence[Path]) -> Docs:
        """Broken files first, so their parse runs before the first kill."""
        docs = Docs(good={}, broken={}, refused={})
        services = self.services()
        async with asyncpg.create_pool(self.dsn, min_size=1, max_size=2) as pool:
            for path, bucket in [
                *((p, docs.broken) for p in broken),
                *((p, docs.good) for p in good),
            ]:
                try:
                    sub = await submit(
                        pool, services.assets, path, max_attempts=self.config.max_attempts
                    )
                except InvalidDocument as exc:
                    docs.refused[path.name] = one_line(str(exc))
                    continue
                bucket[sub.document_id] = path.name
        await services.aclose()
        self.held = list(docs.good)
        return docs

    def run(self) -> None:
        """Start the fleet, inject faults for ``chaos_s``, then drain and stop the fleet."""
        self.faults.began = time.monotonic()
        if self.held:
            sql(self.dsn, HOLD, self.held)
        self.fleet.start_all()
        try:
            self._chaos()
            self.chaos_s = self.faults.now()
            self._drain()
        finally:
            self.stop_codes = self.fleet.stop_all()

    def _chaos(self) -> None:
        c, f = self.config, self.faults
        self._wait_registered(len(ROLES))
        f.began = time.monotonic()  # the chaos clock starts once the fleet is up
        self._release()
        plan = f.plan()
        next_kill = f.rng.uniform(*c.kill_every_s)
        resume: Paused | None = None
        term_pending = False
        while f.now() < c.chaos_s or f.kills() < c.min_kills or plan or resume or term_pending:
            if f.now() > c.chaos_s + 120:
                break
            if self._all_final():
                # Nothing left to hurt, but a paused worker still gets its whole pause.
                if resume is not None:
                    time.sleep(max(0.0, resume[0] - f.now()))
                    f.resume(resume[1])
                break
            self._watch_abandoned()
            self._replace_crashed()
            if resume is not None and f.now() >= resume[0]:
                f.resume(resume[1])
                resume = None
            if plan and f.now() >= plan[0][0]:
                kind = plan.pop(0)[1]
                if kind in ("terminate", "stop") and not f.registered():
                    # Every worker is booting: there is no connection or lease to cut yet.
                    plan = sorted([*plan, (f.now() + 0.5, kind)])
                    continue
                term_pending = term_pending or kind == "term"
                resume = f.special(kind) or resume
            if term_pending:
                term_pending = not f.sigterm_mid_embed(paused=resume[1] if resume else None)
            if f.now() >= next_kill and (f.now() < c.chaos_s or f.kills() < c.min_kills):
                killed = f.kill(exclude=resume[1] if resume else None)
                next_kill = f.now() + (f.rng.uniform(*c.kill_every_s) if killed else 0.5)
            time.sleep(0.05)
        if term_pending:
            f.record("sigterm-mid-embed", note="no embed job seen running: not injected")

    def _replace_crashed(self) -> None:
        """A worker that exited without being told to crashed: note why, start another."""
        for role, worker in list(self.fleet.current.items()):
            if worker.signalled or worker.alive():
                continue
            code = worker.proc.proc.returncode
            self.faults.record(
                "crashed", role=role, pid=worker.pid, note=f"exit {code}: {last_error(worker)}"
            )
            self.fleet.start(role)

    def _wait_registered(self, count: int, timeout_s: float = 120.0) -> None:
        deadline = time.monotonic() + timeout_s
        while len(self.faults.registered()) < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"workers did not start within {timeout_s:.0f}s")
            time.sleep(0.1)

    def _release(self) -> None:
        """Release the held documents: a share at once, the rest spread over the chaos."""
        c = self.config
        n = len(self.held)
        now_n = math.ceil(n * c.release_at_once)
        step = c.chaos_s * c.release_over / max(1, n - now_n)
        after = [0.0 if i < now_n else (i - now_n + 1) * step for i in range(n)]
        if n:
            sql(self.dsn, RELEASE, self.held, after)

    def _all_final(self) -> bool:
        rows = try_sql(self.dsn, UNFINISHED)
        return rows is not None and rows[0][0] == 0

    def _watch_abandoned(self) -> None:
        # A running job whose lease expired well beyond a few sweeps is one nobody rescues.
        rows = try_sql(self.dsn, ABANDONED, self.config.lease_s + 15.0)
        if rows is not None:
            self.abandoned_seen = max(self.abandoned_seen, int(rows[0][0]))

    def _drain(self) -> None:
        began = time.monotonic()
        deadline = began + self.config.drain_timeout_s
        while not self._all_final():
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"documents not final {self.config.drain_timeout_s:.0f}s after the chaos: "
                    f"{self.progress()}"
                )
            self._watch_abandoned()
            self._replace_crashed()
            if int(time.monotonic() - began) % 10 == 0:
                self.say(f"draining {time.monotonic() - began:5.1f}s: {self.progress()}")
            time.sleep(1.0)
        self.drain_s = time.monotonic() - began

    def progress(self) -> str:
        """Documents by status and live jobs by stage and state, one line."""
        d = ", ".join(f"{r[0]} {r[1]}" for r in try_sql(self.dsn, DOCS_BY_STATUS) or [])
        j = ", ".join(f"{r[0]}:{r[1]} {r[2]}" for r in try_sql(self.dsn, LIVE_JOBS) or [])
        return f"documents [{d}] live jobs [{j}]"

    # -- what the faults did (the bounds the checks allow for) -------------------------------

    @property
    def events(self) -> list[Event]:
        return self.faults.events

    def kills(self) -> int:
        return self.faults.kills()

    def interrupted_embed_jobs(self) -> int:
        return self.faults.interrupted_embed_jobs()

    def crashes(self) -> list[Event]:
        return self.faults.crashes()

    def injected(self, kind: str) -> int:
        return self.faults.injected(kind)
