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
"""

# PyMuPDF's API is only partly typed.
# mypy: disallow-untyped-calls=False

from __future__ import annotations

import contextlib
import math
import os
import random
import signal
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import anyio
import asyncpg
import msgspec
import pymupdf

from runtime.errors import InvalidDocument, MissingInput, one_line
from stages import verify as verify_mod
from stages.services import Services
from stages.submit import submit
from stages.vector_index import new_point, point_id
from tests.support.fake_cohere import FakeCohere, Fault, FaultRates
from tests.support.procs import REPO, WorkerProcess

#: Worker roles: name → ``--stages`` (None: every stage).
ROLES: dict[str, str | None] = {
    "parse-chunk": "parse,chunk",
    "vision-embed": "vision,embed",
    "index": "index",
    "all": None,
}
#: Embed jobs one process of a role can hold at once (the pipeline's default concurrency).
EMBED_SLOTS = {"parse-chunk": 0, "vision-embed": 4, "index": 0, "all": 4}
#: Cohere's maximum texts per embed request, which the embed stage batches at.
EMBED_BATCH = 96
PIPELINE = "stages.app:plugin"


class ChaosConfig(msgspec.Struct, frozen=True, kw_only=True):
    """One chaos run. Times in seconds; rates are probabilities per request."""

    pdfs: int = 56
    max_pages: int = 30
    #: How long the driver keeps injecting faults (it also stops once all are final).
    chaos_s: float = 30.0
    kill_every_s: tuple[float, float] = (2.0, 3.0)
    lease_s: float = 2.0
    heartbeat_s: float = 0.5
    rescue_every_s: float = 0.5
    poll_s: float = 0.3
    grace_s: float = 1.0
    retry_base_s: float = 0.2
    #: Generous: every SIGKILL or SIGSTOP costs the jobs in flight an attempt.
    max_attempts: int = 10
    dims: int = 64
    error_rate: float = 0.2
    rate_429: float = 0.1
    slow_rate: float = 0.1
    slow_s: float = 1.0
    retry_after_s: float = 0.5
    #: "cohere" (chat against the fake server) or "none".
    vision: str = "cohere"
    drain_timeout_s: float = 120.0
    #: The chaos lasts until both ``chaos_s`` passed and this many SIGKILLs were sent
    #: (a loaded machine boots workers slowly), but at most ``chaos_s + 120``.
    min_kills: int = 6
    #: PostgreSQL restarts during the chaos (needs a ``restart_db`` callable).
    pg_restarts: int = 0
    #: SIGKILLs of the embedded postmaster during the chaos (needs a ``kill_db`` callable);
    #: the workers' supervisors must bring it back.
    pg_kills: int = 0
    #: Good documents are held at submit and released over the first ``release_over`` of
    #: ``chaos_s`` (this share at once, the rest evenly), so documents flow through every
    #: injected fault however fast the machine clears the corpus.
    release_over: float = 0.7
    release_at_once: float = 0.3
    seed: int = 7

    def fault_rates(self) -> FaultRates:
        return FaultRates(
            error_500=self.error_rate,
            rate_429=self.rate_429,
            slow=self.slow_rate,
            slow_s=self.slow_s,
            retry_after_s=self.retry_after_s,
            seed=self.seed,
        )


# -- the fake provider, with the counters the checks need ----------------------------------


class CountingCohere(FakeCohere):
    """A FakeCohere that also counts, per endpoint, answers given and faults injected."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.ok: Counter[str] = Counter()
        self.faults: Counter[str] = Counter()

    def next_fault(self, endpoint: str) -> Fault | None:
        fault = super().next_fault(endpoint)
        if fault is not None and fault.status is not None:
            with self._lock:
                self.faults[f"{endpoint}:{fault.status}"] += 1
        return fault

    def embed_response(self, body: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            self.ok["embed"] += 1  # counted even if the client hung up before reading it
        return super().embed_response(body)

    def chat_response(self, image: bytes, media_type: str, model: str) -> dict[str, Any]:
        with self._lock:
            self.ok["chat"] += 1
        return super().chat_response(image, media_type, model)


# -- the corpus ------------------------------------------------------------------------------


def small_pdfs(candidates: Iterable[Path], count: int, max_pages: int) -> list[Path]:
    """The ``count`` shortest PDFs with 2..max_pages pages and some text, distinct bytes."""
    ranked: list[tuple[int, str, Path]] = []
    for path in candidates:
        pages = _text_pages(path, max_pages)
        if pages:
            ranked.append((pages, path.name, path))
    ranked.sort()
    return [p for _, _, p in ranked[:count]]


def _text_pages(path: Path, max_pages: int) -> int:
    """Page count if the PDF opens, has 2..max_pages pages and text; else 0."""
    try:
        with pymupdf.open(path) as doc:
            pages = doc.page_count
            if not 2 <= pages <= max_pages:
                return 0
            text = "".join(str(page.get_text()) for page in doc)
    except (pymupdf.FileDataError, RuntimeError, ValueError):
        return 0
    # Text holding NUL trips a product bug (parse cannot store it; see has_nul_text and
    # test_chaos.py's xfail): left out here so the chaos run measures chaos, not that.
    if has_nul_text(text):
        return 0
    return pages if len(text.strip()) > 200 else 0


def has_nul_text(text: str) -> bool:
    return "\x00" in text


def nul_text_pdfs(candidates: Iterable[Path], max_pages: int) -> list[Path]:
    """PDFs of at most ``max_pages`` pages whose extracted text contains NUL characters."""
    found = []
    for path in candidates:
        try:
            with pymupdf.open(path) as doc:
                if doc.page_count <= max_pages and any(
                    has_nul_text(str(page.get_text())) for page in doc
                ):
                    found.append(path)
        except (pymupdf.FileDataError, RuntimeError, ValueError):
            continue
    return found


# -- environment and workers -----------------------------------------------------------------


def chaos_env(config: ChaosConfig, dsn: str, data_dir: Path, base_url: str) -> dict[str, str]:
    """The environment every worker (and the inspecting process) builds services from."""
    skip = ("RAGLINE_", "COHERE_", "QDRANT_", "MINIO_", "DATABASE_URL")
    env = {k: v for k, v in os.environ.items() if not k.startswith(skip)}
    env.update(
        DATABASE_URL=dsn,
        RAGLINE_DATA_DIR=str(data_dir),
        RAGLINE_PIPELINE=PIPELINE,
        RAGLINE_LOG_LEVEL="info",
        PYTHONPATH=str(REPO),
        COHERE_API_KEY="test",
        COHERE_BASE_URL=base_url,
        RAGLINE_EMBEDDER="cohere",
        RAGLINE_EMBED_DIMENSIONS=str(config.dims),
        RAGLINE_EMBED_TIMEOUT_S="20",
        RAGLINE_VISION=config.vision,
        RAGLINE_VISION_MODEL="fake-vision",
        RAGLINE_VISION_TIMEOUT_S="20",
    )
    return env


class Worker(msgspec.Struct, kw_only=True):
    role: str
    proc: WorkerProcess
    #: The driver sent it SIGKILL or SIGTERM: its exit is expected.
    signalled: bool = False

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.proc.poll() is None


class Fleet:
    """The worker processes: one per role at any time, plus the ones on their way out."""

    def __init__(self, config: ChaosConfig, env: dict[str, str], logs: Path) -> None:
        self.config = config
        self.env = env
        self.logs = logs
        self.current: dict[str, Worker] = {}
        self.every: list[Worker] = []

    def args(self, role: str) -> list[str]:
        c = self.config
        args = ["--pipeline", PIPELINE]
        if ROLES[role]:
            args += ["--stages", str(ROLES[role])]
        args += ["--lease", str(c.lease_s), "--heartbeat", str(c.heartbeat_s)]
        args += ["--rescue-every", str(c.rescue_every_s), "--poll", str(c.poll_s)]
        return [*args, "--grace", str(c.grace_s), "--retry-base", str(c.retry_base_s)]

    def start(self, role: str) -> Worker:
        log = self.logs / f"worker-{len(self.every):03d}-{role}.log"
        worker = Worker(role=role, proc=WorkerProcess(self.args(role), dict(self.env), log))
        self.current[role] = worker
        self.every.append(worker)
        return worker

    def start_all(self) -> None:
        for role in ROLES:
            self.start(role)

    def by_pid(self, pid: int) -> Worker | None:
        return next((w for w in self.current.values() if w.pid == pid), None)

    def stop_all(self, timeout_s: float = 30.0) -> dict[int, int | None]:
        """SIGTERM every live worker and wait; SIGKILL what does not exit. pid → exit code."""
        for worker in self.every:
            if worker.alive():
                with contextlib.suppress(ProcessLookupError):
                    worker.proc.signal(signal.SIGCONT)
                    worker.proc.signal(signal.SIGTERM)
        codes: dict[int, int | None] = {}
        deadline = time.monotonic() + timeout_s
        for worker in self.every:
            try:
                codes[worker.pid] = worker.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:  # killed below
                codes[worker.pid] = None
            worker.proc.stop()
        return codes

    def kill_all(self) -> None:
        for worker in self.every:
            worker.proc.stop()


def last_error(worker: Worker) -> str:
    """The last line of a worker's log that names an exception, for the crash report."""
    lines = [ln.strip() for ln in worker.proc.output().splitlines()]
    named = [ln for ln in lines if "Error" in ln or "Exception" in ln]
    return one_line(named[-1] if named else (lines[-1] if lines else "no output"))[:300]


# -- the driver ------------------------------------------------------------------------------


class Event(msgspec.Struct, frozen=True, kw_only=True):
    """One injected fault: ``embed_jobs`` is how many embed jobs it interrupted at most."""

    at_s: float
    kind: str
    role: str = ""
    pid: int = 0
    embed_jobs: int = 0
    note: str = ""


class Docs(msgspec.Struct, kw_only=True):
    """What was submitted: good and broken documents by id, refused files with reasons."""

    good: dict[uuid.UUID, str]
    broken: dict[uuid.UUID, str]
    refused: dict[str, str]


async def _fetch(dsn: str, query: str, *args: Any) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(dsn, timeout=10)
    try:
        return await conn.fetch(query, *args)
    finally:
        await conn.close()


def sql(dsn: str, query: str, *args: Any) -> list[asyncpg.Record]:
    """One query on a fresh connection (the driver is synchronous)."""
    return anyio.run(_fetch, dsn, query, *args)


def try_sql(dsn: str, query: str, *args: Any) -> list[asyncpg.Record] | None:
    """:func:`sql`, or None while the database is unreachable (it may be restarting)."""
    try:
        return sql(dsn, query, *args)
    except (OSError, asyncpg.PostgresError, TimeoutError):
        return None


EMBED_RUNNING = """
SELECT split_part(lease_owner, ':', 2)::int AS pid, count(*) AS n
FROM stage_jobs WHERE state = 'running' AND stage = 'embed'
GROUP BY 1
"""
UNFINISHED = "SELECT count(*) FROM documents WHERE status NOT IN ('ready', 'failed')"
TERMINATE = """
SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid()
"""
#: Running jobs whose lease ran out long ago although a live worker (registered before the
#: expiry, heard from within the last 2 s) was sweeping all along: nobody takes them back.
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
ABANDONED = """
SELECT count(*) FROM stage_jobs j
WHERE j.state = 'running' AND j.lease_expires_at < now() - make_interval(secs => $1)
  AND EXISTS (SELECT 1 FROM workers w
              WHERE w.started_at < j.lease_expires_at
                AND w.last_seen_at > now() - interval '2 seconds')
"""


class Chaos:
    """Submits the corpus, runs the fleet under faults, drains it. See the module doc."""

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
        self.kill_db = kill_db
        self.fleet = Fleet(config, self.env, logs)
        self.restart_db = restart_db
        self.say = say
        self.rng = random.Random(config.seed)
        self.events: list[Event] = []
        self.began = time.monotonic()
        self.drain_s = 0.0
        #: How long the chaos really lasted (it ends early once every document is final).
        self.chaos_s = 0.0
        self.abandoned_seen = 0
        self.stop_codes: dict[int, int | None] = {}
        self.held: list[uuid.UUID] = []

    def services(self) -> Services:
        return Services(self.env, self.data_dir)

    # -- submitting ----------------------------------------------------------------------

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

    # -- running -------------------------------------------------------------------------

    def run(self) -> None:
        """Start the fleet, inject faults for ``chaos_s``, then drain and stop the fleet."""
        self.began = time.monotonic()
        if self.held:
            sql(self.dsn, HOLD, self.held)
        self.fleet.start_all()
        try:
            self._chaos()
            self.chaos_s = self._now()
            self._drain()
        finally:
            self.stop_codes = self.fleet.stop_all()

    def _now(self) -> float:
        return time.monotonic() - self.began

    def _record(self, kind: str, **fields: Any) -> None:
        event = Event(at_s=round(self._now(), 2), kind=kind, **fields)
        self.events.append(event)
        self.say(f"{event.at_s:7.2f}s {kind} {event.role} pid={event.pid} {event.note}".rstrip())

    def _chaos(self) -> None:
        c = self.config
        self._wait_registered(len(ROLES))
        self.began = time.monotonic()  # the chaos clock starts once the fleet is up
        self._release()
        plan = self._plan()
        next_kill = self.rng.uniform(*c.kill_every_s)
        resume: tuple[float, Worker] | None = None
        term_pending = False
        while (
            self._now() < c.chaos_s or self.kills() < c.min_kills or plan or resume or term_pending
        ):
            if self._now() > c.chaos_s + 120:
                break
            if self._all_final():
                # Nothing left to hurt, but a paused worker still gets its whole pause.
                if resume is not None:
                    time.sleep(max(0.0, resume[0] - self._now()))
                    self._resume(resume[1])
                break
            self._watch_abandoned()
            self._replace_crashed()
            if resume is not None and self._now() >= resume[0]:
                self._resume(resume[1])
                resume = None
            if plan and self._now() >= plan[0][0]:
                kind = plan.pop(0)[1]
                if kind in ("terminate", "stop") and not self._registered():
                    # Every worker is booting: there is no connection or lease to cut yet.
                    plan = sorted([*plan, (self._now() + 0.5, kind)])
                    continue
                term_pending = term_pending or kind == "term"
                resume = self._special(kind) or resume
            if term_pending:
                term_pending = not self._sigterm_mid_embed(paused=resume[1] if resume else None)
            if self._now() >= next_kill and (self._now() < c.chaos_s or self.kills() < c.min_kills):
                killed = self._kill(exclude=resume[1] if resume else None)
                pause = self.rng.uniform(*c.kill_every_s) if killed else 0.5
                next_kill = self._now() + pause
            time.sleep(0.05)
        if term_pending:
            self._record("sigterm-mid-embed", note="no embed job seen running: not injected")

    def _replace_crashed(self) -> None:
        """A worker that exited without being told to crashed: note why, start another."""
        for role, worker in list(self.fleet.current.items()):
            if worker.signalled or worker.alive():
                continue
            code = worker.proc.proc.returncode
            self._record(
                "crashed", role=role, pid=worker.pid, note=f"exit {code}: {last_error(worker)}"
            )
            self.fleet.start(role)

    def _registered(self) -> set[int]:
        """Pids of fleet workers that are up (registered in ``workers``) and alive."""
        rows = try_sql(self.dsn, "SELECT split_part(id, ':', 2)::int FROM workers") or []
        up = {int(r[0]) for r in rows}
        return {w.pid for w in self.fleet.current.values() if w.pid in up and w.alive()}

    def _wait_registered(self, count: int, timeout_s: float = 120.0) -> None:
        deadline = time.monotonic() + timeout_s
        while len(self._registered()) < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"workers did not start within {timeout_s:.0f}s")
            time.sleep(0.1)

    def _plan(self) -> list[tuple[float, str]]:
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

    def _special(self, kind: str) -> tuple[float, Worker] | None:
        if kind == "terminate":
            self._terminate_backends()
        elif kind == "restart":
            self._restart_postgres()
        elif kind == "pgkill" and self.kill_db is not None:
            embed = sum(self._embed_jobs().values())
            down_s = self.kill_db()
            self._record("pg-kill", embed_jobs=embed, note=f"back after {down_s:.1f}s")
        elif kind == "stop":
            return self._sigstop()
        return None

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

    def _embed_jobs(self) -> dict[int, int]:
        rows = try_sql(self.dsn, EMBED_RUNNING) or []
        return {int(r["pid"]): int(r["n"]) for r in rows}

    def _kill(self, exclude: Worker | None) -> bool:
        # Only workers that are up: killing one still importing its libraries tests nothing.
        up = self._registered()
        choices = [w for w in self.fleet.current.values() if w is not exclude and w.pid in up]
        if not choices:
            return False
        victim = self.rng.choice(choices)
        # The embed jobs it holds, counted just before the kill, bound the batches lost.
        embed = self._embed_jobs().get(victim.pid, 0)
        victim.signalled = True
        victim.proc.signal(signal.SIGKILL)
        self._record("sigkill", role=victim.role, pid=victim.pid, embed_jobs=embed)
        self.fleet.start(victim.role)
        return True

    def _terminate_backends(self) -> None:
        embed = sum(self._embed_jobs().values())
        rows = try_sql(self.dsn, TERMINATE)
        killed = rows[0][0] if rows else 0
        self._record("terminate-backends", embed_jobs=embed, note=f"{killed} backends")

    def _restart_postgres(self) -> None:
        if self.restart_db is None:
            return
        embed = sum(self._embed_jobs().values())
        began = time.monotonic()
        self.restart_db()
        took = time.monotonic() - began
        self._record("pg-restart", embed_jobs=embed, note=f"down {took:.1f}s")

    def _sigstop(self) -> tuple[float, Worker] | None:
        # Prefer a worker holding a lease, so the pause really outlives one.
        running = self._running_pids()
        live = [w for w in self.fleet.current.values() if w.alive()]
        holding = [w for w in live if w.pid in running] or live
        if not holding:
            return None
        victim = self.rng.choice(holding)
        embed = self._embed_jobs().get(victim.pid, 0)
        victim.proc.signal(signal.SIGSTOP)
        self._record("sigstop", role=victim.role, pid=victim.pid, embed_jobs=embed)
        return self._now() + 2 * self.config.lease_s + 1.0, victim

    def _resume(self, worker: Worker) -> None:
        worker.proc.signal(signal.SIGCONT)
        self._record("sigcont", role=worker.role, pid=worker.pid)

    def _running_pids(self) -> set[int]:
        rows = try_sql(
            self.dsn,
            "SELECT DISTINCT split_part(lease_owner, ':', 2)::int FROM stage_jobs "
            "WHERE state = 'running'",
        )
        return {int(r[0]) for r in rows or []}

    def _sigterm_mid_embed(self, paused: Worker | None) -> bool:
        """SIGTERM a worker while it runs an embed job (found in stage_jobs by its pid);
        never the SIGSTOPped one, which could not act on it."""
        for pid, n in self._embed_jobs().items():
            worker = self.fleet.by_pid(pid)
            if worker is not None and worker is not paused and worker.alive():
                worker.signalled = True
                worker.proc.signal(signal.SIGTERM)
                self._record("sigterm-mid-embed", role=worker.role, pid=pid, embed_jobs=n)
                self.fleet.start(worker.role)
                return True
        return False

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
        docs = try_sql(self.dsn, "SELECT status::text, count(*) FROM documents GROUP BY 1")
        jobs = try_sql(
            self.dsn,
            "SELECT stage, state::text, count(*) FROM stage_jobs "
            "WHERE state IN ('queued', 'running') GROUP BY 1, 2",
        )
        d = ", ".join(f"{r[0]} {r[1]}" for r in docs or [])
        j = ", ".join(f"{r[0]}:{r[1]} {r[2]}" for r in jobs or [])
        return f"documents [{d}] live jobs [{j}]"

    # -- bounds --------------------------------------------------------------------------

    def kills(self) -> int:
        return sum(1 for e in self.events if e.kind == "sigkill")

    def interrupted_embed_jobs(self) -> int:
        """Embed jobs that an injected fault could have cut off after a 200 response."""
        return sum(e.embed_jobs for e in self.events)

    def crashes(self) -> list[Event]:
        return [e for e in self.events if e.kind == "crashed"]

    def injected(self, kind: str) -> int:
        return sum(1 for e in self.events if e.kind == kind and not e.note.startswith("no "))


