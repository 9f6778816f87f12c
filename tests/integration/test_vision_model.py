"""Vision models over real connections: CohereVision against FakeCohere on 127.0.0.1, and
RapidOCR on images rendered here with real text."""

from __future__ import annotations

import asyncio
import contextlib
import io
import struct
import time
import zlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import numpy as np
import pymupdf
import pytest
from cohere.core.api_error import ApiError
from PIL import Image

from bench.harness.fake_cohere import FakeCohere, Fault
from runtime.errors import ConfigurationError, PermanentError, RateLimited, TransientError
from stages.adapters.vision.cohere import CohereVision, CohereVisionConfig
from stages.adapters.vision.none import NoVision
from stages.adapters.vision.ocr import LocalOCR, LocalOCRConfig, reading_order
from stages.ports.vision import VisionModel
from stages.services import vision_for
from stages.settings import PipelineSettings

pytestmark = pytest.mark.anyio


def vision_from_env(env: dict[str, str]) -> VisionModel:
    return vision_for(PipelineSettings.from_env(env).vision)


def render_text(
    lines: list[tuple[float, float, str]], width: int = 600, height: int = 200
) -> bytes:
    """A PNG with each (x, y, text) drawn in 22 pt Helvetica, rendered by MuPDF."""
    # pymupdf is untyped: go through Any rather than sprinkle ignores.
    new_document: Any = pymupdf.Document
    doc = new_document()
    page = doc.new_page(width=width, height=height)
    for x, y, text in lines:
        page.insert_text((x, y), text, fontsize=22)
    png: bytes = page.get_pixmap(dpi=144).tobytes("png")
    doc.close()
    return png


def encode(img: Image.Image, fmt: str) -> bytes:
    out = io.BytesIO()
    img.save(out, format=fmt)
    return out.getvalue()


