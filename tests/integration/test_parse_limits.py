"""The parser's box through the pipeline: format bombs made at test time each fail at parse
in one line naming the document and the limit, at the first attempt (no retries), and
the worker reads on; and the largest text the parser lets through is chunked in memory
that grows with the text, not many times over.

The limits are lowered here (512 MB, 5 s, 5 million characters) so that small bombs
reach them; ``python -m bench.bombs`` runs full-size ones under the defaults.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.harness.bombs import (
    chunk_in_child,
    docx_bomb,
    epub_bomb,
    html_nesting_bomb,
    huge_png,
    one_line_text,
    xps_bomb,
)
from runtime.models import DocumentStatus, JobState
from tests.integration.conftest import OpenPipeline
from tests.support.pipeline_env import TimedCohere, copy_sample

pytestmark = pytest.mark.anyio

LIMITS = {
    "RAGLINE_PARSE_MEMORY_MB": "512",
    "RAGLINE_PARSE_CPU_S": "5",
    "RAGLINE_PARSE_MAX_CHARS": "5000000",
}


def bombs(folder: Path) -> dict[Path, str | tuple[str, ...]]:
    """Each bomb, and the one line its document must fail with (or one of those lines)."""
    return {
        # 60 MB of one-letter paragraphs: streamed, but longer than 5 s of CPU (and the
        # text limit, which it would reach later).
        docx_bomb(folder / "bomb.docx", 60): (
            "parse: bomb.docx: exceeded the 5 s CPU limit (RAGLINE_PARSE_CPU_S)"
        ),
        # MuPDF would hold this chapter in over a gigabyte: it reaches the memory limit
        # after ~4-5 s of CPU, so on a slower host the CPU limit may end it first (the
        # memory limit alone: tests/unit/stages/parsing/test_bombs.py, with 120 s of CPU).
        epub_bomb(folder / "bomb.epub", 16): (
            "parse: bomb.epub: exceeded the 512 MB memory limit (RAGLINE_PARSE_MEMORY_MB)",
            "parse: bomb.epub: exceeded the 5 s CPU limit (RAGLINE_PARSE_CPU_S)",
        ),
        xps_bomb(folder / "bomb.xps", 34): (
            "parse: bomb.xps: its part 1.fpage unpacks to 33.9 MB, more than the 32 MB an XPS "
            "part may have; refused as a possible zip bomb"
        ),
        html_nesting_bomb(folder / "deep.html", 10_001): (
            "parse: deep.html: HTML nested more than 10000 elements deep (no page needs "
            "that, and reading it would take minutes); not read"
        ),
        one_line_text(folder / "one-line.txt", 6): (
            "parse: one-line.txt: exceeded the 5,000,000 character text limit "
            "(RAGLINE_PARSE_MAX_CHARS)"
        ),
        huge_png(folder / "huge.png", 50_000): (
            "parse: huge.png: PNG of 50000x50000 px is over max_image_pixels=40000000; "
            "scale it down"
        ),
    }


async def test_bombs_fail_at_parse_in_one_line_once_and_the_worker_reads_on(
    cohere_pipeline: OpenPipeline, tmp_path: Path, fake_cohere: TimedCohere
) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    expected = bombs(folder)
    after = copy_sample("lighthouses.pdf", folder / "lighthouses.pdf")
    async with cohere_pipeline(fake_cohere, **LIMITS) as env:
        ids = await env.submit_all([*expected, after])
        await env.run(timeout_s=240)
        for doc_id, (path, line) in zip(ids, expected.items(), strict=False):
            doc = await env.doc(doc_id)
            lines = line if isinstance(line, tuple) else (line,)
            assert doc.status == DocumentStatus.FAILED, path.name
            assert doc.error in lines, (path.name, doc.error)
            [job] = await env.stage_jobs(doc_id)
            assert (job.stage, job.state, job.attempts) == ("parse", JobState.FAILED, 1)
        last = await env.doc(ids[-1])
        assert last.status == DocumentStatus.READY, last.error
        await env.assert_indexed(ids[-1])


@pytest.mark.parametrize("counter", ["local", "cohere"])
def test_the_largest_text_let_through_is_chunked_in_memory_that_grows_with_it(
    tmp_path: Path, counter: str
) -> None:
    """24 MB on one line, read as the parser reads it and chunked as the chunk stage
    chunks its pages: the pages and the chunks' copies of them, not a multiple of the
    text in arrays (the chunker took 16 times the text on one long line)."""
    path = one_line_text(tmp_path / "one-line.txt", 24)
    size_mb = path.stat().st_size / 2**20
    seen = chunk_in_child(path, counter, ceiling_mb=3072)
    assert not seen.stopped, seen.stopped
    assert seen.chunks > 0
    assert seen.grown_mb < 3 * size_mb + 100, (seen.grown_mb, size_mb)
