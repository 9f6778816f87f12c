"""A vision-capable Cohere chat model (``/v2/chat``) as a
:class:`stages.ports.vision.VisionModel`: it transcribes and describes each image."""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Any

import anyio.to_thread
import msgspec
from PIL import Image

from stages.adapters.cohere import CohereAdapter, translated
from stages.adapters.vision.images import COHERE_MEDIA_TYPES, decode_rgb, encode_png, open_image

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

    metered = True
    parallel = 1
    describes = True

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
