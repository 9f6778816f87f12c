"""Formats beyond PDF, end to end: a real file of each (tests/made_formats.py) through
the real pipeline; a damaged file of each fails once at parse with one line; unknown types
are refused at submit."""

# PyMuPDF's API is only partly typed.
# mypy: disallow-untyped-calls=False

from __future__ import annotations

import zipfile
from pathlib import Path

import pymupdf
import pytest
from PIL import Image as PILImage

from runtime.errors import InvalidDocument
from runtime.models import DocumentStatus
from stages.parsing.formats import by_media_type
from stages.ports.vector_index import Query
from tests.integration.conftest import OpenPipeline
from tests.made_formats import FORMAT_NAMES, MAKERS, PICTURE_WORDS, TOPICS, damaged, make_all
from tests.support.pipeline_env import TimedCohere, pipeline_env

pytestmark = pytest.mark.anyio

#: The section search shows with the topic's chunk (None: the format has pages and no
#: table of contents).
SECTION_OF = {
    "xps": None,
    "epub": "Volcanoes",
    "mobi": "Chess openings",
    "fb2": "Whales",
    "md": "Tides",
    "txt": "lines 1–3",
    "html": "Coffee roasting",
    "docx": "Glaciers",
}


async def test_every_format_is_ingested_end_to_end_with_ocr(dsn: str, tmp_path: Path) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    files = make_all(folder)
    async with pipeline_env(dsn, tmp_path / "data", RAGLINE_VISION="ocr") as env:
        ids = {suffix: (await env.submit(path)).document_id for suffix, path in files.items()}
        await env.run(timeout_s=240)
        for suffix, doc_id in ids.items():
            doc = await env.doc(doc_id)
            assert doc.status == DocumentStatus.READY, (suffix, doc.error)
            fmt = by_media_type(doc.media_type)
            assert fmt is not None and fmt.name == FORMAT_NAMES[suffix]
            assert await env.assert_indexed(doc_id) >= 1, suffix
        for suffix, (_, body) in TOPICS.items():
            chunks = await env.chunks(ids[suffix])
            assert any(body in " ".join(c.text.split()) for c in chunks), (suffix, chunks)
            # Search finds the file by its topic and shows the section it is in.
            [vector] = await env.probe.embedder.embed([body], "search_query")
            [hit, *_] = await env.probe.index.search(
                env.probe.vector_collection, Query(vector=vector), 3
            )
            assert hit.payload["filename"] == files[suffix].name, (suffix, hit.payload)
            label = SECTION_OF[suffix]
            if label is None:
                assert "section" not in hit.payload, (suffix, hit.payload)
            else:  # a chunk over several sections shows each: "Tides | Tides › Spring tides"
                assert label in hit.payload["section"].split(" | "), (suffix, hit.payload)
        for suffix, expected in PICTURE_WORDS.items():
            images = [c for c in await env.chunks(ids[suffix]) if c.kind == "image"]
            read = " ".join(c.text.upper() for c in images)
            # OCR reads each picture (one page per picture; a CBZ's pages in order).
            assert [c.page_start for c in images] == list(range(1, len(expected) + 1)), suffix
            for line in expected:
                assert all(word in read for word in line.split()), (suffix, read)
        # The DOCX's picture went to vision from the section it is in.
        docx_images = [c for c in await env.chunks(ids["docx"]) if c.kind == "image"]
        assert [c.page_start for c in docx_images] == [2]
        assert "ICEBERG" in docx_images[0].text.upper()


async def test_a_damaged_file_of_each_format_fails_once_at_parse(
    cohere_pipeline: OpenPipeline, tmp_path: Path, fake_cohere: TimedCohere
) -> None:
    good = tmp_path / "good"
    good.mkdir()
    bad_dir = tmp_path / "bad"
    bad_dir.mkdir()
    bad: dict[str, Path] = {}
    for suffix, make in MAKERS.items():
        path = bad_dir / f"damaged.{suffix}"
        path.write_bytes(damaged(make(good / f"x.{suffix}"), suffix))
        bad[suffix] = path
    async with cohere_pipeline(fake_cohere) as env:
        ids = {suffix: (await env.submit(path)).document_id for suffix, path in bad.items()}
        await env.run()
        for suffix, doc_id in ids.items():
            doc = await env.doc(doc_id)
            assert doc.status == DocumentStatus.FAILED, suffix
            assert doc.error is not None, suffix
            assert doc.error.startswith(f"parse: damaged.{suffix}: "), doc.error
            assert "\n" not in doc.error and str(tmp_path) not in doc.error, doc.error
            [job] = await env.stage_jobs(doc_id)
            assert (job.stage, job.attempts) == ("parse", 1), (suffix, job)


async def test_unknown_types_are_refused_at_submit_with_one_line(dsn: str, tmp_path: Path) -> None:
    binary = tmp_path / "firmware.bin"
    binary.write_bytes(bytes(range(256)) * 16)
    archive = tmp_path / "source.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("main.c", "int main(void) { return 0; }\n")
    xml = tmp_path / "feed.xml"
    xml.write_text('<?xml version="1.0"?><rss version="2.0"><channel/></rss>')
    webp = tmp_path / "photo.webp"  # a picture format PyMuPDF does not open
    PILImage.new("RGB", (64, 48), "teal").save(webp, format="WEBP")
    mislabelled = tmp_path / "report.docx"
    mislabelled.write_text("this was never a Word file\n")
    fake_png = tmp_path / "photo.png"
    fake_png.write_bytes(b"\x00\x01" * 100)
    expected = {
        binary: "firmware.bin: not a type ragline reads",
        archive: "source.zip: not a type ragline reads",
        xml: "feed.xml: not a type ragline reads",
        webp: "photo.webp: not a type ragline reads",
        mislabelled: "report.docx: not a DOCX (no zip container): its content is text",
        fake_png: "photo.png: not a PNG (no PNG signature), nor another type ragline reads",
    }
    async with pipeline_env(dsn, tmp_path / "data") as env:
        for path, message in expected.items():
            with pytest.raises(InvalidDocument) as caught:
                await env.submit(path)
            assert str(caught.value).startswith(message), str(caught.value)
            assert "\n" not in str(caught.value)
        assert await env.docs.all_ids() == []
        assert await env.probe.assets.list("documents/") == []


async def test_an_image_without_text_fails_once_saying_what_read_it(
    dsn: str, tmp_path: Path
) -> None:
    """A picture with no words in it is a document with nothing to index: it fails once at
    embed, and the line says whether OCR looked at it or vision is off (then: turn it on)."""
    lines = {"ocr": "(nor in its images, read by OCR)", "none": "need RAGLINE_VISION=ocr"}
    for width, (vision, expected) in enumerate(lines.items(), start=400):
        path = tmp_path / f"blank-{vision}.png"
        pixmap = pymupdf.Pixmap(pymupdf.csRGB, pymupdf.IRect(0, 0, width, 300), False)
        pixmap.clear_with(255)
        pixmap.save(str(path))
        async with pipeline_env(dsn, tmp_path / f"data-{vision}", RAGLINE_VISION=vision) as env:
            doc_id = (await env.submit(path)).document_id
            await env.run()
            doc = await env.doc(doc_id)
            assert doc.status == DocumentStatus.FAILED, (vision, doc.status)
            assert doc.error is not None
            assert doc.error.startswith(f"embed: {path.name}: no text found to index"), doc.error
            assert expected in doc.error and "\n" not in doc.error, doc.error
            assert "scanned PDF" not in doc.error, doc.error
            [job] = await env.stage_jobs(doc_id, "embed")
            assert job.attempts == 1, job
