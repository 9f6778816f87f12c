"""Decoding and re-encoding the images vision models read: bounded in pixels, flattened
to RGB, shared by the Cohere and OCR adapters."""

from __future__ import annotations

import io

from PIL import Image, UnidentifiedImageError

from runtime.api import PermanentError

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
