"""Format bombs against the parser: each one refused in one line naming the file, or read
in bounded memory; through a real parser process where its limits are the point.

The bombs are made at test time (``bench.harness.bombs``), smaller than the full-size
ones ``python -m bench.bombs`` runs; the pipeline's side (a failed job, no retries, the
worker reading on) is tests/integration/test_parse_limits.py.
"""

from __future__ import annotations

import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.harness.bombs import (
    PeakWatch,
    docx_bomb,
    epub_bomb,
    html_nesting_bomb,
    huge_png,
    one_line_text,
    xps_bomb,
)
from runtime.errors import InvalidDocument
from stages.parsing.formats.detect import detect
from stages.parsing.formats.read import read_units
from stages.parsing.formats.unit import Unit
from stages.parsing.process import ParserProcess
from stages.parsing.wire import ParseRequest

LIMITS = (32, 1024, 40_000_000)
DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
#: The cap on HTML nesting (stages.parsing.formats.html.MAX_HTML_DEPTH), written out so
#: that this file runs against a tree without it.
HTML_DEPTH_CAP = 10_000


def request(path: Path, media_type: str, **limits: int) -> ParseRequest:
    return ParseRequest(
        path=str(path),
        filename=path.name,
        media_type=media_type,
        min_image_px=32,
        min_image_bytes=1024,
        max_image_pixels=40_000_000,
        trim_cache_every_pages=0,
        memory_mb=limits.get("memory_mb", 0),
        cpu_s=limits.get("cpu_s", 0),
        max_chars=limits.get("max_chars", 0),
    )


@pytest.fixture
def parser() -> Iterator[ParserProcess]:
    process = ParserProcess()
    yield process
    process.close()


def read(path: Path) -> list[Unit]:
    return list(read_units(path, detect(path, path.name), path.name, LIMITS))


def watched(parser: ParserProcess, req: ParseRequest) -> tuple[list[Unit], PeakWatch]:
    """The units the parser sends for ``req``, and its peak RSS and CPU meanwhile."""
    parser.wait_ready()
    assert parser.pid is not None
    watch = PeakWatch(parser.pid)
    units: list[Unit] = []
    try:
        parser.parse(req, units.append)
    finally:
        watch.stop()
    return units, watch


def refusal(parser: ParserProcess, req: ParseRequest) -> str:
    """The one-line message the parser fails ``req`` with."""
    with pytest.raises(InvalidDocument) as failed:
        parser.parse(req, lambda unit: None)
    message = str(failed.value)
    assert "\n" not in message and message.startswith(f"{Path(req.path).name}: "), message
    return message


def a_small_text(tmp_path: Path) -> Path:
    path = tmp_path / "after.txt"
    path.write_text("The lamp was lit at dusk.\n\nThe keeper slept at dawn.\n")
    return path


def test_a_50000_px_png_is_refused_with_the_size_it_declares(tmp_path: Path) -> None:
    path = huge_png(tmp_path / "huge.png", 50_000)
    with pytest.raises(InvalidDocument) as refused:
        read(path)
    assert str(refused.value).startswith(
        "huge.png: PNG of 50000x50000 px is over max_image_pixels=40000000"
    ), refused.value


@pytest.mark.parametrize(
    "level",
    [
        "<div>x",  # the bomb of the issue, unclosed
        "<div/>x",  # a slash does not close an HTML element
        "<div></span>x",  # nor does an end tag of an element not open
        '<div title="<>">x',  # nor a quoted ">" end the tag
        "<section><p>x",  # a paragraph does not nest, the section does
        "<ul><li>x",  # each list item is in the list before it
    ],
)
def test_html_nested_past_the_cap_is_refused_in_one_line_however_it_is_written(
    tmp_path: Path, level: str
) -> None:
    path = tmp_path / "deep.html"
    path.write_text("<!DOCTYPE html><html><body>" + level * (HTML_DEPTH_CAP + 1))
    with pytest.raises(InvalidDocument) as refused:
        read(path)
    message = str(refused.value)
    assert message.startswith(f"deep.html: HTML nested more than {HTML_DEPTH_CAP} elements deep")
    assert "\n" not in message


def test_the_depth_cap_counts_nesting_not_tags(tmp_path: Path) -> None:
    """Pages that only look deep are read; exactly at the cap is read, one more is not."""
    many = 3 * HTML_DEPTH_CAP
    shallow = {
        "siblings.html": "<div>closed</div>" * many,
        "paragraphs.html": "<p>unclosed paragraph" * many,
        "items.html": "<ul>" + "<li>unclosed item" * many + "</ul>",
        "drawing.html": "<p>A drawing</p><svg>" + '<path d="M0 0"/>' * many + "</svg>",
        "script.html": "<script>" + "if (a<b) x = '<div>';" * many + "</script><p>Text</p>",
        "comment.html": "<!-- " + "<div>" * many + " --><p>Text</p>",
        "at-cap.html": "<div>x" * HTML_DEPTH_CAP,
    }
    for name, body in shallow.items():
        path = tmp_path / name
        path.write_text(f"<!DOCTYPE html><html><head><title>T</title></head><body>{body}")
        assert read(path), name
    deeper = html_nesting_bomb(tmp_path / "deeper.html", HTML_DEPTH_CAP + 1)
    with pytest.raises(InvalidDocument, match="nested more than"):
        read(deeper)


