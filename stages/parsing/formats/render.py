"""A PDF page as a PNG with rectangles highlighted: where a search hit's text sits, for
the web view (rendered in the serving process, a page at a time, on demand)."""

# mypy: disallow-untyped-calls=False

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pymupdf

__all__ = ["highlighted_page"]

#: Pixels per inch of the rendered page (a letter page: 935 x 1210 pixels).
DPI = 110
_YELLOW = (1.0, 0.85, 0.0)


def highlighted_page(path: Path, page: int, boxes: Sequence[Sequence[float]]) -> bytes:
    """Page ``page`` (1-based) of the PDF at ``path`` as PNG bytes, each of ``boxes``
    (x0, y0, x1, y1 in points from the top left) filled translucent yellow and outlined.

    :raises ValueError: no such page.
    """
    with pymupdf.open(path) as doc:
        if not 1 <= page <= doc.page_count:
            raise ValueError(f"no page {page}: the document has {doc.page_count}")
        shown = doc.load_page(page - 1)
        for x0, y0, x1, y1 in boxes:
            rect = pymupdf.Rect(x0 - 2, y0 - 2, x1 + 2, y1 + 2)
            shown.draw_rect(rect, color=_YELLOW, fill=_YELLOW, fill_opacity=0.3, width=1.5)
        return bytes(shown.get_pixmap(dpi=DPI, alpha=False).tobytes("png"))
