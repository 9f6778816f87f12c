"""The PDF pipeline end to end: real PDFs through parse, chunk, vision, embed and index
on real PostgreSQL, the real asset store and the embedded vector index.

The first test runs the embedded defaults (local embedder, local OCR); the others use the
fake Cohere server over HTTP for the embedder, which is much faster than the local model
on two cores, and switch OCR off unless it is the point.
"""

# PyMuPDF's API is only partly typed.
# mypy: disallow-untyped-calls=False

from __future__ import annotations

import os
import random
import signal
import time
import uuid
from pathlib import Path
from typing import Any

import pymupdf
import pytest

from runtime.errors import InvalidDocument
from runtime.models import DocumentStatus, JobState
from stages.actions import verify
from stages.db import checkpoints
from stages.parsing.process import ParserProcess
from stages.parsing.wire import ParseRequest
from stages.pipeline import STAGES
from stages.pipeline.parse import ParseStage
from stages.ports.vector_index import new_point
from tests.integration.conftest import OpenPipeline
from tests.support.corpus import corpus_pdfs
from tests.support.pipeline_env import (
    SAMPLES,
    PipelineEnv,
    TimedCohere,
    copy_sample,
    pipeline_env,
    sample,
)

pytestmark = pytest.mark.anyio


async def assert_parse_failed_once(env: PipelineEnv, doc_id: uuid.UUID, filename: str) -> None:
    """Failed permanently at parse on the first attempt, with a one-line error naming the
    file, and nothing after parse ever ran."""
    doc = await env.doc(doc_id)
    assert doc.status == DocumentStatus.FAILED, (filename, doc.status, doc.error)
    assert doc.error is not None
    assert doc.error.startswith(f"parse: {filename}: "), doc.error
    assert "\n" not in doc.error and len(doc.error) <= 520
    jobs = await env.stage_jobs(doc_id)
    assert [(j.stage, j.state, j.attempts) for j in jobs] == [("parse", JobState.FAILED, 1)]
    assert await env.chunks(doc_id) == []


# -- the embedded defaults -------------------------------------------------------------------


async def test_samples_end_to_end_on_embedded_defaults_with_ocr(dsn: str, tmp_path: Path) -> None:
    async with pipeline_env(dsn, tmp_path / "data", RAGLINE_VISION="ocr") as env:
        ids = await env.submit_all(sample(name) for name in SAMPLES)
        await env.run()

        assert await env.statuses(ids) == dict.fromkeys(SAMPLES, "ready")
        for doc_id in ids:
            assert await env.assert_indexed(doc_id) >= 2
        # Points in the index are all there is: no document has points of another's.
        assert await env.count_points() == sum([len(await env.chunks(d)) for d in ids])
        for name, (query, _) in SAMPLES.items():
            assert await env.search_first(query) == name, query
        for doc_id, (name, (_, figure_line)) in zip(ids, SAMPLES.items(), strict=True):
            images = [c.text for c in await env.chunks(doc_id) if c.kind == "image"]
            # Two images are stored: the figure and the logo shown on every page (once).
            # The logo has no text, so only the figure becomes a chunk.
            assert len(await env.doc_assets(doc_id)) == 2, name
            assert len(images) == 1, (name, images)
            assert figure_line in images[0], (name, images)


# -- broken inputs ---------------------------------------------------------------------------


def write_encrypted(path: Path) -> Path:
    with pymupdf.open(sample("sourdough.pdf")) as doc:
        doc.save(
            path,
            encryption=pymupdf.PDF_ENCRYPT_AES_256,  # type: ignore[attr-defined]
            user_pw="user-pw",
            owner_pw="owner-pw",
        )
    return path


def write_garbage_with_header(path: Path) -> Path:
    path.write_bytes(b"%PDF-1.7\n" + random.Random(7).randbytes(32 * 1024))
    return path


