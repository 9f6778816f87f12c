"""Small broken or odd PDFs that tests write on the fly."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pymupdf as _pymupdf

#: PyMuPDF's annotations are partial; these helpers only build small test files with it.
pymupdf: Any = _pymupdf


def _text_pdf(pages: int, text: str) -> bytes:
    doc = pymupdf.open()
    for i in range(pages):
        page = doc.new_page()
        page.insert_text((72, 72), f"{text} (page {i + 1})")
    data: bytes = doc.tobytes()
    doc.close()
    return data


def write_encrypted_pdf(path: Path) -> Path:
    """A PDF that opens only with a password."""
    doc = pymupdf.open()
    doc.new_page().insert_text((72, 72), "a secret nobody may read")
    doc.save(str(path), encryption=pymupdf.PDF_ENCRYPT_AES_256, user_pw="user", owner_pw="owner")
    doc.close()
    return path


def write_truncated_pdf(path: Path, keep_bytes: int = 200) -> Path:
    """The first ``keep_bytes`` of a PDF: the header is there (submit accepts it), the
    rest is gone, so MuPDF cannot open it."""
    path.write_bytes(_text_pdf(3, "words " * 20)[:keep_bytes])
    return path


def write_textless_pdf(path: Path) -> Path:
    """A PDF cut at a third: MuPDF repairs it into pages that have no text left."""
    data = _text_pdf(3, "words " * 20)
    path.write_bytes(data[: len(data) // 3])
    return path
