"""The parser process: a real child running PyMuPDF, spoken to over its socket."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pymupdf as _pymupdf
import pytest

from runtime.errors import InvalidDocument
from stages.parsing.formats.pdf import iter_pages, open_pdf
from stages.parsing.formats.unit import Unit
from stages.parsing.process import ParserDied, ParserProcess
from stages.parsing.wire import ParseRequest
from tests.support.pdfs import write_truncated_pdf

pymupdf: Any = _pymupdf
SAMPLES = Path(__file__).resolve().parents[4] / "samples"


def request(path: Path, media_type: str = "application/pdf") -> ParseRequest:
    return ParseRequest(
        path=str(path),
        filename=path.name,
        media_type=media_type,
        min_image_px=1,
        min_image_bytes=0,
        max_image_pixels=10**8,
        trim_cache_every_pages=0,
    )


@pytest.fixture
def parser() -> Iterator[ParserProcess]:
    process = ParserProcess()
    yield process
    process.close()


def child_pid(parser: ParserProcess) -> int:
    assert parser._proc is not None
    return parser._proc.pid


def read(parser: ParserProcess, path: Path, media_type: str = "application/pdf") -> list[Unit]:
    units: list[Unit] = []
    parser.parse(request(path, media_type), units.append)
    return units


def long_pdf(path: Path, pages: int = 300) -> Path:
    """Enough text that the parser cannot send it all before the worker reads any."""
    doc = pymupdf.open()
    for i in range(pages):
        doc.new_page().insert_textbox(
            pymupdf.Rect(36, 36, 560, 800), f"page {i + 1} " + "lorem ipsum dolor " * 150
        )
    doc.save(str(path))
    doc.close()
    return path


def test_a_pdf_reads_the_same_as_in_the_worker(parser: ParserProcess) -> None:
    path = SAMPLES / "lighthouses.pdf"
    units = read(parser, path)
    doc: Any = open_pdf(str(path), name=path.name)
    expected = [(t.page, t.text, [i.sha256 for i in ims]) for t, ims in iter_pages(doc)]
    doc.close()
    assert [(u.page, u.text, [i.sha256 for i in u.images]) for u in units] == expected
    assert any(u.images for u in units)
    assert all(u.section is None for u in units)


def test_a_format_without_pages_comes_back_in_sections(parser: ParserProcess) -> None:
    units = read(parser, SAMPLES / "tides.md", "text/markdown")
    assert len(units) > 1
    assert all(u.section for u in units)


def test_a_corrupt_file_fails_with_its_own_error_and_the_parser_stays(
    parser: ParserProcess, tmp_path: Path
) -> None:
    broken = write_truncated_pdf(tmp_path / "broken.pdf")
    with pytest.raises(InvalidDocument, match=r"^broken\.pdf: ") as raised:
        read(parser, broken)
    assert "\n" not in str(raised.value)
    pid = child_pid(parser)
    assert read(parser, SAMPLES / "sourdough.pdf")
    assert child_pid(parser) == pid


def test_a_parser_killed_mid_document_fails_that_document_and_the_next_gets_a_new_one(
    parser: ParserProcess, tmp_path: Path
) -> None:
    path = long_pdf(tmp_path / "long.pdf")
    parser.start()
    pid = child_pid(parser)
    seen: list[int] = []

    def take(unit: Unit) -> None:
        if not seen:
            os.kill(pid, signal.SIGKILL)
        seen.append(unit.page)

    with pytest.raises(ParserDied, match=r"^long\.pdf: the parser process was killed by SIGKILL"):
        parser.parse(request(path), take)
    assert 0 < len(seen) < 300
    assert read(parser, SAMPLES / "sourdough.pdf")
    assert child_pid(parser) != pid


def test_a_failure_in_the_worker_mid_document_stops_that_parser(
    parser: ParserProcess, tmp_path: Path
) -> None:
    path = long_pdf(tmp_path / "long.pdf")
    parser.start()
    first = parser._proc
    assert first is not None

    def take(unit: Unit) -> None:
        raise OSError("the asset store is full")

    with pytest.raises(OSError, match="asset store is full"):
        parser.parse(request(path), take)
    assert first.poll() is not None  # not left parsing for nobody
    assert len(read(parser, path)) == 300


def test_the_parsers_log_records_are_logged_by_the_worker(
    parser: ParserProcess, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    doc = pymupdf.open()
    page = doc.new_page()
    pix = pymupdf.Pixmap(pymupdf.csRGB, pymupdf.IRect(0, 0, 64, 48), False)
    xref = page.insert_image(pymupdf.Rect(72, 72, 272, 222), stream=pix.tobytes("png"))
    doc.xref_set_key(xref, "Width", "60000")
    doc.xref_set_key(xref, "Height", "60000")
    doc.save(str(tmp_path / "bomb.pdf"))
    with caplog.at_level(logging.WARNING, logger="stages.parsing.formats.pdf"):
        units = read(parser, tmp_path / "bomb.pdf")
    assert [u.images for u in units] == [[]]
    [record] = [r for r in caplog.records if "60000x60000" in r.getMessage()]
    assert record.name == "stages.parsing.formats.pdf"
    assert record.levelno == logging.WARNING


def test_closing_ends_the_parser(parser: ParserProcess) -> None:
    parser.start()
    proc = parser._proc
    assert proc is not None
    parser.close()
    assert proc.returncode == 0


def test_a_file_error_is_the_documents_not_the_parsers(
    parser: ParserProcess, tmp_path: Path
) -> None:
    # An OSError while reading the document (here: its file is gone) is that document's
    # failure, one line naming it; the parser does not take it for its socket.
    parser.start()
    pid = child_pid(parser)
    with pytest.raises(RuntimeError, match=r"^FileNotFoundError: .*gone\.md") as raised:
        read(parser, tmp_path / "gone.md", "text/markdown")
    assert not isinstance(raised.value, ParserDied)
    assert child_pid(parser) == pid


def test_a_started_parser_says_it_is_ready_and_then_reads(parser: ParserProcess) -> None:
    parser.wait_ready()
    assert parser.pid is not None
    parser.wait_ready()  # once ready, at once
    assert [u.page for u in read(parser, SAMPLES / "lighthouses.pdf")][:1] == [1]


def wait_for(condition: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_an_idle_parser_stops_and_the_next_document_starts_another() -> None:
    # Between batches of documents it would hold its imports and heap beside the models.
    parser = ParserProcess(idle_stop_s=0.3)
    try:
        parser.wait_ready()
        first = parser._proc
        assert first is not None
        assert wait_for(lambda: first.poll() is not None)
        assert first.returncode == 0 and parser.pid is None
        assert read(parser, SAMPLES / "sourdough.pdf")
        second = parser._proc
        assert second is not None and second.pid != first.pid
        assert wait_for(lambda: second.poll() is not None)  # idle again after it
    finally:
        parser.close()


def test_a_parser_given_documents_within_the_idle_time_keeps_running(tmp_path: Path) -> None:
    parser = ParserProcess(idle_stop_s=1.5)
    try:
        parser.wait_ready()
        pid = child_pid(parser)
        for _ in range(4):
            time.sleep(0.5)  # 2 s in all, each wait under the idle time
            assert read(parser, SAMPLES / "sourdough.pdf")
        assert child_pid(parser) == pid
    finally:
        parser.close()


def test_without_an_idle_time_the_parser_stays() -> None:
    parser = ParserProcess(idle_stop_s=None)
    try:
        parser.wait_ready()
        assert parser._idle_timer is None
    finally:
        parser.close()


def broken_pymupdf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Parsers started from now on find a PyMuPDF that cannot be imported (this process
    keeps the one it has)."""
    fake = tmp_path / "shadow" / "pymupdf"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('this PyMuPDF is broken')\n")
    monkeypatch.setenv("PYTHONPATH", str(fake.parent))


def test_a_parser_that_cannot_start_says_so_before_any_document(
    parser: ParserProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken_pymupdf(tmp_path, monkeypatch)
    with pytest.raises(ParserDied, match="exited with status 1 before it was ready"):
        parser.wait_ready()
    # A document sent to such a parser fails naming itself, not as a hang.
    with pytest.raises(ParserDied, match=r"^lighthouses\.pdf: the parser process exited"):
        read(parser, SAMPLES / "lighthouses.pdf")
    monkeypatch.delenv("PYTHONPATH")
    assert read(parser, SAMPLES / "lighthouses.pdf")  # the next start works again


def test_the_parser_starts_without_the_worker_and_its_database_driver() -> None:
    """``runtime.api`` imports names on first use: the parser process, which needs only
    the errors, does not load the worker, asyncpg or the CLI (0.1-0.2 s of its start)."""
    code = (
        "import sys, stages.parsing.child; "
        "print(sorted(m for m in ('runtime.worker.worker', 'asyncpg', 'runtime.cli.common') "
        "if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == "[]"