async def test_empty_and_non_pdf_files_are_refused_at_submit(dsn: str, tmp_path: Path) -> None:
    empty = tmp_path / "zero-byte.pdf"
    empty.write_bytes(b"")
    notes = tmp_path / "not-a-pdf.pdf"
    notes.write_text("These are meeting notes saved with the wrong name.\n" * 40)
    async with pipeline_env(dsn, tmp_path / "data") as env:
        for path, reason in [(empty, "empty file"), (notes, "not a PDF")]:
            with pytest.raises(InvalidDocument) as caught:
                await env.submit(path)
            assert str(caught.value).startswith(f"{path.name}: {reason}")
            assert "\n" not in str(caught.value)
        assert await env.docs.all_ids() == []
        assert await env.probe.assets.list("documents/") == []


async def test_a_process_parses_one_pdf_at_a_time(
    dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # PyMuPDF holds the GIL: a second parsing thread in the same process would only
    # contend. Parse slots still overlap their fetches, but not their parsing.
    running, peak = 0, 0
    original = ParseStage._parse

    def counting(self: ParseStage, *args: Any) -> Any:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        try:
            time.sleep(0.05)  # long enough that two unserialized parses would overlap
            return original(self, *args)
        finally:
            running -= 1

    monkeypatch.setattr(ParseStage, "_parse", counting)
    async with pipeline_env(dsn, tmp_path / "data") as env:
        ids = await env.submit_all(
            [sample("lighthouses.pdf"), sample("sourdough.pdf"), sample("rust-borrow-checker.pdf")]
        )
        await env.run(("parse",), concurrency={"parse": 3})
        assert peak == 1
        for doc_id in ids:
            assert len(await env.stage_jobs(doc_id, "chunk")) == 1


async def test_a_parser_crash_costs_its_document_an_attempt_not_the_worker(
    dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # MuPDF crashing on a file (a segfault) kills the parser process; here for real, with
    # SIGKILL once the parser has sent the first pages of a long document.
    long = tmp_path / "long.pdf"
    doc: Any = pymupdf.open()
    for i in range(300):
        doc.new_page().insert_textbox(pymupdf.Rect(36, 36, 560, 800), f"{i} " + "words " * 300)
    doc.save(str(long))
    doc.close()
    crashed: list[int] = []
    original = ParserProcess.parse

    def crashing(self: ParserProcess, request: ParseRequest, take: Any) -> None:
        def take_and_crash(unit: Any) -> None:
            if request.filename == "long.pdf" and not crashed:
                assert self._proc is not None
                os.kill(self._proc.pid, signal.SIGKILL)
                crashed.append(self._proc.wait())
            take(unit)

        original(self, request, take_and_crash)

    monkeypatch.setattr(ParserProcess, "parse", crashing)
    async with pipeline_env(dsn, tmp_path / "data") as env:
        ids = await env.submit_all([sample("lighthouses.pdf"), long])
        await env.run(("parse",))
        assert crashed == [-signal.SIGKILL]
        by_name = {(await env.doc(i)).filename: i for i in ids}
        [job] = await env.stage_jobs(by_name["long.pdf"], "parse")
        assert (job.state, job.attempts) == (JobState.SUCCEEDED, 2)
        assert "long.pdf: the parser process was killed by SIGKILL" in (job.last_error or "")
        [other] = await env.stage_jobs(by_name["lighthouses.pdf"], "parse")
        assert (other.state, other.attempts) == (JobState.SUCCEEDED, 1)
        assert len(await checkpoints.pages(env.pool, by_name["long.pdf"])) == 300
        assert await checkpoints.pages(env.pool, by_name["lighthouses.pdf"])


async def test_broken_pdfs_fail_at_parse_once_and_good_ones_finish(
    cohere_pipeline: OpenPipeline, tmp_path: Path, fake_cohere: TimedCohere
) -> None:
    broken = {
        "encrypted.pdf": write_encrypted(tmp_path / "encrypted.pdf"),
        "garbage.pdf": write_garbage_with_header(tmp_path / "garbage.pdf"),
    }
    async with cohere_pipeline(fake_cohere) as env:
        bad_ids = {name: (await env.submit(path)).document_id for name, path in broken.items()}
        good = await env.submit_all([sample("lighthouses.pdf"), sample("sourdough.pdf")])
        await env.run()

        for name, doc_id in bad_ids.items():
            await assert_parse_failed_once(env, doc_id, name)
        assert "password" in ((await env.doc(bad_ids["encrypted.pdf"])).error or "")
        assert await env.statuses(good) == {
            "lighthouses.pdf": "ready",
            "sourdough.pdf": "ready",
        }
        for doc_id in good:
            await env.assert_indexed(doc_id)


async def test_truncated_pdf_fails_at_parse_once(
    cohere_pipeline: OpenPipeline, tmp_path: Path, fake_cohere: TimedCohere
) -> None:
    data = sample("lighthouses.pdf").read_bytes()
    truncated = tmp_path / "truncated.pdf"
    truncated.write_bytes(data[: len(data) // 2])
    async with cohere_pipeline(fake_cohere) as env:
        doc_id = (await env.submit(truncated)).document_id  # has a header: accepted
        await env.run()
        await assert_parse_failed_once(env, doc_id, "truncated.pdf")


async def test_an_original_gone_from_the_asset_store_fails_parse_once(
    cohere_pipeline: OpenPipeline, fake_cohere: TimedCohere
) -> None:
    async with cohere_pipeline(fake_cohere) as env:
        doc_id = (await env.submit(sample("lighthouses.pdf"))).document_id
        key = (await env.doc(doc_id)).asset_key
        assert key is not None
        await env.probe.assets.delete(key)
        await env.run()
        await assert_parse_failed_once(env, doc_id, "lighthouses.pdf")
        assert "not in the asset store" in ((await env.doc(doc_id)).error or "")


# -- submitting again, reprocessing ----------------------------------------------------------


async def test_resubmitting_the_same_bytes_runs_nothing_again(
    cohere_pipeline: OpenPipeline, tmp_path: Path, fake_cohere: TimedCohere
) -> None:
    async with cohere_pipeline(fake_cohere) as env:
        first = await env.submit(sample("sourdough.pdf"))
        assert first.created
        await env.run()
        jobs = {s: await env.job_count(s) for s in STAGES}
        requests = fake_cohere.requests_to("embed")

        again = await env.submit(copy_sample("sourdough.pdf", tmp_path / "renamed.pdf"))
        assert (again.document_id, again.created) == (first.document_id, False)
        await env.run()

        assert {s: await env.job_count(s) for s in STAGES} == jobs == dict.fromkeys(STAGES, 1)
        assert fake_cohere.requests_to("embed") == requests
        doc = await env.doc(first.document_id)
        assert (doc.status, doc.generation, doc.filename) == ("ready", 1, "sourdough.pdf")


async def test_reprocess_from_chunk_with_bigger_chunks_leaves_no_stale_points(
    cohere_pipeline: OpenPipeline, fake_cohere: TimedCohere
) -> None:
    small = {"RAGLINE_CHUNK_TOKENS": "300", "RAGLINE_CHUNK_OVERLAP_TOKENS": "30"}
    async with cohere_pipeline(fake_cohere, **small) as env:
        ids = await env.submit_all([sample("lighthouses.pdf"), sample("rust-borrow-checker.pdf")])
        await env.run()
        target, other = ids
        before = await env.assert_indexed(target)
        other_points = await env.points(other)
        parses = await env.job_count("parse")

        assert await env.docs.reprocess(target, "chunk") == 2
        await env.run(env={"RAGLINE_CHUNK_TOKENS": "2000", "RAGLINE_CHUNK_OVERLAP_TOKENS": "100"})

        doc = await env.doc(target)
        assert (doc.status, doc.generation) == ("ready", 2)
        after = await env.assert_indexed(target)
        assert 0 < after < before, (before, after)
        assert {c.generation for c in await env.chunks(target)} == {2}
        assert await env.points(other) == other_points  # the other document is untouched
        assert await env.job_count("parse") == parses == 2  # parse did not run again
        assert [j.state for j in await env.stage_jobs(target, "chunk")] == ["succeeded"] * 2
        report = await verify.verify(env.pool, env.probe)
        assert report.clean, report.problems
        assert report.points == after + len(other_points)


# -- verify and repair -----------------------------------------------------------------------


async def test_verify_reports_damage_and_repair_converges(
    cohere_pipeline: OpenPipeline, fake_cohere: TimedCohere, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two documents a page: verify's walk crosses a page boundary (keyset cursor), and the
    # orphan is found because the collection counts more points than the pages had.
    monkeypatch.setattr(verify, "PAGE", 2)
    async with cohere_pipeline(fake_cohere) as env:
        ids = await env.submit_all(sample(name) for name in SAMPLES)
        lost_point, bogus_point, lost_image = ids
        await env.run()
        # A second generation, so a point can be left over from the first one.
        assert await env.docs.reprocess(bogus_point, "index") == 2
        await env.run(("index",))
        assert (await verify.verify(env.pool, env.probe)).clean
        lost_doc = await env.doc(lost_image)

        env.delete_point_directly(lost_point, ordinal=1)
        await env.probe.index.upsert(
            env.probe.vector_collection, [new_point(bogus_point, 999, 1, [0.1] * 64, payload={})]
        )
        asset = (await env.doc_assets(lost_image))[0]
        await env.probe.assets.delete(asset.object_key)
        orphan = uuid.uuid4()
        await env.probe.index.upsert(
            env.probe.vector_collection, [new_point(orphan, 0, 1, [0.2] * 64, payload={})]
        )

        report = await verify.verify(env.pool, env.probe)
        found = {p.document_id: p for p in report.problems}
        assert set(found) == {str(lost_point), str(bogus_point), str(lost_image), str(orphan)}
        p = found[str(lost_point)]
        assert (p.missing_points, p.extra_points, p.stale_points, p.missing_files) == (1, 0, 0, [])
        p = found[str(bogus_point)]
        assert (p.missing_points, p.extra_points, p.stale_points, p.missing_files) == (0, 1, 1, [])
        p = found[str(lost_image)]
        assert (p.missing_points, p.extra_points, p.missing_files) == (0, 0, [asset.object_key])
        assert found[str(orphan)].orphan

        await verify.repair(env.pool, env.probe, report)
        assert all(p.repair for p in report.problems), report.problems
        assert found[str(lost_image)].repair == "reprocess from parse"
        assert found[str(lost_point)].repair == "reprocess from index"
        await env.run()

        after = await verify.verify(env.pool, env.probe)
        assert after.clean, after.problems
        assert await env.statuses(ids) == dict.fromkeys(SAMPLES, "ready")
        for doc_id in ids:
            await env.assert_indexed(doc_id)
        assert await env.probe.assets.exists(asset.object_key)
        assert (await env.doc(lost_image)).generation == lost_doc.generation + 1
        assert await env.count_points(orphan) == 0


# -- the real corpus -------------------------------------------------------------------------


def small_text_pdfs(count: int) -> list[Path]:
    """The ``count`` smallest corpus PDFs that have text to index (vision is off)."""
    chosen: list[Path] = []
    for path in sorted(corpus_pdfs(count), key=lambda p: (p.stat().st_size, p.name)):
        with pymupdf.open(path) as doc:
            if sum(len(page.get_text().strip()) for page in doc) >= 200:
                chosen.append(path)
        if len(chosen) == count:
            break
    return chosen


@pytest.mark.corpus
async def test_corpus_pdfs_all_become_ready(
    cohere_pipeline: OpenPipeline, fake_cohere: TimedCohere
) -> None:
    pdfs = small_text_pdfs(10)
    async with cohere_pipeline(fake_cohere) as env:
        ids = await env.submit_all(pdfs)
        await env.run(timeout_s=90)
        assert await env.statuses(ids) == {p.name: "ready" for p in pdfs}
        for doc_id in ids:
            assert await env.assert_indexed(doc_id) > 0
        assert (await verify.verify(env.pool, env.probe)).clean