def png_header_only(width: int, height: int) -> bytes:
    """A PNG that claims a size but holds almost no pixel data (a decompression bomb's shape)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(kind + data)
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    idat = zlib.compress(b"\x00" * 64)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


INVOICE = render_text([(30, 60, "Invoice number 4721 due March"), (30, 120, "Total amount 318")])


def words(text: str) -> list[str]:
    return text.lower().split()


# --------------------------------------------------------------------------- Cohere


@pytest.fixture
def server() -> Iterator[FakeCohere]:
    with FakeCohere(dims=8, api_key="test-key") as fake:
        yield fake


@pytest.fixture
async def vision(server: FakeCohere) -> AsyncIterator[CohereVision]:
    model = CohereVision(
        CohereVisionConfig(api_key="test-key", base_url=server.base_url, timeout_s=5.0)
    )
    yield model
    await model.aclose()


async def test_cohere_describes_a_png_as_sent(server: FakeCohere, vision: CohereVision) -> None:
    text = await vision.describe(INVOICE, "image/png")
    assert text == f"image of {len(INVOICE)} bytes (image/png)"
    assert vision.name == "cohere/command-a-vision-07-2025"
    stats = server.snapshot()
    assert stats.requests == {"chat": 1}
    assert stats.images_described == 1
    assert stats.models == {"command-a-vision-07-2025": 1}


async def test_cohere_trusts_the_bytes_not_the_label(vision: CohereVision) -> None:
    jpeg = encode(Image.new("RGB", (64, 48), "navy"), "JPEG")
    text = await vision.describe(jpeg, "image/png")
    assert text == f"image of {len(jpeg)} bytes (image/jpeg)"


async def test_cohere_reencodes_formats_it_does_not_take(vision: CohereVision) -> None:
    tiff = encode(Image.new("RGB", (64, 48), "teal"), "TIFF")
    text = await vision.describe(tiff, "image/tiff")
    assert text.endswith("bytes (image/png)")
    assert text != f"image of {len(tiff)} bytes (image/png)"


async def test_cohere_downscales_big_images(server: FakeCohere) -> None:
    model = CohereVision(
        CohereVisionConfig(
            api_key="test-key", base_url=server.base_url, max_image_bytes=1000, max_pixels=10_000
        )
    )
    noise = np.random.default_rng(0).integers(0, 255, (400, 300, 3), dtype=np.uint8)
    big = encode(Image.fromarray(noise), "PNG")
    try:
        text = await model.describe(big, "image/png")
    finally:
        await model.aclose()
    sent_bytes = int(text.split()[2])
    assert sent_bytes < len(big) / 5  # 120,000 px cut to at most 10,000


async def test_cohere_rejects_undecodable_images_without_a_request(
    server: FakeCohere, vision: CohereVision
) -> None:
    with pytest.raises(PermanentError, match=r"^image: unreadable \(11 bytes, unknown format\)$"):
        await vision.describe(b"not a jpeg!", "image/jpeg")
    assert server.requests_to("chat") == 0


@pytest.mark.parametrize(
    ("fault", "error", "pattern"),
    [
        (Fault(status=500), TransientError, r"^cohere vision: HTTP 500: injected 500"),
        (Fault(status=503), TransientError, r"^cohere vision: HTTP 503: "),
        (Fault(status=400, message="bad image"), PermanentError, r"^cohere vision: HTTP 400: bad"),
        (Fault(status=429, retry_after_s=2.5), RateLimited, r"^cohere vision: HTTP 429: "),
        (Fault(reset=True), TransientError, r"^cohere vision: connection failed"),
    ],
    ids=["500", "503", "400", "429", "reset"],
)
async def test_cohere_vision_errors(
    server: FakeCohere,
    vision: CohereVision,
    fault: Fault,
    error: type[Exception],
    pattern: str,
) -> None:
    server.add_faults([fault])
    with pytest.raises(error, match=pattern) as info:
        await vision.describe(INVOICE, "image/png")
    assert type(info.value) is error
    assert info.value.__cause__ is not None
    if isinstance(info.value, RateLimited):
        assert info.value.retry_after_s == 2.5
        assert isinstance(info.value.__cause__, ApiError)
    assert server.requests_to("chat") == 1  # the SDK's own retries are off


async def test_cohere_vision_timeout_is_transient(server: FakeCohere) -> None:
    model = CohereVision(
        CohereVisionConfig(api_key="test-key", base_url=server.base_url, timeout_s=0.3)
    )
    server.add_faults([Fault(delay_s=30, endpoint="chat")])
    started = time.monotonic()
    try:
        with pytest.raises(TransientError, match=r"^cohere vision: timed out"):
            await model.describe(INVOICE, "image/png")
    finally:
        await model.aclose()
    assert time.monotonic() - started < 5
    assert server.requests_to("chat") == 1


# --------------------------------------------------------------------------- local OCR


@pytest.fixture(scope="module")
def ocr() -> LocalOCR:
    return LocalOCR()


async def test_ocr_recovers_rendered_text_in_reading_order(ocr: LocalOCR) -> None:
    text = await ocr.describe(INVOICE, "image/png")
    lines = text.splitlines()
    assert len(lines) == 2, text
    assert words(lines[0]) == words("Invoice number 4721 due March")
    assert words(lines[1]) == words("Total amount 318")
    assert ocr.name == "local/rapidocr"


async def test_ocr_reads_a_dense_page_line_by_line(ocr: LocalOCR) -> None:
    expected = [
        f"Line {i}: the quick brown fox jumps over the lazy dog {i * 37}" for i in range(12)
    ]
    png = render_text([(40, 40 + 24 * i, t) for i, t in enumerate(expected)], height=340)
    text = await ocr.describe(png, "image/png")
    assert [words(line) for line in text.splitlines()] == [words(t) for t in expected]


async def test_ocr_joins_boxes_on_one_line_left_to_right(ocr: LocalOCR) -> None:
    # Two columns far apart on each row: separate boxes, one line each.
    png = render_text(
        [(30, 60, "Revenue"), (400, 60, "1200"), (30, 130, "Expenses"), (400, 130, "800")]
    )
    text = await ocr.describe(png, "image/png")
    assert [words(line) for line in text.splitlines()] == [["revenue", "1200"], ["expenses", "800"]]


async def test_ocr_reads_dark_text_on_a_transparent_background(ocr: LocalOCR) -> None:
    # Black text whose background is fully transparent black: it must land on white.
    rgb = Image.open(io.BytesIO(render_text([(30, 80, "Transparent label 42")]))).convert("L")
    ink = Image.eval(rgb, lambda v: 255 - v)  # alpha = darkness of the rendered text
    rgba = Image.merge("RGBA", (*Image.new("RGB", rgb.size, "black").split(), ink))
    text = await ocr.describe(encode(rgba, "PNG"), "image/png")
    assert words(text) == words("Transparent label 42")


async def test_ocr_downscales_huge_images_and_still_reads(ocr: LocalOCR) -> None:
    small = Image.open(io.BytesIO(render_text([(30, 80, "Scaled heading 77")], height=160)))
    huge = small.resize((small.width * 5, small.height * 5))  # 6000 x 1600 = 9.6 MP
    text = await ocr.describe(encode(huge, "PNG"), "image/png")
    assert words(text) == words("Scaled heading 77")


async def test_ocr_blank_and_tiny_images_give_empty_text(ocr: LocalOCR) -> None:
    assert await ocr.describe(encode(Image.new("RGB", (300, 200), "white"), "PNG"), "") == ""
    assert await ocr.describe(encode(Image.new("RGB", (3, 400), "black"), "PNG"), "") == ""


async def test_ocr_bad_images_are_permanent_errors(ocr: LocalOCR) -> None:
    with pytest.raises(PermanentError, match=r"^image: unreadable"):
        await ocr.describe(b"%PDF-1.7 definitely not an image", "image/png")
    with pytest.raises(PermanentError, match=r"^image: cannot decode"):
        await ocr.describe(INVOICE[: len(INVOICE) // 2], "image/png")
    # 72 MP: over ragline's 64 MP cap, under Pillow's own bomb warning (89 MP).
    with pytest.raises(PermanentError, match=r"^image: 9000x8000 is over 64000000 pixels"):
        await ocr.describe(png_header_only(9_000, 8_000), "image/png")


def test_ocr_engines_share_one_detector_and_recogniser() -> None:
    ocr = LocalOCR()
    with ocr._engine() as first, ocr._engine() as second:
        assert first is not second
        assert first.text_det is not second.text_det  # RapidOCR's per-call state
        assert first.text_det.session is second.text_det.session
        assert first.text_rec.session is second.text_rec.session


async def test_ocr_detection_passes_keep_within_their_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RAGLINE_INFERENCE_SLOTS", "4")
    ocr = LocalOCR()
    budget = ocr.detection_budget
    hold = budget.hold
    held_at_start: list[int] = []

    @contextlib.contextmanager
    def recorded(pixels: int) -> Iterator[None]:
        with hold(pixels):
            held_at_start.append(budget.held)
            yield

    monkeypatch.setattr(budget, "hold", recorded)
    # 1,600 x 900: the detector's input is 960 x 544 (522,240 pixels), two of which are
    # over the budget of one band (736 x 736): four such calls at once detect one by one.
    page = render_text([(30, 60, "Detected one at a time")], width=800, height=450)
    texts = await asyncio.gather(*(ocr.describe(page, "image/png") for _ in range(4)))
    assert [words(t) for t in texts] == [words("Detected one at a time")] * 4
    assert held_at_start == [960 * 544] * 4
    assert budget.held == 0


async def test_ocr_reads_across_detection_bands_as_in_one_pass(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 400 x 500 pt at 144 dpi: 800 x 1000 px, a 768 x 960 detector input cut into two
    # bands at row 480 (page row 500, y 250 pt), where a line of text sits astride.
    expected = [f"Row {i}: banded detection keeps {100 + i * 53}" for i in range(17)]
    png = render_text([(20, 40 + 26 * i, t) for i, t in enumerate(expected)], 400, 500)
    banded, whole = LocalOCR(), LocalOCR(LocalOCRConfig(det_band_pixels=0))
    hold = banded.detection_budget.hold
    runs: list[int] = []

    def recorded(pixels: int) -> contextlib.AbstractContextManager[None]:
        runs.append(pixels)
        return hold(pixels)

    monkeypatch.setattr(banded.detection_budget, "hold", recorded)
    got = await banded.describe(png, "image/png")
    assert runs == [544 * 768, 544 * 768]
    assert [words(line) for line in got.splitlines()] == [words(t) for t in expected]
    assert got == await whole.describe(png, "image/png")


def test_reading_order_groups_by_line_then_x() -> None:
    def box(x0: float, y0: float, x1: float, y1: float) -> list[list[float]]:
        return [[x0, y0], [x1, y0], [x1, y1], [x0, y1]]

    boxes = np.array([box(300, 12, 380, 40), box(10, 100, 90, 130), box(10, 10, 90, 38)])
    assert reading_order(boxes, ["right", "below", "left"]) == "left right\nbelow"


# --------------------------------------------------------------------------- none, wiring


async def test_no_vision_passes_through() -> None:
    model = NoVision()
    assert await model.describe(INVOICE, "image/png") == ""
    assert await model.describe(b"garbage", "image/png") == ""
    assert model.name == "none"
    await model.aclose()


async def test_vision_from_env_reaches_cohere_base_url(server: FakeCohere) -> None:
    env = {
        "COHERE_API_KEY": "test-key",
        "COHERE_BASE_URL": server.base_url,
        "RAGLINE_VISION_MODEL": "command-a-vision-07-2025",
    }
    model = vision_from_env(env)
    try:
        assert isinstance(model, CohereVision)
        assert (await model.describe(INVOICE, "image/png")).startswith("image of ")
    finally:
        await model.aclose()


def test_vision_from_env_choices() -> None:
    assert isinstance(vision_from_env({}), LocalOCR)
    # A key alone (given for embeddings) does not switch on paid image description.
    assert isinstance(vision_from_env({"COHERE_API_KEY": "k"}), LocalOCR)
    assert isinstance(vision_from_env({"RAGLINE_VISION": "none", "COHERE_API_KEY": "k"}), NoVision)
    assert isinstance(
        vision_from_env({"RAGLINE_VISION": "cohere", "COHERE_API_KEY": "k"}), CohereVision
    )
    assert isinstance(vision_from_env({"RAGLINE_VISION_MODEL": "m"}), LocalOCR)


#: Environments no vision model is made from, and what the refusal says (a regex).
REFUSED = [
    ({"RAGLINE_VISION": "cohere"}, "needs COHERE_API_KEY"),
    (
        {"RAGLINE_VISION": "gpt"},
        "RAGLINE_VISION='gpt' is invalid: expected one of ocr, cohere, none",
    ),
]


@pytest.mark.parametrize(("env", "refusal"), REFUSED)
def test_vision_from_env_refusals(env: dict[str, str], refusal: str) -> None:
    with pytest.raises(ConfigurationError, match=refusal):
        vision_from_env(env)
