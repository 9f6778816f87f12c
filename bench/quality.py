"""Chunk quality: how much of the corpus the local embedder never reads, before and after
sizing chunks in its tokens, and what the chunker costs.

``python -m bench.quality [--docs N]`` parses the corpus PDFs (``stages.parsing.formats.pdf``, as
the parse
stage does) and chunks every document twice, side by side:

- **before**: the old character-sized chunker (1,000 characters, 150 overlap), which is
  the same chunker counting one token per character;
- **after**: chunks sized in all-MiniLM-L6-v2's WordPiece tokens, to its 254-token window
  (the shipped default).

For each it prints the share of the corpus's tokens that no chunk ever gets to the model
(a token is embedded when it is among the first 254 content tokens of some chunk; overlap
counts, so a token cut off one chunk but read at the start of the next is embedded),
chunks over the window, chunk size percentiles, and the CPU seconds chunking took next to
the CPU seconds of extracting the same pages (the parse stage's own work). Nothing is
asserted; the floor for "after" is 0.
"""

# mypy: disallow-untyped-calls=False

from __future__ import annotations

import argparse
import bisect
import os
import statistics
import time
from collections.abc import Sequence
from pathlib import Path

import msgspec
import tokenizers

from bench.ingest import corpus_files, load_note
from bench.report import heading, row
from stages.parsing.formats.pdf import iter_pages, open_pdf
from stages.text.chunking import Chunk, ChunkConfig, chunk_pages
from stages.text.tokens import MINILM_TOKENIZER, CharCounter, TokenCounter, local_counter

OLD_CONFIG = ChunkConfig(max_tokens=1000, overlap_tokens=150)


class Tally(msgspec.Struct, kw_only=True):
    """One way of chunking the corpus: every chunk's size in tokens (the counts of chunks
    and of chunks over the window follow from them), the corpus's tokens, those no chunk
    gets to the model, and the CPU seconds chunking took."""

    window: int
    sizes: list[int] = msgspec.field(default_factory=list)
    tokens: int = 0
    never_embedded: int = 0
    cpu_s: float = 0.0

    @property
    def chunks(self) -> int:
        return len(self.sizes)

    @property
    def over_window(self) -> int:
        return sum(n > self.window for n in self.sizes)


class Document(msgspec.Struct, frozen=True):
    name: str
    pages: list[tuple[int, str]]


def load(files: Sequence[Path]) -> tuple[list[Document], float, int]:
    """Every file's pages, and the CPU seconds that extraction took."""
    docs: list[Document] = []
    started = time.process_time()
    for path in files:
        try:
            pdf = open_pdf(path, name=path.name)
        except Exception as exc:
            print(f"  skipped {path.name}: {exc}")
            continue
        docs.append(Document(path.name, [(t.page, t.text) for t, _ in iter_pages(pdf)]))
        pdf.close()
    pages = sum(len(d.pages) for d in docs)
    return docs, time.process_time() - started, pages


def embedded_share(
    tok: tokenizers.Tokenizer, window: int, doc: Document, chunks: Sequence[Chunk]
) -> tuple[int, int]:
    """(tokens of the document, tokens no chunk gets to the model)."""
    joined = "\n\n".join(text for _, text in doc.pages)
    encoding = tok.encode(joined, add_special_tokens=False)
    starts = [o[0] for o in encoding.offsets]
    covered = bytearray(len(starts))
    at = 0
    for chunk in chunks:
        begin = joined.index(chunk.text, at)
        at = begin + 1  # chunks come in text order; overlaps start before the last end
        offsets = tok.encode(chunk.text, add_special_tokens=False).offsets
        read_to = begin + (offsets[window][0] if len(offsets) > window else len(chunk.text))
        first = bisect.bisect_left(starts, begin)
        last = bisect.bisect_left(starts, read_to)
        covered[first:last] = b"\x01" * (last - first)
    return len(starts), len(starts) - sum(covered)


def measure(
    docs: Sequence[Document], config: ChunkConfig | None, counter: TokenCounter, window: int
) -> Tally:
    tok = tokenizers.Tokenizer.from_file(str(MINILM_TOKENIZER))
    tok.no_truncation()
    tok.no_padding()
    tally = Tally(window=window)
    for doc in docs:
        started = time.process_time()
        chunks = chunk_pages(doc.pages, config, counter)
        tally.cpu_s += time.process_time() - started
        sizes = [
            len(e) for e in tok.encode_batch([c.text for c in chunks], add_special_tokens=False)
        ]
        tally.sizes.extend(sizes)
        total, lost = embedded_share(tok, window, doc, chunks)
        tally.tokens += total
        tally.never_embedded += lost
    return tally


def percentile(values: list[int], q: float) -> int:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0


def report(before: Tally, after: Tally, parse_cpu_s: float, pages: int) -> None:
    widths = (8, 8, 12, 13, 7, 7, 7, 10, 12)
    row(
        "", "chunks", "over window", "never embedded", "p50", "p90", "max",
        "chunk CPU s", "vs parse CPU", widths=widths,
    )  # fmt: skip
    for name, t in (("before", before), ("after", after)):
        share = t.never_embedded / t.tokens if t.tokens else 0.0
        row(
            name, t.chunks, f"{t.over_window} ({t.over_window / max(t.chunks, 1):.0%})",
            f"{share:.2%}", percentile(t.sizes, 0.5), percentile(t.sizes, 0.9),
            max(t.sizes, default=0), f"{t.cpu_s:.2f}", f"{t.cpu_s / parse_cpu_s:.2f}",
            widths=widths,
        )  # fmt: skip
    print(
        f"tokens: {after.tokens} (all-MiniLM-L6-v2 WordPiece, special tokens excluded); "
        f"extracting the {pages} pages took {parse_cpu_s:.1f} CPU s; chunk sizes in tokens; "
        f"mean chunk {statistics.mean(after.sizes or [0]):.0f} tokens after, "
        f"{statistics.mean(before.sizes or [0]):.0f} before"
    )
    print(
        f"never embedded: before {before.never_embedded / max(before.tokens, 1):.2%}, after "
        f"{after.never_embedded / max(after.tokens, 1):.2%} (floor 0)"
    )


def main(docs_limit: int | None) -> None:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    files = corpus_files(docs_limit)
    heading(
        f"Tokens never embedded by all-MiniLM-L6-v2 (window 254 + 2 special tokens), "
        f"{len(files)} corpus PDFs: 1,000-character chunks (before) vs chunks in its "
        "tokens (after)"
    )
    print(load_note())
    docs, parse_cpu_s, pages = load(files)
    counter = local_counter()
    window = counter.window
    before = measure(docs, OLD_CONFIG, CharCounter(), window)
    after = measure(docs, None, counter, window)
    report(before, after, parse_cpu_s, pages)
    print(load_note())


def parse_args(argv: Sequence[str] | None = None) -> int | None:
    parser = argparse.ArgumentParser(prog="python -m bench.quality", description=__doc__)
    parser.add_argument("--docs", type=int, help="corpus documents (all distinct ones)")
    docs: int | None = parser.parse_args(argv).docs
    return docs


if __name__ == "__main__":
    main(parse_args())
