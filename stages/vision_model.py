"""The vision service: an image in, searchable text out.

Three implementations of :class:`stages.vision_protocol.VisionModel` (the port, which
imports none of them):

- :class:`CohereVision` asks a vision-capable Cohere chat model (``/v2/chat``) to
  transcribe and describe the image.
- :class:`LocalOCR` runs RapidOCR (PP-OCR models shipped inside the ``rapidocr`` wheel, on
  onnxruntime) in a worker thread: no network, recognised text only.
- :class:`NoVision` describes nothing, so the vision stage passes images through.

:func:`vision_for` picks one; see its docstring for the rules.
"""

from __future__ import annotations

import base64
import io
import logging
import os
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread
import msgspec
import numpy as np
from PIL import Image, UnidentifiedImageError

from runtime.api import ConfigurationError, PermanentError
from stages.cohere_errors import CohereAdapter, cohere_knobs, translated
from stages.vision_protocol import VisionModel

if TYPE_CHECKING:
    from rapidocr import RapidOCR

    from stages.settings import VisionSettings


# --------------------------------------------------------------------------- images

#: Refuse to decode anything bigger (a 64 MP RGB bitmap is already ~200 MB in memory).
MAX_DECODE_PIXELS = 64_000_000
#: What the Cohere chat API accepts as ``image_url`` data URIs.
COHERE_MEDIA_TYPES = frozenset({"image/png", "image/jpeg", "image/webp", "image/gif"})


def open_image(image: bytes) -> Image.Image:
    """A lazily decoded image; PermanentError if the bytes are not an image we can read."""
    try:
        img = Image.open(io.BytesIO(image))
    except UnidentifiedImageError as exc:
        raise PermanentError(f"image: unreadable ({len(image)} bytes, unknown format)") from exc
    except (Image.DecompressionBombError, OSError, ValueError) as exc:
        raise PermanentError(f"image: unreadable ({len(image)} bytes, {exc})") from exc
    width, height = img.size
    if width * height > MAX_DECODE_PIXELS:
        raise PermanentError(f"image: {width}x{height} is over {MAX_DECODE_PIXELS} pixels")
    return img


def decode_rgb(image: bytes, *, max_pixels: int) -> Image.Image:
    """Decode to RGB on white, downscaled to at most ``max_pixels``, keeping memory bounded."""
    img = open_image(image)
    scale = _scale(img.size, max_pixels)
    if scale < 1.0:
        # JPEG decoders can scale by 1/2..1/8 while decoding: the full bitmap never exists.
        img.draft("RGB", (int(img.width * scale) + 1, int(img.height * scale) + 1))
    try:
        img.load()
        rgb = _flatten(img)
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as exc:
        raise PermanentError(f"image: cannot decode ({exc})") from exc
    if _scale(rgb.size, max_pixels) < 1.0:
        s = _scale(rgb.size, max_pixels)
        rgb.thumbnail((max(1, int(rgb.width * s)), max(1, int(rgb.height * s))))
    return rgb


def _scale(size: tuple[int, int], max_pixels: int) -> float:
    pixels = size[0] * size[1]
    return 1.0 if pixels <= max_pixels else float((max_pixels / pixels) ** 0.5)


def _flatten(img: Image.Image) -> Image.Image:
    # Transparent pixels are often black underneath: text drawn on them would vanish.
    if img.mode in ("RGBA", "LA", "PA") or (img.mode == "P" and "transparency" in img.info):
        rgba = img.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(background, rgba).convert("RGB")
    return img.convert("RGB")


def encode_png(img: Image.Image) -> bytes:
    out = io.BytesIO()
    img.save(out, format="PNG", optimize=False)
    return out.getvalue()


# --------------------------------------------------------------------------- Cohere

DEFAULT_PROMPT = (
    "This image comes from a document being indexed for search. Transcribe every piece of "
    "text in it verbatim, then describe what it shows in a few sentences (for charts: the "
    "axes, series, trends and notable values; for diagrams: the parts and how they relate). "
    "Plain text only, no preamble."
)


class CohereVisionConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Settings of :class:`CohereVision`."""

    api_key: str
    base_url: str | None = None
    model: str = "command-a-vision-07-2025"
    prompt: str = DEFAULT_PROMPT
    max_tokens: int = 1024
    timeout_s: float = 120.0
    #: Images above this many bytes, or in a format Cohere does not take, are re-encoded.
    max_image_bytes: int = 5_000_000
    #: Pixel budget for re-encoded images (the model downsamples larger ones anyway).
    max_pixels: int = 4_000_000


class CohereVision(CohereAdapter):
    """:class:`VisionModel` backed by a vision-capable Cohere chat model."""

    def __init__(self, config: CohereVisionConfig) -> None:
        super().__init__(config.api_key, config.base_url, config.timeout_s)
        self.config = config

    @property
    def name(self) -> str:
        return f"cohere/{self.config.model}"

    async def describe(self, image: bytes, media_type: str) -> str:
        data, media_type = await anyio.to_thread.run_sync(self._sendable, image)
        data_uri = f"data:{media_type};base64,{base64.b64encode(data).decode('ascii')}"
        message: Any = {
            "role": "user",
            "content": [
                {"type": "text", "text": self.config.prompt},
                {"type": "image_url", "image_url": {"url": data_uri}},
            ],
        }
        with translated("cohere vision"):
            response = await self._client.chat(
                model=self.config.model,
                messages=[message],
                max_tokens=self.config.max_tokens,
                temperature=0.0,
            )
        return _response_text(response.message.content)

    def _sendable(self, image: bytes) -> tuple[bytes, str]:
        """The image as Cohere takes it, trusting the bytes' format over the caller's label."""
        img = open_image(image)
        media_type = Image.MIME.get(img.format or "", "")
        if media_type in COHERE_MEDIA_TYPES and len(image) <= self.config.max_image_bytes:
            return image, media_type
        return encode_png(decode_rgb(image, max_pixels=self.config.max_pixels)), "image/png"


def _response_text(content: Sequence[Any] | None) -> str:
    parts = [str(item.text) for item in content or () if getattr(item, "type", None) == "text"]
    return "\n".join(p.strip() for p in parts if p.strip())


# --------------------------------------------------------------------------- local OCR


class LocalOCRConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Settings of :class:`LocalOCR`."""

    #: Images are downscaled to this many pixels before OCR (bounded memory and time).
    max_pixels: int = 4_000_000
    #: The detector resizes the longer side to this; rapidocr's default (shorter side to
    #: 736) blows a wide 1200x400 image up to 2208x736 and runs ~7x slower.
    det_max_side: int = 960
    #: Recognised lines scoring below this are dropped.
    min_score: float = 0.5
    #: RapidOCR's 0/180 degree line classifier. Off: on upright rendered pages it flipped
    #: 2-3 of 30 lines into garbage, and document images are nearly always upright.
    detect_upside_down: bool = False
    #: onnxruntime intra-op threads per model; 0 means min(4, cpu count).
    threads: int = 0


