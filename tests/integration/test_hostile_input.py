"""Hostile input through the pipeline: hostile file names, a PDF with no pages, a
decompression bomb.

(The 2,000-page PDF's bounded memory is shown in tests/unit/stages/parsing/test_pdf.py;
the benchmark in bench/ingest.py measures the worker's peak.)
"""

# mypy: disallow-untyped-calls=False
# (PyMuPDF is only partly typed.)
from __future__ import annotations

import os
from pathlib import Path

import pymupdf
import pytest

from runtime.models import DocumentStatus
from tests.integration.conftest import OpenPipeline
from tests.support.pipeline_env import TimedCohere, copy_sample

pytestmark = pytest.mark.anyio

ZERO_PAGE_PDF = (
    b"%PDF-1.4\n1 0 obj << /Type /Catalog /Pages 2 0 R >> endobj\n"
    b"2 0 obj << /Type /Pages /Kids [] /Count 0 >> endobj\n"
    b"trailer << /Root 1 0 R >>\n%%EOF\n"
)


def bomb_pdf(path: Path) -> None:
    """A page with text and an image whose stream claims 60000 x 60000 pixels (~3.6 GB)."""
    doc = pymupdf.open()
    page = doc.new_page()
    page.insert_text((72, 72), "A page with a suspiciously large picture on it.")
    picture = pymupdf.Pixmap(pymupdf.csRGB, pymupdf.IRect(0, 0, 64, 64), False)
    picture.set_rect(picture.irect, (200, 30, 30))
    xref = page.insert_image(pymupdf.Rect(72, 100, 272, 300), stream=picture.tobytes("png"))
    doc.xref_set_key(xref, "Width", "60000")
    doc.xref_set_key(xref, "Height", "60000")
    doc.save(path)


async def test_hostile_file_names_are_just_names(
    cohere_pipeline: OpenPipeline, tmp_path: Path, fake_cohere: TimedCohere
) -> None:
    name = "..;$(touch PWNED) `id` & 'x' | ..pdf"
    folder = tmp_path / "in"
    folder.mkdir()
    path = folder / name
    copy_sample("lighthouses.pdf", path)
    cwd = os.getcwd()
    async with cohere_pipeline(fake_cohere) as env:
        [doc_id] = await env.submit_all([path])
        await env.run()
        doc = await env.doc(doc_id)
        assert doc.status == DocumentStatus.READY and doc.filename == name
        assert doc.asset_key is not None and name not in doc.asset_key
        assert ".." not in doc.asset_key
        await env.assert_indexed(doc_id)
    assert_no_trace(tmp_path, Path(cwd), env.data_dir, name)


def assert_no_trace(tmp_path: Path, cwd: Path, data_dir: Path, name: str) -> None:
    """Nothing ran the name as a command, and no stored path contains it."""
    assert not (tmp_path / "PWNED").exists() and not (cwd / "PWNED").exists()
    stored = [p for p in data_dir.rglob("*") if p.is_file()]
    assert stored and all(name not in str(p) for p in stored)


async def test_zero_page_pdf_fails_at_parse_once(
    cohere_pipeline: OpenPipeline, tmp_path: Path, fake_cohere: TimedCohere
) -> None:
    path = tmp_path / "empty-pages.pdf"
    path.write_bytes(ZERO_PAGE_PDF)
    async with cohere_pipeline(fake_cohere) as env:
        [doc_id] = await env.submit_all([path])
        await env.run()
        doc = await env.doc(doc_id)
        assert doc.status == DocumentStatus.FAILED
        assert doc.error is not None and doc.error.startswith("parse: empty-pages.pdf: ")
        assert "\n" not in doc.error
        [job] = await env.stage_jobs(doc_id)
        assert job.attempts == 1


async def test_decompression_bomb_image_is_skipped_and_text_kept(
    cohere_pipeline: OpenPipeline, tmp_path: Path, fake_cohere: TimedCohere
) -> None:
    path = tmp_path / "bomb.pdf"
    bomb_pdf(path)
    async with cohere_pipeline(fake_cohere) as env:
        [doc_id] = await env.submit_all([path])
        await env.run()
        doc = await env.doc(doc_id)
        assert doc.status == DocumentStatus.READY, doc.error
        assert await env.doc_assets(doc_id) == []
        assert any("suspiciously large" in c.text for c in await env.chunks(doc_id))