def test_a_docx_of_tiny_paragraphs_streams_in_flat_memory(
    parser: ParserProcess, tmp_path: Path
) -> None:
    """30 MB of one-letter paragraphs (python-docx's tree of it took ~22 times that)."""
    path = docx_bomb(tmp_path / "bomb.docx", 30)
    units, watch = watched(parser, request(path, DOCX))
    paragraphs = sum(u.text.count("a") for u in units)
    assert paragraphs == 30 * 2**20 // 34  # each one read (34 bytes of XML each)
    assert max(len(u.text) for u in units) <= 64 * 1024 + 2
    assert watch.peak_mb < 250, watch.peak_mb  # it starts at about 70 MB


def test_a_docx_part_over_the_cap_is_refused_before_it_is_read(
    parser: ParserProcess, tmp_path: Path
) -> None:
    path = docx_bomb(tmp_path / "bomb.docx", 257)
    message = refusal(parser, request(path, DOCX, memory_mb=1024, cpu_s=120))
    assert message == (
        "bomb.docx: its part word/document.xml unpacks to 257.0 MB, more than the 256 MB a "
        "DOCX part may have (reading it would take minutes); refused as a possible zip bomb"
    )


@pytest.mark.parametrize(
    ("maker", "name", "media_type", "part"),
    [
        (epub_bomb, "bomb.epub", "application/epub+zip", "c1.xhtml"),
        (xps_bomb, "bomb.xps", "application/vnd.ms-xpsdocument", "1.fpage"),
    ],
)
def test_an_epub_or_xps_part_over_the_cap_is_refused_before_mupdf_reads_it(
    tmp_path: Path, maker: Any, name: str, media_type: str, part: str
) -> None:
    path = maker(tmp_path / name, 33)
    with zipfile.ZipFile(path) as archive:
        mb = archive.getinfo(part).file_size / 2**20
    assert mb > 32
    with pytest.raises(InvalidDocument) as refused:
        read(path)
    kind = name.rsplit(".", 1)[1].upper()
    assert str(refused.value) == (
        f"{name}: its part {part} unpacks to {mb:.1f} MB, more than the 32 MB an {kind} part may "
        "have; refused as a possible zip bomb"
    )


@pytest.mark.parametrize(
    ("maker", "name", "media_type"),
    [
        (epub_bomb, "bomb.epub", "application/epub+zip"),
        (xps_bomb, "bomb.xps", "application/vnd.ms-xpsdocument"),
    ],
)
def test_a_document_over_the_memory_limit_fails_in_one_line_and_the_next_gets_a_new_parser(
    parser: ParserProcess, tmp_path: Path, maker: Any, name: str, media_type: str
) -> None:
    """16 MB of markup, over the 512 MB cap in MuPDF (8 MB of XPS fits under it since
    the parser stopped importing NumPy: 97 MB of address space at start, not 214)."""
    path = maker(tmp_path / name, 16)
    parser.wait_ready()
    first = parser.pid
    req = request(path, media_type, memory_mb=512, cpu_s=120)
    assert first is not None
    watch = PeakWatch(first)
    message = refusal(parser, req)
    watch.stop()
    assert message == f"{name}: exceeded the 512 MB memory limit (RAGLINE_PARSE_MEMORY_MB)"
    assert watch.peak_mb <= 512, watch.peak_mb
    text = a_small_text(tmp_path)
    units, _ = watched(parser, request(text, "text/plain", memory_mb=512, cpu_s=120))
    assert "keeper slept" in units[0].text
    assert parser.pid not in (None, first)


def test_a_document_over_the_cpu_limit_fails_in_one_line_and_the_next_gets_a_new_parser(
    parser: ParserProcess, tmp_path: Path
) -> None:
    """A DOCX that takes seconds, under a one-second limit: the kernel's SIGXCPU."""
    path = docx_bomb(tmp_path / "bomb.docx", 20)
    parser.wait_ready()
    first = parser.pid
    message = refusal(parser, request(path, DOCX, memory_mb=1024, cpu_s=1))
    assert message == "bomb.docx: exceeded the 1 s CPU limit (RAGLINE_PARSE_CPU_S)"
    units, _ = watched(parser, request(a_small_text(tmp_path), "text/plain", cpu_s=1))
    assert "keeper slept" in units[0].text
    assert parser.pid not in (None, first)


def test_a_one_line_text_is_read_in_bounded_sections_in_flat_memory(
    parser: ParserProcess, tmp_path: Path
) -> None:
    path = one_line_text(tmp_path / "one-line.txt", 40)
    units, watch = watched(parser, request(path, "text/plain"))
    assert sum(len(u.text) for u in units) == path.stat().st_size
    assert max(len(u.text) for u in units) <= 64 * 1024
    assert watch.peak_mb < 120, watch.peak_mb  # it starts at about 70 MB; the file is 40


def test_text_over_the_character_limit_fails_in_one_line_and_the_parser_reads_on(
    parser: ParserProcess, tmp_path: Path
) -> None:
    path = one_line_text(tmp_path / "one-line.txt", 3)
    message = refusal(parser, request(path, "text/plain", max_chars=1_000_000))
    assert message == (
        "one-line.txt: exceeded the 1,000,000 character text limit (RAGLINE_PARSE_MAX_CHARS)"
    )
    units, _ = watched(parser, request(a_small_text(tmp_path), "text/plain", max_chars=100))
    assert "keeper slept" in units[0].text
