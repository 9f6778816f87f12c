"""PNG files of MuPDF pixmaps, compressed for speed.

The parse stage stores every image that is not a JPEG as a PNG. MuPDF's own encoder
(``Pixmap.tobytes("png")``, and ``extract_image`` for any stream that is not a file
format of its own) deflates at zlib's default level, most of the CPU of extracting images;
zlib level 1 keeps every pixel for somewhat larger files, and each is read only once more
(by the vision model), so the cheaper encoding wins. Figures: docs/architecture.md,
"Throughput and latency".
"""

from __future__ import annotations

import struct
import zlib
from typing import Any

__all__ = ["png_of"]

_SIGNATURE = b"\x89PNG\r\n\x1a\n"
#: PNG color types by samples per pixel: gray, RGB.
_COLOR_TYPES = {1: 0, 3: 2}
#: zlib's fastest level.
_LEVEL = 1


def png_of(pix: Any) -> bytes:
    """An 8-bit PNG of ``pix`` (a ``pymupdf.Pixmap``, gray or RGB), each row unfiltered.
    A pixmap with alpha (MuPDF's is premultiplied, a PNG's is not) goes to MuPDF's
    encoder; images of a PDF come without (their soft mask is an image of its own)."""
    width, height, n = pix.width, pix.height, pix.n
    if pix.alpha:
        return bytes(pix.tobytes("png"))
    if n not in _COLOR_TYPES:
        raise ValueError(f"no PNG color type for {n} samples a pixel")
    filtered = _unfiltered_rows(pix.samples_mv, height, pix.stride, width * n)
    header = struct.pack(">IIBBBBB", width, height, 8, _COLOR_TYPES[n], 0, 0, 0)
    return b"".join(
        (
            _SIGNATURE,
            _chunk(b"IHDR", header),
            _chunk(b"IDAT", zlib.compress(filtered, _LEVEL)),
            _chunk(b"IEND", b""),
        )
    )


def _unfiltered_rows(samples: memoryview, height: int, stride: int, size: int) -> bytearray:
    """Each row's ``size`` bytes of ``samples`` after a 0 (PNG's "no filter"). Plain
    slices, not NumPy: the parser process does not import it (~10 MB less resident)."""
    out = bytearray(height * (size + 1))
    for row in range(height):
        start = row * (size + 1) + 1
        out[start : start + size] = samples[row * stride : row * stride + size]
    return out


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
