"""chunk: pages → structure-aware text chunks sized in the embedder's tokens, with overlap
and page provenance.

Chunks are sized with the configured embedder's own token counter
(:attr:`Services.token_counter`) and, by default, to its window, so the model reads every
token. Each chunk row records its exact token count and whether it is over the window
(only possible with ``RAGLINE_CHUNK_TOKENS`` set above the window); the stage logs and
counts those (``ragline_chunks_over_window``), and ``status`` shows them.
"""

from __future__ import annotations

import logging

import anyio.to_thread
from prometheus_client import Counter, Histogram

from runtime.api import DbConn, Job, JobContext, MissingInput, release_free_heap
from stages.db import checkpoints
from stages.ports.services import Services
from stages.text.chunking import ChunkConfig, chunk_pages
from stages.text.keywords import stored_vector
from stages.text.structure import structured_chunks
from stages.text.tokens import TokenCounter

log = logging.getLogger(__name__)

CHUNKS = Counter("ragline_chunks", "Text chunks cut")
OVER_WINDOW = Counter(
    "ragline_chunks_over_window",
    "Text chunks longer than the embedder's window (their tail is never embedded)",
)
CHUNK_TOKENS = Histogram(
    "ragline_chunk_tokens",
    "Text chunk length in the embedder's tokens",
    buckets=(16, 32, 64, 128, 192, 254, 256, 384, 512, 1024, 2048, 8192),
)


def section_label(sections: dict[int, str], first: int, last: int) -> str | None:
    """The sections a chunk spans, in order, once each ("Tides | Tides › Spring tides");
    None for pages without one (PDFs)."""
    if not sections:
        return None
    labels = dict.fromkeys(sections[p] for p in range(first, last + 1) if p in sections)
    if not labels:
        return None
    label = " | ".join(labels)
    return label if len(label) <= 300 else label[:299] + "…"


def new_chunks(
    pages: list[checkpoints.Page], config: ChunkConfig, counter: TokenCounter
) -> list[checkpoints.NewChunk]:
    """The document's chunks: by its structure where its pages have a layout (a PDF's:
    :mod:`stages.text.structure`), else by paragraphs and headings of the text; each
    with its keyword vector (computed here, in any process, rather than by the index
    stage: :mod:`stages.text.keywords`)."""
    window = counter.window
    if any(p.layout is not None for p in pages):
        return [
            checkpoints.NewChunk(
                text=c.text,
                page_start=c.page_start,
                page_end=c.page_end,
                sha256=c.sha256,
                tokens=c.tokens,
                over_window=c.tokens > window,
                section=c.section,
                boxes=c.boxes or None,
                is_table=c.table,
                keywords=stored_vector(c.text, c.section),
            )
            for c in structured_chunks(pages, config, counter)
        ]
    sections = {p.page: p.section for p in pages if p.section}
    return [
        checkpoints.NewChunk(
            text=c.text,
            page_start=c.page_start,
            page_end=c.page_end,
            sha256=c.sha256,
            tokens=c.tokens,
            over_window=c.tokens > window,
            section=section,
            keywords=stored_vector(c.text, section),
        )
        for c in chunk_pages([(p.page, p.text) for p in pages], config, counter)
        for section in [section_label(sections, c.page_start, c.page_end)]
    ]


class ChunkStage:
    name = "chunk"

    def __init__(self, services: Services) -> None:
        self.services = services
        self._cpu: anyio.CapacityLimiter | None = None

    async def process(self, ctx: JobContext) -> list[checkpoints.NewChunk]:
        pages = await checkpoints.pages(ctx.pool, ctx.job.document_id)
        if not pages:
            raise MissingInput(f"{ctx.job.filename}: no parsed pages; run parse first")
        config = self.services.settings.chunk
        counter = self.services.token_counter
        # One document at a time in this process: the chunker is Python and holds the GIL,
        # so a second thread adds no speed, only a second long document's arrays at once
        # (the worker's peak RSS).
        if self._cpu is None:
            self._cpu = anyio.CapacityLimiter(1)
        out = await anyio.to_thread.run_sync(
            lambda: new_chunks(pages, config, counter), limiter=self._cpu
        )
        release_free_heap()  # the chunker's arrays of a long document
        window = counter.window
        over = sum(c.over_window for c in out)
        if over:
            log.warning(
                "%s: %d of %d chunks are longer than the %d-token window of %s "
                "(RAGLINE_CHUNK_TOKENS is above it); their tails will not be embedded",
                ctx.job.filename, over, len(out), window, counter.name,
            )  # fmt: skip
        ctx.note(pages=len(pages), chunks=len(out), tokens=sum(c.tokens or 0 for c in out))
        return out

    async def write(self, conn: DbConn, job: Job, output: list[checkpoints.NewChunk]) -> None:
        await checkpoints.replace_text_chunks(conn, job.document_id, job.generation, output)
        # Counted as they are written, in the job's completion (a lost lease counts none).
        CHUNKS.inc(len(output))
        OVER_WINDOW.inc(sum(c.over_window for c in output))
        for c in output:
            CHUNK_TOKENS.observe(c.tokens or 0)

    async def on_failed(self, job: Job) -> None:
        """Nothing outside PostgreSQL to undo."""
