"""The CLI as a user drives it: ``python -m runtime <command>`` in subprocesses, checked by
exit code, stdout, stderr and ``--json``, against a real PostgreSQL and a real data dir.

Every process spends ~3 s importing on the 2-core dev machine, so the samples are ingested
once per module (:func:`ingested`) and the read-only commands on that setup run side by
side, before anything changes it (:func:`readonly`); the tests that change the shared
setup request ``readonly`` so the snapshot is always taken first, and each touches a
different document.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
from click.testing import CliRunner

import schema
from bench.harness.cli import Cli, Result
from bench.harness.db import Databases, sql
from bench.harness.procs import REPO, wait_for
from runtime.cli.common import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE
from tests.support.pdfs import write_encrypted_pdf, write_textless_pdf, write_truncated_pdf

SAMPLES = REPO / "samples"
SAMPLE_NAMES = ("lighthouses.pdf", "rust-borrow-checker.pdf", "sourdough.pdf", "tides.md")
STAGES = ("parse", "chunk", "vision", "embed", "index")


class Setup(msgspec.Struct, kw_only=True):
    """A database and a data dir after one ``ingest`` run, and that run's result."""

    cli: Cli
    ingest: Result
    ids: dict[str, str]  # filename -> document id


def no_traceback(result: Result) -> None:
    assert "Traceback" not in result.err, result


