"""Chunk benchmark: the chunk stage's CPU per page on the corpus, and a digest of its output.

    python -m bench.chunk [--docs N] [--rounds R] [--pages FILE]

Parses the corpus PDFs as the parse stage does (``stages.parsing.formats.pdf``; kept in ``--pages``
so a
second run skips it), then chunks every document with the shipped defaults (the local
embedder's WordPiece counter, 254-token window) as a worker process does: one counter for
all documents, so its word cache fills as it goes. Round 1 starts from a new counter (a
new worker); later rounds reuse it (a worker that has seen the words). For each round it
prints CPU ms per page (user + system of this process), chunks per CPU second, and a
digest of every chunk's text, page span and token count: two trees that chunk alike
print the same digest. Nothing is asserted.
"""

# mypy: disallow-untyped-calls=False

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Sequence
from pathlib import Path

import msgspec

from bench.args import bench_parser
from bench.ingest import corpus_files, load_note
from bench.quality import Document, load
from bench.queue import heading, row
from stages.text.chunking import chunk_pages
from stages.text.tokens import TokenCounter, local_counter


def documents(limit: int | None, cache: Path | None) -> list[Document]:
    """The corpus's pages, from ``cache`` when it holds them."""
    if cache is not None and cache.is_file():
        return msgspec.msgpack.decode(cache.read_bytes(), type=list[Document])
    docs, parse_cpu_s, pages = load(corpus_files(limit))
    print(f"extracted {pages} pages in {parse_cpu_s:.1f} CPU s")
    if cache is not None:
        cache.write_bytes(msgspec.msgpack.encode(docs))
    return docs


def one_round(docs: Sequence[Document], counter: TokenCounter) -> tuple[float, int, str]:
    """CPU seconds, chunks, and the digest of chunking every document once."""
    digest = hashlib.sha256()
    chunks = 0
    cpu_s = 0.0
    for doc in docs:
        started = time.process_time()
        out = chunk_pages(doc.pages, None, counter)
        cpu_s += time.process_time() - started
        chunks += len(out)
        for c in out:
            digest.update(f"{c.sha256} {c.page_start} {c.page_end} {c.tokens}\n".encode())
    return cpu_s, chunks, digest.hexdigest()[:16]


def main(limit: int | None, rounds: int, cache: Path | None) -> None:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    docs = documents(limit, cache)
    pages = sum(len(d.pages) for d in docs)
    chars = sum(len(text) for d in docs for _, text in d.pages)
    heading(f"Chunking {len(docs)} corpus documents, {pages} pages, {chars / 1e6:.1f} M chars")
    print(load_note())
    counter = local_counter()
    widths = (6, 12, 10, 10, 18)
    row("round", "CPU ms/page", "chunks", "chunks/s", "digest", widths=widths)
    for number in range(1, rounds + 1):
        cpu_s, chunks, digest = one_round(docs, counter)
        row(
            number, f"{1000 * cpu_s / pages:.3f}", chunks, f"{chunks / cpu_s:.0f}", digest,
            widths=widths,
        )  # fmt: skip
    print(load_note())


def parse_args(argv: Sequence[str] | None = None) -> tuple[int | None, int, Path | None]:
    parser = bench_parser("bench.chunk", __doc__)
    parser.add_argument("--docs", type=int, help="corpus documents (all distinct ones)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds over the corpus (2)")
    parser.add_argument("--pages", type=Path, help="file keeping the extracted pages")
    args = parser.parse_args(argv)
    return args.docs, args.rounds, args.pages


if __name__ == "__main__":
    main(*parse_args())
