"""The faults the chaos driver injects into the fleet and the database, and their record."""

from __future__ import annotations

import random
import signal
import time
from collections.abc import Callable
from typing import Any

import msgspec

from bench.harness.chaos.config import ChaosConfig
from bench.harness.chaos.fleet import ChaosProcess, Fleet
from bench.harness.db import try_sql

EMBED_RUNNING = """
SELECT split_part(lease_owner, ':', 2)::int AS pid, count(*) AS n
FROM stage_jobs WHERE state = 'running' AND stage = 'embed'
GROUP BY 1
"""
TERMINATE = """
SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid()
"""
RUNNING_PIDS = """
SELECT DISTINCT split_part(lease_owner, ':', 2)::int FROM stage_jobs WHERE state = 'running'
"""
#: A SIGSTOPped worker and when to send it SIGCONT (seconds on the chaos clock).
Paused = tuple[float, ChaosProcess]


class Postgres(msgspec.Struct, frozen=True, kw_only=True):
    """The run's database as the injector reaches it: its DSN, and what the caller lets it
    do to the server: ``restart`` PostgreSQL, ``kill`` the embedded postmaster (returns
    the seconds until it answered again). A fault whose callable is None is not injected."""

    dsn: str
    restart: Callable[[], None] | None = None
    kill: Callable[[], float] | None = None


class Event(msgspec.Struct, frozen=True, kw_only=True):
    """One injected fault: ``embed_jobs`` is how many embed jobs it interrupted at most."""

    at_s: float
    kind: str
    role: str = ""
    pid: int = 0
    embed_jobs: int = 0
    note: str = ""


class Injector:
    """Injects one fault at a time into the fleet or the database and records it."""

    def __init__(
        self, config: ChaosConfig, fleet: Fleet, db: Postgres, say: Callable[[str], None]
    ) -> None:
        self.config = config
        self.fleet = fleet
        self.db = db
        self.say = say
        self.rng = random.Random(config.seed)
        self.events: list[Event] = []
        self.began = time.monotonic()

    def now(self) -> float:
        return time.monotonic() - self.began

    def record(self, kind: str, **fields: Any) -> None:
        event = Event(at_s=round(self.now(), 2), kind=kind, **fields)
        self.events.append(event)
        self.say(f"{event.at_s:7.2f}s {kind} {event.role} pid={event.pid} {event.note}".rstrip())

    # -- what the database says about the fleet ----------------------------------------------

    def registered(self) -> set[int]:
        """Pids of fleet workers that are up (registered in ``workers``) and alive."""
        rows = try_sql(self.db.dsn, "SELECT split_part(id, ':', 2)::int FROM workers") or []
        up = {int(r[0]) for r in rows}
        return {w.pid for w in self.fleet.current.values() if w.pid in up and w.alive()}

    def embed_jobs(self) -> dict[int, int]:
        rows = try_sql(self.db.dsn, EMBED_RUNNING) or []
        return {int(r["pid"]): int(r["n"]) for r in rows}

    def running_pids(self) -> set[int]:
        return {int(r[0]) for r in try_sql(self.db.dsn, RUNNING_PIDS) or []}

    # -- the faults ----------------------------------------------------------------------------

    def plan(self) -> list[tuple[float, str]]:
        """The one-off faults, by the time on the chaos clock they are due."""
        c = self.config
        plan = [
            (c.chaos_s * 0.25, "terminate"),
            (c.chaos_s * 0.4, "stop"),
            (c.chaos_s * 0.55, "term"),
        ]
        plan += [
            (c.chaos_s * (0.3 + 0.5 * i / max(1, c.pg_restarts)), "restart")
            for i in range(c.pg_restarts)
        ]
        plan += [
            (c.chaos_s * (0.35 + 0.5 * i / max(1, c.pg_kills)), "pgkill") for i in range(c.pg_kills)
        ]
        return sorted(plan)

    def special(self, kind: str) -> Paused | None:
        if kind == "terminate":
            self.terminate_backends()
        elif kind == "restart":
            self.restart_postgres()
        elif kind == "pgkill" and self.db.kill is not None:
            embed = sum(self.embed_jobs().values())
            down_s = self.db.kill()
            self.record("pg-kill", embed_jobs=embed, note=f"back after {down_s:.1f}s")
        elif kind == "stop":
            return self.sigstop()
        return None

    def kill(self, exclude: ChaosProcess | None) -> bool:
        # Only workers that are up: killing one still importing its libraries tests nothing.
        up = self.registered()
        choices = [w for w in self.fleet.current.values() if w is not exclude and w.pid in up]
        if not choices:
            return False
        victim = self.rng.choice(choices)
        # The embed jobs it holds, counted just before the kill, bound the batches lost.
        embed = self.embed_jobs().get(victim.pid, 0)
        victim.signalled = True
        victim.proc.signal(signal.SIGKILL)
        self.record("sigkill", role=victim.role, pid=victim.pid, embed_jobs=embed)
        self.fleet.start(victim.role)
        return True

    def terminate_backends(self) -> None:
        embed = sum(self.embed_jobs().values())
        rows = try_sql(self.db.dsn, TERMINATE)
        killed = rows[0][0] if rows else 0
        self.record("terminate-backends", embed_jobs=embed, note=f"{killed} backends")

    def restart_postgres(self) -> None:
        if self.db.restart is None:
            return
        embed = sum(self.embed_jobs().values())
        began = time.monotonic()
        self.db.restart()
        took = time.monotonic() - began
        self.record("pg-restart", embed_jobs=embed, note=f"down {took:.1f}s")

    def sigstop(self) -> Paused | None:
        # Prefer a worker holding a lease, so the pause really outlives one.
        running = self.running_pids()
        live = [w for w in self.fleet.current.values() if w.alive()]
        holding = [w for w in live if w.pid in running] or live
        if not holding:
            return None
        victim = self.rng.choice(holding)
        embed = self.embed_jobs().get(victim.pid, 0)
        victim.proc.signal(signal.SIGSTOP)
        self.record("sigstop", role=victim.role, pid=victim.pid, embed_jobs=embed)
        return self.now() + 2 * self.config.lease_s + 1.0, victim

    def resume(self, worker: ChaosProcess) -> None:
        worker.proc.signal(signal.SIGCONT)
        self.record("sigcont", role=worker.role, pid=worker.pid)

    def sigterm_mid_embed(self, paused: ChaosProcess | None) -> bool:
        """SIGTERM a worker while it runs an embed job (found in stage_jobs by its pid);
        never the SIGSTOPped one, which could not act on it."""
        for pid, n in self.embed_jobs().items():
            worker = self.fleet.by_pid(pid)
            if worker is not None and worker is not paused and worker.alive():
                worker.signalled = True
                worker.proc.signal(signal.SIGTERM)
                self.record("sigterm-mid-embed", role=worker.role, pid=pid, embed_jobs=n)
                self.fleet.start(worker.role)
                return True
        return False

    # -- bounds ----------------------------------------------------------------------------------

    def kills(self) -> int:
        return sum(1 for e in self.events if e.kind == "sigkill")

    def interrupted_embed_jobs(self) -> int:
        """Embed jobs that an injected fault could have cut off after a 200 response."""
        return sum(e.embed_jobs for e in self.events)

    def crashes(self) -> list[Event]:
        return [e for e in self.events if e.kind == "crashed"]

    def injected(self, kind: str) -> int:
        return sum(1 for e in self.events if e.kind == kind and not e.note.startswith("no "))
