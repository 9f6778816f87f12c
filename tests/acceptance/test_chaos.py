"""Chaos: real PDFs through the real pipeline in four worker processes with split stage
sets, against a Cohere-compatible server that fails, rate-limits and stalls, while workers
are SIGKILLed every few seconds, every database backend is terminated, one worker is
SIGSTOPped past its lease and one is SIGTERMed in the middle of an embed job.

Nothing is lost and nothing is doubled: every good document ends ready with exactly one
point per chunk row (counted in the vector index itself), every broken one fails once with
a reason naming its stage, crashes waste at most the embed batch each interrupted job had
in flight, 429s cost no attempt, ``verify`` is clean, and a write made after a lost lease
is found and purged. The scenario and its knobs live in :mod:`bench.harness.chaos`;
``python -m bench.chaos`` runs the longer soak.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from bench.harness.chaos import (
    Chaos,
    ChaosConfig,
    CountingCohere,
    Docs,
    Findings,
    chaos_env,
    inspect,
    nul_text_pdfs,
    run_index_worker,
    small_pdfs,
    verify_now,
    zombie_writes,
)
from bench.harness.db import Databases
from bench.harness.procs import WorkerProcess
from tests.support.corpus import broken_pdfs, corpus_pdfs

# The shared run is set up inside the first test that uses it: allow it the whole run.
pytestmark = pytest.mark.timeout(600)

# Enough work to outlast the chaos: every scheduled event must land while documents flow.
CONFIG = ChaosConfig(pdfs=100, chaos_s=12.0, kill_every_s=(1.0, 2.0), drain_timeout_s=150.0)
#: Submitted, in this order; zero-byte and not-a-pdf (and garbage, no header) are refused.
BROKEN = ("truncated", "encrypted", "corrupt", "zero-byte", "not-a-pdf", "garbage")
REFUSED = {"zero-byte.pdf", "not-a-pdf.pdf", "garbage.pdf"}


class Run:
    """One chaos run, shared by the checks of this module (minutes: more on a loaded machine)."""

    def __init__(self, chaos: Chaos, docs: Docs, found: Findings) -> None:
        self.chaos = chaos
        self.docs = docs
        self.found = found


@pytest.fixture(scope="module")
def tmp_module(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("chaos")


@pytest.fixture(scope="module")
def run(tmp_module: Path, databases: Databases) -> Iterator[Run]:
    good = small_pdfs(corpus_pdfs(CONFIG.pdfs), CONFIG.pdfs, CONFIG.max_pages)
    if len(good) < 50:
        pytest.skip(f"only {len(good)} small PDFs with text in the corpus; need 50")
    broken = [broken_pdfs()[k] for k in BROKEN]
    name = databases.clone()
    logs = tmp_module / "logs"
    logs.mkdir()
    server = CountingCohere(dims=CONFIG.dims, rates=CONFIG.fault_rates()).start()
    chaos = Chaos(CONFIG, databases.dsn(name), tmp_module / "data", logs, server, say=print)
    try:
        docs = anyio.run(chaos.submit, good, broken)
        chaos.run()
        found = anyio.run(inspect, chaos)
        yield Run(chaos, docs, found)
    finally:
        chaos.fleet.kill_all()
        server.stop()
        databases.drop(name)


def _logs(run: Run) -> str:
    return f"worker logs in {run.chaos.fleet.logs}"


def test_chaos_was_injected(run: Run) -> None:
    c = run.chaos
    assert c.kills() >= 5, c.events
    assert c.injected("terminate-backends") == 1, c.events
    assert c.injected("sigstop") == 1 and c.injected("sigcont") == 1, c.events
    assert c.injected("sigterm-mid-embed") == 1, c.events
    faults = run.found.faults
    assert faults.get("embed:500", 0) > 0 and faults.get("embed:429", 0) > 0, faults


def test_no_worker_crashed(run: Run) -> None:
    assert not run.chaos.crashes(), run.chaos.crashes()


def test_every_good_document_is_ready(run: Run) -> None:
    statuses = {run.found.docs[i].filename: run.found.docs[i].status for i in run.docs.good}
    not_ready = {
        f: (s, run.found.docs[i].error)
        for i, f in run.docs.good.items()
        for s in [statuses[f]]
        if s != "ready"
    }
    assert len(run.docs.good) >= 50
    assert not not_ready, (not_ready, _logs(run))


def test_refused_files_have_a_one_line_reason(run: Run) -> None:
    assert set(run.docs.refused) == REFUSED
    for name, reason in run.docs.refused.items():
        assert name in reason and "\n" not in reason
    assert "empty file" in run.docs.refused["zero-byte.pdf"]
    assert "not a PDF" in run.docs.refused["not-a-pdf.pdf"]


def test_broken_documents_fail_once_at_parse(run: Run) -> None:
    assert sorted(run.docs.broken.values()) == ["corrupt.pdf", "encrypted.pdf", "truncated.pdf"]
    for doc_id, name in run.docs.broken.items():
        doc = run.found.docs[doc_id]
        assert doc.status == "failed", doc
        assert doc.error is not None and doc.error.startswith("parse: "), doc.error
        assert "\n" not in doc.error and name in doc.error
        jobs = [j for j in run.found.jobs if j.document_id == doc_id]
        assert [(j.stage, j.state) for j in jobs] == [("parse", "failed")], jobs
        # A permanent error takes one attempt; only a kill of the parsing worker adds one.
        assert jobs[0].attempts - jobs[0].lost == 1, jobs


def test_one_point_per_chunk_counted_in_the_index(run: Run) -> None:
    found = run.found
    wrong = {
        d.filename: (d.chunks, d.points, d.point_ids, d.expected_found, d.wrong_generation)
        for d in found.docs.values()
        if d.status == "ready"
        and not (d.chunks == d.points == d.point_ids == d.expected_found and not d.wrong_generation)
    }
    assert not wrong, wrong  # (chunk rows, points, distinct ids, ids expected, stale)
    assert all(d.chunks > 0 for i, d in found.docs.items() if i in run.docs.good)
    assert found.duplicates() == found.missing() == found.extra() == found.orphan_points == 0
    for doc_id in run.docs.broken:
        assert found.docs[doc_id].points == 0
    assert found.total_points == sum(d.chunks for d in found.docs.values() if d.status == "ready")


def test_no_job_left_behind_and_attempts_bounded(run: Run) -> None:
    jobs = run.found.jobs
    assert not [j for j in jobs if j.state in ("queued", "running")], _logs(run)
    assert all(j.attempts <= j.max_attempts for j in jobs)
    assert run.chaos.abandoned_seen == 0, "a running job kept an expired lease unrescued"
    # Every worker stopped cleanly on SIGTERM at the end (killed ones are not waited on).
    # One SIGTERMed while still importing, before its handlers exist, dies of the signal,
    # which is the right thing for a process that has not started any work.
    survivors = [w for w in run.chaos.fleet.current.values()]
    codes = run.chaos.stop_codes
    assert all(
        codes.get(w.pid) == 0
        or (codes.get(w.pid) == -signal.SIGTERM and "worker started" not in w.proc.output())
        for w in survivors
    ), codes


def test_crashes_waste_at_most_the_batch_in_flight(run: Run) -> None:
    found, chaos = run.found, run.chaos
    bound = chaos.interrupted_embed_jobs()
    wasted = found.embed_ok - found.embed_needed
    print(
        f"embed 200s {found.embed_ok}, batches needed {found.embed_needed}, "
        f"wasted {max(0, wasted)} <= bound {bound} (embed jobs interrupted); "
        f"texts {found.texts_embedded} for {found.distinct_texts} distinct"
    )
    assert wasted <= bound
    # Per text: a batch holds at most 96; texts shared by documents embedding at the same
    # time may go twice.
    assert found.texts_embedded - found.distinct_texts <= 96 * bound + found.shared_text_slack


def test_rate_limits_cost_no_attempt_and_fail_nothing(run: Run) -> None:
    found = run.found
    assert found.faults.get("embed:429", 0) > 0
    for doc in found.docs.values():
        # A word: a path in a message may hold "429" among its random hex digits.
        assert not (doc.error and re.search(r"\b429\b|\brate", doc.error, re.I)), doc
    assert not [j for j in found.jobs if j.state == "failed" and j.error_kind == "rate_limited"]
    embed = [j for j in found.jobs if j.stage == "embed"]
    extra_attempts = sum(j.attempts - 1 for j in embed)
    # Each extra attempt is explained by a 500, a lost worker or the database going away
    # (one per embed job at the backend kill) — never by a 429.
    explained = (
        found.faults.get("embed:500", 0)
        + sum(j.lost for j in embed)
        + sum(e.embed_jobs for e in run.chaos.events if e.kind == "terminate-backends")
        + run.chaos.injected("sigterm-mid-embed")
    )
    assert extra_attempts <= explained, (extra_attempts, explained)


def test_verify_is_clean(run: Run) -> None:
    report = run.found.verify
    assert report.clean, report.problems
    assert report.points == run.found.total_points


def test_writes_after_a_lost_lease_are_found_and_purged(run: Run) -> None:
    chaos = run.chaos
    doc_id = next(i for i in run.docs.good if run.found.docs[i].status == "ready")
    gone = anyio.run(zombie_writes, chaos, doc_id)
    report = anyio.run(lambda: verify_now(chaos, repair=True))
    problems = {p.document_id: p for p in report.problems}
    assert set(problems) == {str(doc_id), str(gone)}, report.problems
    mine = problems[str(doc_id)]
    assert (mine.extra_points, mine.stale_points, mine.missing_points) == (1, 2, 0), mine
    assert mine.repair == "reprocess from index"
    assert problems[str(gone)].orphan and problems[str(gone)].repair == "deleted orphan points"
    worker = run_index_worker(chaos)
    assert worker.proc.returncode == 0, worker.output()
    after = anyio.run(lambda: verify_now(chaos))
    assert after.clean, after.problems
    assert after.points == run.found.total_points


def test_pdf_text_with_nul_characters_parses(dsn: str, tmp_path: Path) -> None:
    found = nul_text_pdfs(corpus_pdfs(1), max_pages=30)
    if not found:
        pytest.skip("no corpus PDF with NUL in its text")
    config = ChaosConfig(max_attempts=2, retry_base_s=0.05)
    with CountingCohere(dims=config.dims) as server:  # parse never calls it
        env = chaos_env(config, dsn, tmp_path / "data", server.base_url)
        chaos_like = Chaos(config, dsn, tmp_path / "data", tmp_path, server)
        docs = anyio.run(chaos_like.submit, found[:1], [])
    args = [*chaos_like.fleet.args("parse-chunk"), "--exit-when-idle"]
    worker = WorkerProcess(args, env, tmp_path / "parse.log")
    try:
        assert worker.wait(60) == 0, worker.output()
    finally:
        worker.stop()
    [doc_id] = docs.good
    rows = anyio.run(_parse_state, dsn, doc_id)
    assert rows == ("succeeded", None), rows


async def _parse_state(dsn: str, doc_id: object) -> tuple[str, str | None]:
    import asyncpg

    conn = await asyncpg.connect(dsn)
    try:
        row = await conn.fetchrow(
            "SELECT state::text, last_error FROM stage_jobs WHERE document_id = $1 "
            "AND stage = 'parse'",
            doc_id,
        )
        assert row is not None
        return str(row[0]), row[1]
    finally:
        await conn.close()