# -- what is left after the run ----------------------------------------------------------------


class DocFinding(msgspec.Struct, kw_only=True):
    id: uuid.UUID
    filename: str
    status: str
    error: str | None
    generation: int
    chunks: int
    unique_texts: int
    points: int
    point_ids: int
    expected_found: int
    wrong_generation: int


class JobFinding(msgspec.Struct, kw_only=True):
    document_id: uuid.UUID
    stage: str
    state: str
    attempts: int
    max_attempts: int
    lost: int
    error_kind: str | None
    last_error: str | None


class Findings(msgspec.Struct, kw_only=True):
    docs: dict[uuid.UUID, DocFinding]
    jobs: list[JobFinding]
    orphan_points: int
    total_points: int
    verify: verify_mod.Report
    embed_ok: int
    embed_needed: int
    texts_embedded: int
    distinct_texts: int
    shared_text_slack: int
    faults: dict[str, int]

    def duplicates(self) -> int:
        return sum(d.points - d.point_ids for d in self.docs.values())

    def missing(self) -> int:
        return sum(d.chunks - d.expected_found for d in self.docs.values() if d.status == "ready")

    def extra(self) -> int:
        return sum(d.point_ids - d.expected_found for d in self.docs.values())


async def _doc_finding(pool: Any, services: Services, row: asyncpg.Record) -> DocFinding:
    doc_id: uuid.UUID = row["id"]
    chunks = await pool.fetch("SELECT ordinal, sha256 FROM chunks WHERE document_id = $1", doc_id)
    try:
        count = await services.index.count(services.collection, doc_id)
        refs = await services.index.scan(services.collection, doc_id)
    except MissingInput:  # nothing indexed at all
        count, refs = 0, []
    expected = {point_id(doc_id, r["ordinal"]) for r in chunks}
    ids = {r.id for r in refs}
    return DocFinding(
        id=doc_id,
        filename=row["filename"],
        status=row["status"],
        error=row["error"],
        generation=row["generation"],
        chunks=len(chunks),
        unique_texts=len({r["sha256"] for r in chunks}),
        points=count,
        point_ids=len(ids),
        expected_found=len(ids & expected),
        wrong_generation=sum(1 for r in refs if r.generation != row["generation"]),
    )


