"""The vision stage describes the same image bytes once per vision model, whichever
document they come in (issue 38): the fake Cohere server counts the descriptions asked."""

# PyMuPDF's API is only partly typed.
# mypy: disallow-untyped-calls=False

from __future__ import annotations

from pathlib import Path
from typing import Any

import pymupdf
import pytest

from stages.text.keywords import stored_vector
from tests.integration.conftest import OpenPipeline
from tests.support.pipeline_env import TimedCohere

pytestmark = pytest.mark.anyio

MODEL_A = "command-a-vision-07-2025"
MODEL_B = "c4ai-aya-vision-8b"


def png(color: tuple[float, float, float]) -> bytes:
    """A small picture of one colour, as PNG bytes (the same colour: the same bytes)."""
    new_document: Any = pymupdf.Document
    doc = new_document()
    page = doc.new_page(width=120, height=80)
    page.draw_rect(page.rect, color=color, fill=color)
    page.insert_text((10, 40), "shared figure", fontsize=12)
    data: bytes = page.get_pixmap(dpi=72).tobytes("png")
    doc.close()
    return data


def pdf_with(path: Path, title: str, images: list[bytes]) -> Path:
    new_document: Any = pymupdf.Document
    doc = new_document()
    for n, image in enumerate(images):
        page = doc.new_page()
        page.insert_text((72, 72), f"{title}, page {n + 1}: a paragraph about {title}.")
        page.insert_image(pymupdf.Rect(72, 100, 312, 260), stream=image)
    doc.save(path)
    doc.close()
    return path


async def test_an_image_in_many_documents_is_described_once_per_model(
    cohere_pipeline: OpenPipeline, tmp_path: Path
) -> None:
    shared, red, blue = png((0.2, 0.6, 0.2)), png((0.8, 0.1, 0.1)), png((0.1, 0.1, 0.8))
    first = [
        pdf_with(tmp_path / "alpha.pdf", "alpha", [shared, red]),
        pdf_with(tmp_path / "beta.pdf", "beta", [shared]),
    ]
    later = pdf_with(tmp_path / "gamma.pdf", "gamma", [shared, blue])
    with TimedCohere(dims=64) as fake:
        async with cohere_pipeline(fake, RAGLINE_VISION="cohere") as env:
            ids = await env.submit_all(first)
            await env.run(env={"RAGLINE_VISION_MODEL": MODEL_A})
            # alpha's two images, then beta's one image already described: 2, not 3.
            assert fake.snapshot().images_described == 2
            descriptions = {a.sha256: a.description for d in ids for a in await env.doc_assets(d)}
            assert len(descriptions) == 2 and all(descriptions.values())
            for doc_id in ids:
                images = [c.text for c in await env.chunks(doc_id) if c.kind == "image"]
                assert len(images) == len(await env.doc_assets(doc_id)), images
                await env.assert_indexed(doc_id)

            # Another model does not take model A's words: gamma's shared image is
            # described again, by B (and its new image too).
            (gamma,) = await env.submit_all([later])
            await env.run(env={"RAGLINE_VISION_MODEL": MODEL_B})
            assert fake.snapshot().images_described == 4
            by = await env.pool.fetch(
                "SELECT sha256, described_by FROM assets WHERE document_id = $1", gamma
            )
            assert {r["described_by"] for r in by} == {f"cohere/{MODEL_B}"}
            # Image chunks carry their keyword vector, as the vision stage stored it.
            for row in await env.pool.fetch(
                "SELECT text, keywords FROM chunks WHERE kind = 'image'"
            ):
                assert row["keywords"] == stored_vector(row["text"])
            assert await env.statuses([*ids, gamma]) == dict.fromkeys(
                ["alpha.pdf", "beta.pdf", "gamma.pdf"], "ready"
            )