@pytest.fixture(scope="module")
def ingested(databases: Databases, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    name = databases.clone()
    tmp = tmp_path_factory.mktemp("ingested")
    cli = Cli(databases.dsn(name), tmp / "data", tmp / "logs")
    try:
        result = cli.run("ingest", "samples/", "--json")
        assert result.code == EXIT_OK, result
        ids = {row["filename"]: row["document_id"] for row in result.json()["ready"]}
        yield Setup(cli=cli, ingest=result, ids=ids)
    finally:
        databases.drop(name)


#: Read-only commands on the ingested samples, run side by side ({name}: a document id).
READONLY: dict[str, tuple[str, ...]] = {
    "status": ("status",),
    "status_json": ("status", "--json"),
    "timeline": ("status", "{lighthouses}"),
    "timeline_json": ("status", "{lighthouses}", "--json"),
    "search": ("search", "lighthouse", "--json", "-k", "3"),
    "search_sections": ("search", "spring and neap tides when sun and moon line up", "-k", "1"),
    "verify": ("verify", "--json"),
    "retry_nothing": ("retry",),
    "reprocess_no_target": ("reprocess", "--from", "index"),
    "reprocess_unknown": ("reprocess", "--from", "index", "{unknown}"),
    "delete_unknown": ("delete", "{unknown}", "--json"),
}

UNKNOWN_ID = str(uuid.UUID(int=42))


@pytest.fixture(scope="module")
def readonly(ingested: Setup) -> dict[str, Result]:
    names = {**{Path(k).stem: v for k, v in ingested.ids.items()}, "unknown": UNKNOWN_ID}
    commands = [tuple(arg.format_map(names) for arg in cmd) for cmd in READONLY.values()]
    return dict(zip(READONLY, ingested.cli.run_all(*commands), strict=True))


@pytest.fixture
def cli(dsn: str, tmp_path: Path) -> Cli:
    return Cli(dsn, tmp_path / "data", tmp_path / "logs")


# -- submit ---------------------------------------------------------------------------------


def test_submit_files_dir_glob_refuses_bad_paths_one_line_each(cli: Cli, tmp_path: Path) -> None:
    folder = tmp_path / "folder"
    folder.mkdir()
    shutil.copy(SAMPLES / "sourdough.pdf", folder)
    (folder / "readme.odt").write_text("not picked up: directories give what ragline reads")
    notes = tmp_path / "notes.pdf"
    notes.write_text("plain text with a .pdf name")
    missing = tmp_path / "missing.pdf"

    mixed = cli.run(
        "submit",
        "samples/lighthouses.pdf",
        str(folder),
        "samples/rust-*.pdf",
        "samples/light*.pdf",  # the same bytes again, through a glob
        str(notes),
        str(missing),
        "--json",
    )

    assert mixed.code == EXIT_FAILED, mixed
    no_traceback(mixed)
    body = mixed.json()
    submitted = {(Path(s["path"]).name, s["created"]) for s in body["submitted"]}
    assert submitted == {
        ("lighthouses.pdf", True),
        ("sourdough.pdf", True),
        ("rust-borrow-checker.pdf", True),
        ("lighthouses.pdf", False),
    }
    assert {Path(r["path"]).name for r in body["refused"]} == {"notes.pdf", "missing.pdf"}
    # The directory's other file is left out, and said so in one line.
    assert body["skipped"] == {".odt": 1}
    assert len(mixed.err_lines) == 3, mixed
    [skipped] = [line for line in mixed.err_lines if line.startswith("skipped")]
    assert (
        skipped.startswith("skipped 1 file(s) in the directories given") and "(.odt 1)" in skipped
    )
    [not_pdf] = [line for line in mixed.err_lines if "notes.pdf" in line]
    assert "not a PDF" in not_pdf
    [gone] = [line for line in mixed.err_lines if "missing.pdf" in line]
    assert "no such file" in gone
    assert sql(cli.dsn, "SELECT count(*) FROM documents")[0][0] == 3

    again = cli.run("submit", "samples/")
    assert again.code == EXIT_OK, again
    assert again.err == ""
    [new] = [line for line in again.out_lines if not line.startswith("already there ")]
    assert new.startswith("submitted samples/tides.md "), again  # the Markdown sample
    assert len(again.out_lines) == len(SAMPLE_NAMES), again
    assert sql(cli.dsn, "SELECT count(*) FROM documents")[0][0] == len(SAMPLE_NAMES)


# -- ingest ---------------------------------------------------------------------------------


def test_ingest_samples_json_summary(ingested: Setup) -> None:
    summary = ingested.ingest.json()
    assert sorted(r["filename"] for r in summary["ready"]) == list(SAMPLE_NAMES)
    assert summary["failed"] == summary["unfinished"] == summary["refused"] == []
    assert summary["interrupted"] is False
    assert summary["copies"] == 0
    assert all(r["status"] == "ready" for r in summary["ready"])


@pytest.fixture(scope="module")
def broken(databases: Databases, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    """A folder with one good PDF (and a copy of it under another name) and three bad
    ones, ingested once."""
    name = databases.clone()
    tmp = tmp_path_factory.mktemp("broken")
    folder = tmp / "pdfs"
    folder.mkdir()
    shutil.copy(SAMPLES / "sourdough.pdf", folder)
    shutil.copy(SAMPLES / "sourdough.pdf", folder / "sourdough2.pdf")
    write_encrypted_pdf(folder / "locked.pdf")
    write_truncated_pdf(folder / "truncated.pdf")
    write_textless_pdf(folder / "textless.pdf")
    cli = Cli(databases.dsn(name), tmp / "data", tmp / "logs")
    try:
        result = cli.run("ingest", str(folder))
        rows = sql(cli.dsn, "SELECT filename, id::text FROM documents")
        yield Setup(cli=cli, ingest=result, ids={r[0]: r[1] for r in rows})
    finally:
        databases.drop(name)


def failure_line(result: Result, filename: str) -> str:
    [line] = [ln for ln in result.out_lines if ln.startswith(f"failed {filename} ")]
    return line


def test_ingest_broken_pdfs_fail_at_parse_with_the_file_named(broken: Setup) -> None:
    result = broken.ingest
    assert result.code == EXIT_FAILED, result
    no_traceback(result)
    assert result.out_lines[0].startswith("ready: 1  failed: 3  unfinished: 0"), result
    # Five files, four documents: the copy is said, not lost from the count.
    assert result.out_lines[1].startswith("same content: 1 file(s) repeat another"), result
    locked = failure_line(result, "locked.pdf")
    assert "parse: locked.pdf: password-protected" in locked, locked
    truncated = failure_line(result, "truncated.pdf")
    assert "parse: truncated.pdf:" in truncated, truncated


def test_ingest_textless_pdf_fails_with_an_actionable_reason(broken: Setup) -> None:
    line = failure_line(broken.ingest, "textless.pdf")
    assert "run chunk first" not in line, line
    assert "parse: textless.pdf:" in line or "chunk: textless.pdf:" in line, line


def test_failures_retry_and_why_a_requeued_document_waits(broken: Setup) -> None:
    cli, locked = broken.cli, broken.ids["locked.pdf"]

    listed = cli.run("failures", "--json")
    assert listed.code == EXIT_OK, listed
    by_name = {row["filename"]: row for row in listed.json()}
    assert by_name["locked.pdf"]["stage"] == "parse"
    assert by_name["locked.pdf"]["error_kind"] == "invalid_document"
    assert "password-protected" in by_name["locked.pdf"]["last_error"]
    assert by_name["locked.pdf"]["document_id"] == locked

    retried = cli.run("retry", "--stage", "parse", locked)
    assert retried.code == EXIT_OK, retried
    assert retried.out.strip() == "requeued 1 job(s)"

    timeline, again = cli.run_all(("status", locked, "--json"), ("retry", locked))
    assert timeline.code == EXIT_OK, timeline
    body = timeline.json()
    assert body["document"]["id"] == locked
    assert [j["state"] for j in body["jobs"] if j["stage"] == "parse"][-1] == "queued"
    assert "no live worker serves stage parse" in body["waiting"], body["waiting"]
    assert again.code == EXIT_FAILED, again  # its job is queued now: nothing failed to retry
    assert again.out.strip() == "requeued 0 job(s)"


def job_rows(dsn: str) -> list[tuple[int, str, str, str, int, object]]:
    rows = sql(
        dsn,
        "SELECT id, document_id::text, stage, state::text, attempts, finished_at "
        "FROM stage_jobs ORDER BY id",
    )
    return [tuple(r) for r in rows]


def running_jobs(dsn: str, stage: str) -> int:
    rows = sql(dsn, "SELECT count(*) FROM stage_jobs WHERE state = 'running' AND stage = $1", stage)
    return int(rows[0][0])


def test_ingest_interrupted_then_resumed_redoes_nothing(cli: Cli) -> None:
    # OCR makes vision slow enough (seconds per document) to interrupt mid-run.
    first = cli.start("ingest", "samples/", RAGLINE_VISION="ocr")
    try:
        wait_for(
            lambda: first.poll() is not None or running_jobs(cli.dsn, "vision") > 0,
            timeout_s=60,
            what="a vision job to run",
        )
        assert first.poll() is None, "ingest finished before it could be interrupted"
        first.signal(signal.SIGINT)
        stopped = first.wait(60)
    finally:
        first.kill()
    assert stopped.code == EXIT_INTERRUPTED, stopped
    assert "run the same command again to resume" in stopped.err, stopped
    no_traceback(stopped)
    before = job_rows(cli.dsn)
    assert not [j for j in before if j[3] == "running"], before  # leases handed back
    done_before = [j for j in before if j[3] == "succeeded"]
    assert done_before, "nothing finished before the interrupt"
    assert len(done_before) < len(SAMPLE_NAMES) * len(STAGES)

    resumed = cli.run("ingest", "samples/", RAGLINE_VISION="ocr")

    assert resumed.code == EXIT_OK, resumed
    assert resumed.out_lines[0].startswith(f"ready: {len(SAMPLE_NAMES)}  failed: 0"), resumed
    after = job_rows(cli.dsn)
    succeeded = [j for j in after if j[3] == "succeeded"]
    per_pair = {(j[1], j[2]) for j in succeeded}
    assert len(per_pair) == len(succeeded) == len(SAMPLE_NAMES) * len(STAGES), after
    assert all(j[4] == 1 for j in succeeded), after  # no crash: one attempt each
    assert set(done_before) <= set(after)  # what had finished was not run again


# -- status ---------------------------------------------------------------------------------


def test_status_table_and_json(readonly: dict[str, Result]) -> None:
    table, as_json = readonly["status"], readonly["status_json"]
    assert table.code == as_json.code == EXIT_OK, table
    header, *rows, chunks = table.out_lines
    # Every token of the samples is embedded: no chunk is longer than the model's window.
    assert chunks == "chunks over the embedder's window: 0 (in 0 documents)", table
    assert header.split()[:6] == ["stage", "queued", "backoff", "running", "failed", "oldest"]
    assert header.split()[-1] == "workers"
    assert [r.split()[0] for r in rows] == list(STAGES)
    body = as_json.json()
    assert [r["stage"] for r in body] == list(STAGES)
    for row in body:
        assert {"queued", "backing_off", "running", "failed", "workers"} <= set(row)
        assert row["queued"] == row["running"] == row["failed"] == row["workers"] == 0


def test_status_of_a_document_shows_its_timeline(
    readonly: dict[str, Result], ingested: Setup
) -> None:
    doc_id = ingested.ids["lighthouses.pdf"]
    text, as_json = readonly["timeline"], readonly["timeline_json"]
    assert text.code == as_json.code == EXIT_OK, text
    first, *jobs, chunks = text.out_lines
    assert first.startswith(f"lighthouses.pdf {doc_id}: ready at index"), text
    sizes = re.fullmatch(
        r"  text chunks: \d+, \d+ tokens, largest (\d+), over the embedder's window: 0", chunks
    )
    assert sizes and int(sizes.group(1)) <= 254, text  # all-MiniLM-L6-v2: 256 less 2
    assert [line.split()[0] for line in jobs] == list(STAGES), text
    assert all(" succeeded " in line and "attempts 1/" in line for line in jobs), text
    body = as_json.json()
    assert body["document"]["id"] == doc_id
    assert body["document"]["status"] == "ready"
    assert [j["stage"] for j in body["jobs"]] == list(STAGES)
    assert body["waiting"] is None
    assert body["notes"] == [chunks.strip()]


# -- reprocess ------------------------------------------------------------------------------


def test_reprocess_needs_a_target(readonly: dict[str, Result]) -> None:
    result = readonly["reprocess_no_target"]
    assert result.code == EXIT_USAGE, result
    no_traceback(result)
    assert "give documents (ids or file names), --all or --model" in result.err


def test_reprocess_unknown_document(readonly: dict[str, Result]) -> None:
    result = readonly["reprocess_unknown"]
    assert result.code == EXIT_FAILED, result
    assert f"no document {UNKNOWN_ID}" in result.err


def test_retry_with_nothing_to_retry_exits_1(readonly: dict[str, Result]) -> None:
    result = readonly["retry_nothing"]
    assert result.code == EXIT_FAILED, result
    assert result.out.strip() == "requeued 0 job(s)"


def test_reprocess_from_index_then_worker_with_json_logs(
    readonly: dict[str, Result], ingested: Setup
) -> None:
    cli, doc_id = ingested.cli, ingested.ids["rust-borrow-checker.pdf"]
    queued = cli.run("reprocess", "--from", "index", doc_id, "--json")
    assert queued.code == EXIT_OK, queued
    assert queued.json() == [{"document_id": doc_id, "generation": 2}]

    worker = cli.run("--log-format", "json", "--exit-when-idle", "--poll", "0.2", log_level="debug")

    assert worker.code == EXIT_OK, worker
    events = [json.loads(line) for line in worker.err_lines]  # every line is JSON
    job_events = [e for e in events if "job" in e]
    assert job_events, worker
    for event in job_events:
        assert {"worker", "job", "stage", "document", "msg", "level"} <= set(event)
    assert {e["stage"] for e in job_events} == {"index"}  # earlier stages reused
    assert {e["document"] for e in job_events} == {doc_id}
    [row] = sql(
        cli.dsn, "SELECT status::text, generation FROM documents WHERE id = $1", uuid.UUID(doc_id)
    )
    assert tuple(row) == ("ready", 2)


# -- search, delete, verify ------------------------------------------------------------------


def test_search_finds_the_lighthouse_document(readonly: dict[str, Result]) -> None:
    result = readonly["search"]
    assert result.code == EXIT_OK, result
    hits = result.json()
    assert 1 <= len(hits) <= 3
    assert hits[0]["filename"] == "lighthouses.pdf"
    for hit in hits:
        assert isinstance(hit["score"], float)
        assert {"document_id", "page_start", "page_end", "text"} <= set(hit)
    assert hits == sorted(hits, key=lambda h: -h["score"])


def test_search_shows_the_section_of_a_markdown_sample(readonly: dict[str, Result]) -> None:
    result = readonly["search_sections"]
    assert result.code == EXIT_OK, result
    first, text = result.out_lines
    # score, file, p.<sections> · <their labels>, document id
    assert "  tides.md  p." in first and "· " in first and "Spring and Neap Tides" in first
    assert "spring tides" in text


def test_verify_clean_after_ingest(readonly: dict[str, Result]) -> None:
    result = readonly["verify"]
    assert result.code == EXIT_OK, result
    report = result.json()
    assert report["documents"] == len(SAMPLE_NAMES)
    assert report["points"] > 0
    assert report["problems"] == []


def test_delete_unknown_document(readonly: dict[str, Result]) -> None:
    result = readonly["delete_unknown"]
    assert result.code == EXIT_FAILED, result
    assert result.json() == {"deleted": [], "missing": [UNKNOWN_ID]}
    assert f"no document {UNKNOWN_ID}" in result.err


def test_delete_then_verify_clean_and_search_forgets_it(
    readonly: dict[str, Result], ingested: Setup
) -> None:
    cli, doc_id = ingested.cli, ingested.ids["sourdough.pdf"]
    deleted = cli.run("delete", doc_id, "--json")
    assert deleted.code == EXIT_OK, deleted
    assert deleted.json() == {"deleted": [doc_id], "missing": []}

    verify, search = cli.run_all(("verify",), ("search", "sourdough starter bread", "--json"))

    assert verify.code == EXIT_OK, verify
    assert verify.out_lines[0].endswith(" 0 problem(s)"), verify
    assert search.code == EXIT_OK, search
    assert search.json(), search
    assert doc_id not in {hit["document_id"] for hit in search.json()}
    assert not (cli.data_dir / "assets" / "documents" / doc_id).exists()


def test_verify_reports_a_missing_image_and_repair_restores_it(
    readonly: dict[str, Result], ingested: Setup
) -> None:
    cli, doc_id = ingested.cli, ingested.ids["lighthouses.pdf"]
    images = sorted((cli.data_dir / "assets" / "documents" / doc_id / "images").iterdir())
    assert images, "the sample should have stored images"
    images[0].unlink()

    found = cli.run("verify", "--repair", "--json")

    assert found.code == EXIT_FAILED, found
    [problem] = found.json()["problems"]
    assert problem["document_id"] == doc_id
    assert [Path(key).name for key in problem["missing_files"]] == [images[0].name]
    assert problem["repair"] == "reprocess from parse"

    worker = cli.run("--exit-when-idle", "--poll", "0.2")
    assert worker.code == EXIT_OK, worker
    clean = cli.run("verify", "--json")
    assert clean.code == EXIT_OK, clean
    assert clean.json()["problems"] == []
    assert images[0].exists()


# -- migrate, help, worker flags -----------------------------------------------------------------


def test_migrate_twice_and_concurrently_on_empty_databases(
    databases: Databases, tmp_path: Path
) -> None:
    names = [databases.empty(), databases.empty()]
    try:
        serial, racing = (
            Cli(databases.dsn(n), tmp_path / "data", tmp_path / f"logs-{n}") for n in names
        )
        # The first serial migrate runs alongside the race (another database): it saves time.
        first, a, b = [
            r.wait()
            for r in (serial.start("migrate"), racing.start("migrate"), racing.start("migrate"))
        ]
        second = serial.run("migrate")
        assert first.code == second.code == EXIT_OK, first
        every = [v for v, _, _ in schema.migrations()]
        assert first.out.strip() == f"applied {len(every)} migration(s)"
        assert second.out.strip() == "schema up to date"
        assert a.code == b.code == EXIT_OK, f"{a}\n{b}"
        assert sorted([a.out.strip(), b.out.strip()]) == [
            f"applied {len(every)} migration(s)",
            "schema up to date",
        ]
        versions = sql(racing.dsn, "SELECT version FROM ragline_migrations ORDER BY version")
        assert [r[0] for r in versions] == every
    finally:
        for n in names:
            databases.drop(n)


def test_worker_mode_unknown_stage_is_a_usage_error(cli: Cli) -> None:
    result = cli.run("--stages", "bogus")
    assert result.code == EXIT_USAGE, result
    no_traceback(result)
    [error] = result.err_lines  # one line, naming the setting and what it accepts
    assert "RAGLINE_STAGES / --stages: unknown stage(s) bogus" in error
    assert "expected some of parse, chunk, vision, embed, index" in error


COMMAND_OPTIONS: dict[tuple[str, ...], tuple[str, ...]] = {
    (): ("--database-url", "--data-dir", "--stages", "--concurrency", "--exit-when-idle"),
    ("submit",): ("--force", "--json"),
    ("ingest",): ("--force", "--json", "--progress"),
    ("search",): ("--limit", "-k", "--json"),
    ("reprocess",): ("--from", "--all", "--model", "--json"),
    ("delete",): ("--json",),
    ("verify",): ("--repair", "--json"),
    ("status",): ("--json", "DOCUMENT"),
    ("failures",): ("--stage", "--error-kind", "--limit", "--json"),
    ("retry",): ("--stage", "--error-kind", "--json"),
    ("migrate",): ("Apply pending schema migrations",),
    ("serve",): ("--host", "--port", "--max-upload-mb", "RAGLINE_API_TOKENS", "RAGLINE_PORT"),
    ("db",): ("stop",),
    ("db", "stop"): ("Stop the embedded PostgreSQL",),
}


def test_top_level_help_lists_every_command(cli: Cli) -> None:
    result = cli.run("--help")
    assert result.code == EXIT_OK, result
    for option in COMMAND_OPTIONS[()]:
        assert option in result.out
    listed = {line.split()[0] for line in result.out.split("Commands:")[1].splitlines() if line}
    assert {c[0] for c in COMMAND_OPTIONS if c} <= listed


@pytest.fixture
def own_logging() -> Iterator[None]:
    """The CLI's group callback points the root logger at its stderr: undo that."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


@pytest.mark.parametrize("command", [c for c in COMMAND_OPTIONS if c], ids=" ".join)
@pytest.mark.usefixtures("own_logging")
def test_command_help(command: tuple[str, ...]) -> None:
    # In-process (the same click objects ``python -m runtime`` runs): a subprocess per
    # command would cost ~3 s of imports each.
    from runtime.cli.main import main

    result = CliRunner().invoke(
        main, [*command, "--help"], prog_name="python -m runtime", env={"RAGLINE_PIPELINE": None}
    )
    assert result.exit_code == EXIT_OK, result.output
    for option in COMMAND_OPTIONS[command]:
        assert option in result.output, (command, option)