JOBS = """
SELECT document_id, stage, state::text AS state, attempts, max_attempts, lost, error_kind,
       last_error
FROM stage_jobs ORDER BY id
"""


async def inspect(chaos: Chaos) -> Findings:
    """Everything the checks need, read after the workers stopped."""
    services = chaos.services()
    try:
        async with asyncpg.create_pool(chaos.dsn, min_size=1, max_size=2) as pool:
            return await _inspect(pool, services, chaos.server)
    finally:
        await services.aclose()


async def _inspect(pool: Any, services: Services, server: CountingCohere) -> Findings:
    rows = await pool.fetch(
        "SELECT id, filename, status::text AS status, error, generation FROM documents"
    )
    docs = {r["id"]: await _doc_finding(pool, services, r) for r in rows}
    jobs = [JobFinding(**dict(r.items())) for r in await pool.fetch(JOBS)]
    report = await verify_mod.verify(pool, services)
    by_doc = await verify_mod.scan_index(services)
    orphans = sum(len(refs) for d, refs in by_doc.items() if uuid.UUID(d) not in docs)
    share = await pool.fetch("SELECT count(DISTINCT document_id) AS n FROM chunks GROUP BY sha256")
    stats = server.snapshot()
    model = services.embedder.model
    distinct = await pool.fetchval("SELECT count(*) FROM embeddings WHERE model = $1", model)
    return Findings(
        docs=docs,
        jobs=jobs,
        orphan_points=orphans,
        total_points=sum(len(r) for r in by_doc.values()),
        verify=report,
        embed_ok=server.ok["embed"],
        embed_needed=sum(math.ceil(d.unique_texts / EMBED_BATCH) for d in docs.values()),
        texts_embedded=stats.texts_embedded,
        distinct_texts=int(distinct),
        shared_text_slack=sum(int(r["n"]) - 1 for r in share),
        faults=dict(server.faults),
    )