class LocalOCR:
    """:class:`VisionModel` running RapidOCR offline; returns the text in reading order."""

    def __init__(self, config: LocalOCRConfig | None = None) -> None:
        self.config = config or LocalOCRConfig()
        self._engine: RapidOCR | None = None
        self._load_lock = threading.Lock()
        # RapidOCR mutates its own config on every call: one call at a time per engine.
        self._limiter = anyio.CapacityLimiter(1)

    @property
    def name(self) -> str:
        return "local/rapidocr"

    async def describe(self, image: bytes, media_type: str) -> str:
        return await anyio.to_thread.run_sync(self.describe_sync, image, limiter=self._limiter)

    def describe_sync(self, image: bytes) -> str:
        """Blocking form of :meth:`describe`."""
        rgb = decode_rgb(image, max_pixels=self.config.max_pixels)
        if min(rgb.size) < 8:
            return ""  # a sliver: nothing legible, and the detector rejects tiny inputs
        result = self._ensure_engine()(rgb)
        boxes, txts = getattr(result, "boxes", None), getattr(result, "txts", None)
        if boxes is None or not txts:
            return ""
        return reading_order(np.asarray(boxes, dtype=np.float32), [str(t) for t in txts])

    def _ensure_engine(self) -> RapidOCR:
        with self._load_lock:
            if self._engine is None:
                self._engine = self._load_engine()
            return self._engine

    def _load_engine(self) -> RapidOCR:
        from rapidocr import RapidOCR

        threads = self.config.threads or min(4, os.cpu_count() or 1)
        params = {
            # "The text detection result is empty" is a warning: a picture without text is
            # normal here, not worth a line per image.
            "Global.log_level": "error",
            "Global.text_score": self.config.min_score,
            "Global.use_cls": self.config.detect_upside_down,
            "Det.limit_type": "max",
            "Det.limit_side_len": self.config.det_max_side,
            "EngineConfig.onnxruntime.intra_op_num_threads": threads,
            "EngineConfig.onnxruntime.inter_op_num_threads": 1,
        }
        engine = RapidOCR(params=params)
        # RapidOCR installs its own coloured stderr handler; route its records through
        # ours instead, so --log-format json stays one JSON object per line.
        ocr_log = logging.getLogger("RapidOCR")
        ocr_log.handlers.clear()
        ocr_log.propagate = True
        return engine

    async def aclose(self) -> None:
        with self._load_lock:
            self._engine = None


def reading_order(boxes: np.ndarray[Any, Any], texts: Sequence[str]) -> str:
    """Join OCR boxes into lines (top to bottom) of words (left to right).

    ``boxes`` is ``(n, 4, 2)`` corner points. A box joins the current line when its
    vertical centre falls inside that line's first box.
    """
    spans = [(float(b[:, 1].min()), float(b[:, 1].max()), float(b[:, 0].min())) for b in boxes]
    order = sorted(range(len(texts)), key=lambda i: (spans[i][0], spans[i][2]))
    lines: list[list[int]] = []
    for i in order:
        centre = (spans[i][0] + spans[i][1]) / 2
        if lines and spans[lines[-1][0]][0] <= centre <= spans[lines[-1][0]][1]:
            lines[-1].append(i)
        else:
            lines.append([i])
    return "\n".join(
        " ".join(texts[i] for i in sorted(ln, key=lambda i: spans[i][2])) for ln in lines
    )


# --------------------------------------------------------------------------- none


class NoVision:
    """:class:`VisionModel` that describes nothing (``RAGLINE_VISION=none``)."""

    @property
    def name(self) -> str:
        return "none"

    async def describe(self, image: bytes, media_type: str) -> str:
        return ""

    async def aclose(self) -> None:
        return None


# --------------------------------------------------------------------------- wiring


def vision_for(settings: VisionSettings) -> VisionModel:
    """The vision model ``settings`` select (read from the environment by
    :meth:`stages.settings.PipelineSettings.from_env`).

    ``RAGLINE_VISION=none|ocr|cohere`` decides when set. Unset, it is ``cohere`` only if
    both ``RAGLINE_VISION_MODEL`` and ``COHERE_API_KEY`` are set, else ``ocr``. Cohere
    knobs: ``RAGLINE_VISION_MODEL`` (command-a-vision-07-2025), ``RAGLINE_VISION_TIMEOUT_S``
    (120), ``COHERE_BASE_URL``.
    """
    if settings.kind == "none":
        return NoVision()
    if settings.kind == "ocr":
        return LocalOCR()
    if settings.kind != "cohere":
        raise ConfigurationError(
            f"RAGLINE_VISION must be none, ocr or cohere, not {settings.kind!r}"
        )
    if not settings.api_key:
        raise ConfigurationError("RAGLINE_VISION=cohere needs COHERE_API_KEY")
    return CohereVision(CohereVisionConfig(**cohere_knobs(settings)))
