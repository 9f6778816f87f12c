"""Build the test corpus from extracted Debian packages (called by fetch.sh).

make_variants.py collect ROOT PDFS     copy each distinct PDF under ROOT into PDFS
make_variants.py broken PDFS OUT       write broken variants of a real PDF into OUT
make_variants.py big PDFS OUT PAGES    concatenate corpus PDFs into one of PAGES pages
"""

# mypy: disallow-untyped-calls=False

from __future__ import annotations

import gzip
import hashlib
import random
import sys
from pathlib import Path

import pymupdf

# PyMuPDF's type hints miss some of its constants.
AES_256: int = pymupdf.PDF_ENCRYPT_AES_256  # type: ignore[attr-defined]


def collect(root: Path, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    seen: set[str] = set()
    for path in sorted(root.rglob("*")):
        if not path.is_file() or not path.name.endswith((".pdf", ".pdf.gz")):
            continue
        data = path.read_bytes()
        if path.name.endswith(".gz"):
            data = gzip.decompress(data)
        digest = hashlib.sha256(data).hexdigest()
        if digest in seen:
            continue
        seen.add(digest)
        package = path.relative_to(root).parts[0]
        stem = path.name.removesuffix(".gz").removesuffix(".pdf")
        target = out / f"{package}__{stem}.pdf"
        if target.exists():
            target = out / f"{package}__{stem}-{digest[:8]}.pdf"
        target.write_bytes(data)
    print(f"collected {len(seen)} distinct PDFs into {out}")


def broken(pdfs: Path, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    # A mid-sized real document, chosen the same way every time.
    source = next(p for p in sorted(pdfs.glob("*.pdf")) if 200_000 < p.stat().st_size < 2_000_000)
    real = source.read_bytes()
    (out / "truncated.pdf").write_bytes(real[: len(real) // 2])
    (out / "zero-byte.pdf").write_bytes(b"")
    (out / "not-a-pdf.pdf").write_text("These are meeting notes saved with the wrong name.\n" * 40)
    (out / "garbage.pdf").write_bytes(random.Random(1).randbytes(64 * 1024))
    (out / "corrupt.pdf").write_bytes(b"%PDF-1.7\n" + random.Random(2).randbytes(64 * 1024))
    with pymupdf.open(source) as doc:
        doc.save(
            out / "encrypted.pdf",
            encryption=AES_256,
            user_pw="user-secret",
            owner_pw="owner-secret",
        )
    print(f"wrote broken variants of {source.name} into {out}")


def big(pdfs: Path, out: Path, pages: int) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    with pymupdf.open() as target:
        for path in sorted(pdfs.glob("*.pdf")):
            with pymupdf.open(path) as doc:
                take = min(doc.page_count, pages - target.page_count)
                target.insert_pdf(doc, to_page=take - 1)
            if target.page_count >= pages:
                break
        target.save(out, garbage=1)
    print(f"wrote {out} ({pages} pages)")


def main(argv: list[str]) -> None:
    command, *args = argv
    if command == "collect":
        collect(Path(args[0]), Path(args[1]))
    elif command == "broken":
        broken(Path(args[0]), Path(args[1]))
    elif command == "big":
        big(Path(args[0]), Path(args[1]), int(args[2]))
    else:
        raise SystemExit(f"unknown command {command!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
