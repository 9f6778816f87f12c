"""``python -m bench.harness.default_path_loop DSN DATA_DIR OUT``: the models' own speed.

After a ``bench.default_path`` ingest, reads the images ragline stored (the ``assets``
table and the data dir's asset store) and the chunk texts it embedded (the ``chunks``
table), then, in this one process with no engine, no database and no index, runs the same
OCR (:meth:`LocalOCR.describe`, RapidOCR on image bytes, as many images at once as it
has inference slots) over every stored image and the same embedder
(:meth:`LocalEmbedder.embed`) over every distinct chunk text, in the embed stage's batches
(per document, ``max_batch`` texts each), both on their default settings: every core
busy, the models' practical limit here. Writes the timings to OUT as JSON. Inputs are
read before any clock starts; each model is loaded (and run once on the first input)
before its clock starts.
"""

from __future__ import annotations

import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

import anyio
import msgspec

from bench.harness.db import sql
from stages.adapters.assets.directory import DirStore
from stages.adapters.embedder.local import LocalEmbedder, LocalEmbedderConfig
from stages.adapters.vision.ocr import LocalOCR

# Every stored image, as the vision stage visits them (one per document and content).
ASSETS_SQL = "SELECT object_key FROM assets ORDER BY document_id, page, sha256"
# Every chunk in document order; the embed stage embeds each distinct text once.
CHUNKS_SQL = "SELECT document_id, sha256, text FROM chunks ORDER BY document_id, ordinal"


class LoopResult(msgspec.Struct, frozen=True, kw_only=True):
    """What the loop measured: inputs, seconds and what came out."""

    images: int
    image_bytes: int
    ocr_s: float
    #: CPU seconds of this process (all its threads) over the OCR loop.
    ocr_cpu_s: float
    #: Images whose OCR text was not empty.
    images_with_text: int
    chunks: int
    batches: int
    embed_s: float
    embed_cpu_s: float


def read_images(dsn: str, data_dir: Path) -> list[bytes]:
    store = DirStore(data_dir / "assets")
    return [anyio.run(store.get, r["object_key"]) for r in sql(dsn, ASSETS_SQL)]


def embed_batches(rows: Sequence[tuple[uuid.UUID, str, str]], max_batch: int) -> list[list[str]]:
    """The distinct texts (by sha256, first occurrence wins) grouped by document, each
    document's cut into batches of at most ``max_batch``, as the embed stage sends them."""
    seen: set[str] = set()
    per_doc: dict[uuid.UUID, list[str]] = {}
    for doc, sha, text in rows:
        if sha not in seen:
            seen.add(sha)
            per_doc.setdefault(doc, []).append(text)
    return [
        texts[i : i + max_batch]
        for texts in per_doc.values()
        for i in range(0, len(texts), max_batch)
    ]


async def time_ocr(images: Sequence[bytes]) -> tuple[float, float, int]:
    """Wall and CPU seconds of OCR over ``images`` (``parallel`` images at once, as many
    as the model takes: every core busy), and how many gave text."""
    ocr = LocalOCR()
    todo = list(reversed(images))
    with_text = 0

    async def drain() -> None:
        nonlocal with_text
        while todo:
            text = await ocr.describe(todo.pop(), "image/png")
            with_text += bool(text.strip())

    async with anyio.create_task_group() as tg:  # load one engine per slot and warm up
        for _ in range(ocr.parallel):
            tg.start_soon(ocr.describe, images[0] if images else b"", "image/png")
    started, cpu = time.perf_counter(), time.process_time()
    async with anyio.create_task_group() as tg:
        for _ in range(ocr.parallel):
            tg.start_soon(drain)
    return time.perf_counter() - started, time.process_time() - cpu, with_text


async def time_embed(batches: Sequence[Sequence[str]]) -> tuple[float, float]:
    """Wall and CPU seconds of embedding ``batches``, one after another (each call's runs
    fill the cores)."""
    embedder = LocalEmbedder()
    if batches:
        await embedder.embed(batches[0][:1], "search_document")  # load and warm up
    started, cpu = time.perf_counter(), time.process_time()
    for batch in batches:
        await embedder.embed(batch, "search_document")
    return time.perf_counter() - started, time.process_time() - cpu


def run(dsn: str, data_dir: Path) -> LoopResult:
    images = read_images(dsn, data_dir)
    rows = [(r["document_id"], r["sha256"], r["text"]) for r in sql(dsn, CHUNKS_SQL)]
    batches = embed_batches(rows, LocalEmbedderConfig().max_batch)
    ocr_s, ocr_cpu_s, with_text = anyio.run(time_ocr, images) if images else (0.0, 0.0, 0)
    embed_s, embed_cpu_s = anyio.run(time_embed, batches)
    return LoopResult(
        images=len(images),
        image_bytes=sum(len(i) for i in images),
        ocr_s=ocr_s,
        ocr_cpu_s=ocr_cpu_s,
        images_with_text=with_text,
        chunks=sum(len(b) for b in batches),
        batches=len(batches),
        embed_s=embed_s,
        embed_cpu_s=embed_cpu_s,
    )


def main(argv: list[str]) -> int:
    if len(argv) != 4:
        print("usage: python -m bench.harness.default_path_loop DSN DATA_DIR OUT", file=sys.stderr)
        return 2
    result = run(argv[1], Path(argv[2]))
    Path(argv[3]).write_bytes(msgspec.json.encode(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