# -- a worker writing after it lost its lease ---------------------------------------------------


async def zombie_writes(chaos: Chaos, doc_id: uuid.UUID) -> uuid.UUID:
    """Write what index workers that lost their leases would: for ``doc_id``, its chunk 0
    and one chunk past its last, both with an older generation; and points of a document
    that was deleted meanwhile. Returns that deleted document's id."""
    services = chaos.services()
    try:
        async with asyncpg.create_pool(chaos.dsn, min_size=1, max_size=1) as pool:
            row = await pool.fetchrow(
                "SELECT generation, (SELECT count(*) FROM chunks WHERE document_id = $1) AS n "
                "FROM documents WHERE id = $1",
                doc_id,
            )
        assert row is not None, f"no document {doc_id}"
        old = int(row["generation"]) - 1
        vector = [1.0] + [0.0] * (chaos.config.dims - 1)
        gone = uuid.uuid4()
        points = [
            new_point(doc_id, 0, old, vector, payload={"zombie": True}),
            new_point(doc_id, int(row["n"]) + 3, old, vector, payload={"zombie": True}),
            new_point(gone, 0, 1, vector, payload={"zombie": True}),
        ]
        await services.index.upsert(services.collection, points)
        return gone
    finally:
        await services.aclose()


async def verify_now(chaos: Chaos, *, repair: bool = False) -> verify_mod.Report:
    services = chaos.services()
    try:
        async with asyncpg.create_pool(chaos.dsn, min_size=1, max_size=2) as pool:
            report = await verify_mod.verify(pool, services)
            if repair:
                await verify_mod.repair(pool, services, report)
            return report
    finally:
        await services.aclose()


def run_index_worker(chaos: Chaos, timeout_s: float = 60.0) -> WorkerProcess:
    """One ``--stages index --exit-when-idle`` worker, run to its end."""
    args = [*chaos.fleet.args("index"), "--exit-when-idle"]
    proc = WorkerProcess(args, dict(chaos.env), chaos.fleet.logs / "repair-index.log")
    try:
        proc.wait(timeout_s)
    finally:
        proc.stop()
    return proc
