"""Would a cheap pass before OCR pay? (issue 38, item 2)

``python -m bench.ocr_prepass [--docs N]`` reads every distinct embedded image of
bench.default_path's corpus slice (the same PDFs), OCRs each with ``LocalOCR`` on its
defaults (one thread), and measures per image the CPU it took, the words it found and two
cheap statistics a pre-pass could decide on: the grey-level standard deviation and the
mean absolute difference between neighbouring pixels (edge density). Then, for a range
of thresholds: how many images a pre-pass would skip, how many of those hold words, the
words lost and the CPU saved.

RapidOCR's own detector already gates recognition (lines are recognised only where it
found text), so the question is whether anything cheaper than the detector is worth
running first.
"""

# PyMuPDF's API is only partly typed.
# mypy: disallow-untyped-calls=False

from __future__ import annotations

import sys
import time
from collections.abc import Sequence

import msgspec
import numpy as np
import pymupdf

from bench.args import bench_parser
from bench.default_path import DEFAULT_DOCS, corpus_slice
from bench.report import heading, row
from runtime.errors import PermanentError
from stages.adapters.vision.images import decode_rgb
from stages.adapters.vision.ocr import LocalOCR

EDGE_THRESHOLDS = (1.0, 2.0, 3.0, 5.0, 8.0)
STD_THRESHOLDS = (5.0, 10.0, 20.0)


class Image(msgspec.Struct, frozen=True):
    std: float
    edge: float
    words: int
    cpu_s: float


def slice_images(docs: int) -> list[bytes]:
    """The distinct embedded images of the slice's PDFs, in file and page order."""
    found: list[bytes] = []
    seen: set[bytes] = set()
    for path in corpus_slice(docs).files:
        with pymupdf.open(path) as doc:
            for page in doc:
                for xref, *_ in page.get_images():
                    try:
                        data: bytes = doc.extract_image(xref)["image"]
                    except (RuntimeError, ValueError, KeyError):
                        continue
                    if data not in seen:
                        seen.add(data)
                        found.append(data)
    return found


def measure(ocr: LocalOCR, data: bytes) -> Image | None:
    try:
        grey = np.asarray(decode_rgb(data, max_pixels=4_000_000).convert("L"), np.float32)
    except PermanentError:  # what OCR refuses, a pre-pass never sees
        return None
    edge = sum(float(np.abs(np.diff(grey, axis=a)).mean()) for a in (0, 1) if grey.shape[a] > 1)
    started = time.process_time()
    words = len(ocr.describe_sync(data).split())
    return Image(float(grey.std()), edge, words, time.process_time() - started)


def print_thresholds(images: Sequence[Image]) -> None:
    widths = (16, 9, 12, 12, 12)
    row("skip when", "skipped", "with words", "words lost", "CPU saved", widths=widths)
    total_words = sum(i.words for i in images) or 1
    for name, key, thresholds in (
        ("edge <", "edge", EDGE_THRESHOLDS),
        ("std <", "std", STD_THRESHOLDS),
    ):
        for thr in thresholds:
            skipped = [i for i in images if getattr(i, key) < thr]
            lost = sum(i.words for i in skipped)
            row(
                f"{name} {thr:g}", len(skipped), sum(1 for i in skipped if i.words),
                f"{lost} ({lost / total_words:.1%})", f"{sum(i.cpu_s for i in skipped):.1f}s",
                widths=widths,
            )  # fmt: skip


def main(docs: int) -> None:
    images = slice_images(docs)
    heading(f"OCR pre-pass: {len(images)} distinct images of {docs} corpus PDFs")
    ocr = LocalOCR()
    measured = [m for m in (measure(ocr, data) for data in images) if m is not None]
    blank = [i for i in measured if not i.words]
    cpu = sum(i.cpu_s for i in measured)
    print(
        f"OCR: {len(measured)} images, {sum(i.words for i in measured)} words, CPU {cpu:.1f}s; "
        f"{len(blank)} without words took {sum(i.cpu_s for i in blank):.1f}s of it "
        f"({sum(i.cpu_s for i in blank) / max(cpu, 1e-9):.1%}): the detector is the pre-pass"
    )
    print_thresholds(measured)


def run(argv: Sequence[str] | None = None) -> None:
    parser = bench_parser("bench.ocr_prepass", __doc__)
    parser.add_argument("--docs", type=int, default=DEFAULT_DOCS, help="PDFs in the slice")
    args = parser.parse_args(argv)
    if not corpus_slice(args.docs).files:
        sys.exit("no corpus PDF with images found: run tests/corpus/fetch.sh")
    main(args.docs)


if __name__ == "__main__":
    run()
