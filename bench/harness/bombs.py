"""Format bombs, made at run time: small files that cost a reader far more than their size
(bench/bombs.py measures the parser on each; tests/unit/stages/parsing/test_bombs.py
and tests/integration/test_parse_limits.py run smaller ones through the parser process
and the pipeline), and how to watch a process read one (:class:`PeakWatch`,
:func:`chunk_in_child`).

Each maker writes one file and returns its path; ``mb`` is the size of what the file
unpacks to (the XML, XHTML or text), so a test makes the same bomb small. None of them is
damaged: each is a well-formed file of its format, only too large or too deep.
"""

# mypy: disallow-untyped-calls=False
# (PyMuPDF is only partly typed.)

from __future__ import annotations

import contextlib
import os
import signal
import struct
import subprocess
import sys
import threading
import zipfile
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pymupdf

from bench.harness.proccpu import process_cpu_s

__all__ = [
    "BOMBS",
    "TEXT_MAX_MB",
    "Bomb",
    "Chunked",
    "PeakWatch",
    "chunk_in_child",
    "docx_bomb",
    "epub_bomb",
    "html_nesting_bomb",
    "huge_png",
    "one_line_text",
    "xps_bomb",
]

_MB = 1 << 20
_POLL_S = 0.02
_REPO = Path(__file__).resolve().parents[2]
#: What a DOCX bomb repeats: a paragraph of one letter (34 bytes of XML each).
_DOCX_PARAGRAPH = b"<w:p><w:r><w:t>a</w:t></w:r></w:p>"
_W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
_WORDS = b"tide harbour lighthouse keeper lamp lens beacon reef shoal current swell gale "


def _repeated(unit: bytes, mb: float) -> Iterator[bytes]:
    """Whole copies of ``unit``, about ``mb`` megabytes of them, in blocks of about 1 MB."""
    per_block = max(1, _MB // len(unit))
    left = max(1, int(mb * _MB) // len(unit))
    while left > 0:
        n = min(left, per_block)
        left -= n
        yield unit * n


def _write_member(
    z: zipfile.ZipFile, name: str, head: bytes, body: Iterator[bytes], tail: bytes
) -> None:
    info = zipfile.ZipInfo(name)
    info.compress_type = zipfile.ZIP_DEFLATED
    with z.open(info, "w", force_zip64=True) as sink:
        sink.write(head)
        for block in body:
            sink.write(block)
        sink.write(tail)


def _zip(path: Path) -> zipfile.ZipFile:
    return zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=9)


def docx_bomb(path: Path, mb: float = 900) -> Path:
    """A DOCX whose ``word/document.xml`` is ``mb`` MB of one-letter paragraphs (900 MB
    zips to about 3 MB, under the 1 GiB unpacked-zip guard)."""
    with _zip(path) as z:
        z.writestr(
            "[Content_Types].xml",
            '<?xml version="1.0" encoding="UTF-8"?><Types xmlns="http://schemas.openxmlformats'
            '.org/package/2006/content-types"><Default Extension="rels" ContentType="applicati'
            'on/vnd.openxmlformats-package.relationships+xml"/><Default Extension="xml" Conten'
            'tType="application/xml"/><Override PartName="/word/document.xml" ContentType="app'
            "lication/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"
            '"/></Types>',
        )
        z.writestr(
            "_rels/.rels",
            '<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="http://schemas.openxm'
            'lformats.org/package/2006/relationships"><Relationship Id="rId1" Type="http://sch'
            "emas.openxmlformats.org/officeDocument/2006/relationships/officeDocument"
            '" Target="word/document.xml"/></Relationships>',
        )
        head = f'<?xml version="1.0" encoding="UTF-8"?><w:document xmlns:w="{_W}"><w:body>'
        _write_member(
            z,
            "word/document.xml",
            head.encode(),
            _repeated(_DOCX_PARAGRAPH, mb),
            b"</w:body></w:document>",
        )
    return path


def epub_bomb(path: Path, mb: float = 200) -> Path:
    """An EPUB whose one chapter is ``mb`` MB of one-letter paragraphs."""
    with _zip(path) as z:
        z.writestr(zipfile.ZipInfo("mimetype"), "application/epub+zip", zipfile.ZIP_STORED)
        z.writestr(
            "META-INF/container.xml",
            '<?xml version="1.0"?><container version="1.0" xmlns="urn:oasis:names:tc:opendocum'
            'ent:xmlns:container"><rootfiles><rootfile full-path="content.opf" media-type="app'
            'lication/oebps-package+xml"/></rootfiles></container>',
        )
        z.writestr(
            "content.opf",
            '<?xml version="1.0" encoding="utf-8"?><package xmlns="http://www.idpf.org/2007/op'
            'f" version="2.0" unique-identifier="id"><metadata xmlns:dc="http://purl.org/dc/el'
            'ements/1.1/"><dc:identifier id="id">urn:uuid:6f1c5a2e-0000-4000-8000-00000000b0mb'
            "</dc:identifier><dc:title>Bomb</dc:title><dc:language>en</dc:language></metadata>"
            '<manifest><item id="c1" href="c1.xhtml" media-type="application/xhtml+xml"/>'
            '</manifest><spine><itemref idref="c1"/></spine></package>',
        )
        _write_member(
            z,
            "c1.xhtml",
            b'<?xml version="1.0" encoding="utf-8"?><html xmlns="http://www.w3.org/1999/xhtml">'
            b"<head><title>Bomb</title></head><body>",
            _repeated(b"<p>a</p>", mb),
            b"</body></html>",
        )
    return path


def xps_bomb(path: Path, mb: float = 200) -> Path:
    """An XPS whose one page is ``mb`` MB of ``Glyphs``, a line of words each, the lines
    a thousand places down the page (text at one place is read once)."""
    with _zip(path) as z:
        z.writestr(
            "[Content_Types].xml",
            '<?xml version="1.0" encoding="utf-8"?><Types xmlns="http://schemas.openxmlformats'
            '.org/package/2006/content-types"><Default Extension="rels" ContentType="applicati'
            'on/vnd.openxmlformats-package.relationships+xml"/><Default Extension="fdseq" Cont'
            'entType="application/vnd.ms-package.xps-fixeddocumentsequence+xml"/><Default Exte'
            'nsion="fdoc" ContentType="application/vnd.ms-package.xps-fixeddocument+xml"/><Def'
            'ault Extension="fpage" ContentType="application/vnd.ms-package.xps-fixedpage+xml"'
            '/><Default Extension="otf" ContentType="application/vnd.ms-opentype"/></Types>',
        )
        z.writestr(
            "_rels/.rels",
            '<?xml version="1.0" encoding="utf-8"?><Relationships xmlns="http://schemas.openxm'
            'lformats.org/package/2006/relationships"><Relationship Type="http://schemas.micro'
            'soft.com/xps/2005/06/fixedrepresentation" Target="/s.fdseq" Id="R0"/>'
            "</Relationships>",
        )
        z.writestr(
            "s.fdseq",
            '<FixedDocumentSequence xmlns="http://schemas.microsoft.com/xps/2005/06">'
            '<DocumentReference Source="/d.fdoc"/></FixedDocumentSequence>',
        )
        z.writestr(
            "d.fdoc",
            '<FixedDocument xmlns="http://schemas.microsoft.com/xps/2005/06">'
            '<PageContent Source="/1.fpage"/></FixedDocument>',
        )
        _write_member(
            z,
            "1.fpage",
            b'<FixedPage xmlns="http://schemas.microsoft.com/xps/2005/06" Width="816" '
            b'Height="1056" xml:lang="en-US">',
            _repeated(_glyph_lines(), mb),
            b"</FixedPage>",
        )
        z.writestr("f.otf", pymupdf.Font("helv").buffer)
    return path


def _glyph_lines() -> bytes:
    words = _WORDS.decode().strip()
    return b"".join(
        f'<Glyphs Fill="#ff000000" FontUri="/f.otf" FontRenderingEmSize="1" OriginX="9" '
        f'OriginY="{9 + i}" UnicodeString="{words}"/>'.encode()
        for i in range(1000)
    )


def html_nesting_bomb(path: Path, depth: int = 100_000) -> Path:
    """An HTML page of ``depth`` nested ``<div>``s, none closed (an HTML5 parser checks
    the stack of open elements at each one: quadratic in the depth)."""
    path.write_text(
        "<!DOCTYPE html><html><head><title>Deep</title></head><body>" + "<div>x" * depth,
        encoding="utf-8",
    )
    return path


def one_line_text(path: Path, mb: float = 500) -> Path:
    """``mb`` MB of words on one line, no line break anywhere."""
    with path.open("wb") as sink:
        for block in _repeated(_WORDS, mb):
            sink.write(block)
    return path


def huge_png(path: Path, side: int = 50_000) -> Path:
    """A valid ``side`` x ``side`` PNG, one bit a pixel, all white (50,000 px a side: 2.5
    gigapixels in about 1 MB)."""
    row = b"\x00" + b"\xff" * ((side + 7) // 8)  # filter byte "none", then the row
    packer = zlib.compressobj(1)
    rows = row * 1000
    parts = [packer.compress(rows) for _ in range(side // 1000)]
    data = b"".join(parts) + packer.compress(row * (side % 1000)) + packer.flush()
    header = struct.pack(">IIBBBBB", side, side, 1, 0, 0, 0, 0)
    path.write_bytes(
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", header)
        + _chunk(b"IDAT", data)
        + _chunk(b"IEND", b"")
    )
    return path


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


class Bomb(msgspec.Struct, frozen=True):
    """A bomb kind: its file's name and media type, its maker and the maker's size."""

    name: str
    media_type: str
    maker: Callable[[Path, Any], Path]
    size: float | int | None = None

    def make(self, folder: Path, scale: float = 1.0) -> Path:
        path = folder / self.name
        if self.size is None:
            return self.maker(path, None)
        return self.maker(path, type(self.size)(self.size * scale))


_DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
#: Each bomb kind at full size; ``-max``: the largest the parser's part caps let through
#: (a DOCX part of 256 MB, an EPUB or XPS part of 32 MB); ``epub-slow``: a chapter of
#: tiny paragraphs MuPDF lays out into tens of thousands of pages, each drawn by walking
#: the whole chapter (minutes of CPU, little memory).
BOMBS = {
    "docx": Bomb("bomb.docx", _DOCX, docx_bomb, 900.0),
    "docx-max": Bomb("bomb-max.docx", _DOCX, docx_bomb, 255.0),
    "epub": Bomb("bomb.epub", "application/epub+zip", epub_bomb, 200.0),
    "epub-max": Bomb("bomb-max.epub", "application/epub+zip", epub_bomb, 31.0),
    "epub-slow": Bomb("bomb-slow.epub", "application/epub+zip", epub_bomb, 4.0),
    "xps": Bomb("bomb.xps", "application/vnd.ms-xpsdocument", xps_bomb, 200.0),
    "xps-max": Bomb("bomb-max.xps", "application/vnd.ms-xpsdocument", xps_bomb, 31.0),
    "html": Bomb("deep.html", "text/html", html_nesting_bomb, 100_000),
    "text": Bomb("one-line.txt", "text/plain", one_line_text, 500.0),
    "png": Bomb("huge.png", "image/png", lambda path, _: huge_png(path)),
}
#: The largest one-line text the default character limit lets through, in MB.
TEXT_MAX_MB = 49_000_000 / _MB


class PeakWatch:
    """Reads a process's peak RSS (``VmHWM``) and CPU every 20 ms from ``/proc`` until
    :meth:`stop`; kills it (SIGKILL) above ``ceiling_mb`` of RSS or ``ceiling_s`` of CPU,
    and says so in :attr:`stopped`. CPU counts from when the watch started."""

    def __init__(self, pid: int, ceiling_mb: float = 4096, ceiling_s: float = 300) -> None:
        self.pid = pid
        self.ceilings = (ceiling_mb, ceiling_s)
        self.start_cpu = process_cpu_s(pid)
        self.peak_mb = 0.0
        self.cpu_s = 0.0
        self.stopped = ""
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._done.wait(_POLL_S):
            try:
                self._poll()
            except (OSError, ValueError, KeyError):
                return  # the process has exited: the last reading stands

    def _poll(self) -> None:
        status = Path(f"/proc/{self.pid}/status").read_text()
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        self.peak_mb = int(fields["VmHWM"].split()[0]) / 1024
        rss_mb = int(fields["VmRSS"].split()[0]) / 1024
        self.cpu_s = process_cpu_s(self.pid) - self.start_cpu
        ceiling_mb, ceiling_s = self.ceilings
        if not self.stopped and (rss_mb > ceiling_mb or self.cpu_s > ceiling_s):
            self.stopped = f"stopped at {rss_mb:.0f} MB, {self.cpu_s:.0f} s CPU"
            os.kill(self.pid, signal.SIGKILL)

    def stop(self) -> None:
        with contextlib.suppress(OSError, ValueError, KeyError):
            self._poll()  # (an error: the process has exited, the last reading stands)
        self._done.set()
        self._thread.join()


#: What :func:`chunk_in_child` runs: the text file read as the parser reads it, then
#: chunked as the chunk stage chunks its pages. Only names both this tree and an older
#: one have. It prints its RSS high-water mark (``VmHWM``: its own since exec, unlike
#: ``ru_maxrss``, which keeps the parent's from before the exec) before and after (MB),
#: then the CPU seconds, the pages and the chunks.
_CHUNKER = """
import sys, time
from pathlib import Path
from stages.parsing.formats.detect import detect
from stages.parsing.formats.read import read_units
from stages.text.chunking import chunk_pages
from stages.text.tokens import token_counter_for
def hwm():
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
path, kind = Path(sys.argv[1]), sys.argv[2]
counter = token_counter_for(kind, None)
chunk_pages([(1, "A warm-up page of a few words.")], None, counter)
before = hwm()
started = time.process_time()
units = read_units(path, detect(path, path.name), path.name, (32, 1024, 10**7))
pages = [(u.page, u.text) for u in units]
chunks = chunk_pages(pages, None, counter)
print(before, hwm(), time.process_time() - started, len(pages), len(chunks))
"""


class Chunked(msgspec.Struct, frozen=True):
    """What :func:`chunk_in_child` saw: RSS growth while reading and chunking (MB), CPU
    seconds, pages and chunks; ``stopped`` if the ceiling ended it (then the rest is
    what was seen until then)."""

    grown_mb: float
    cpu_s: float
    pages: int
    chunks: int
    stopped: str = ""


def chunk_in_child(
    path: Path,
    counter: str,
    *,
    python: str = sys.executable,
    cwd: Path | None = None,
    ceiling_mb: float = 4096,
) -> Chunked:
    """Read and chunk ``path`` (plain text) in a child ``python`` (in ``cwd``: another
    tree), with the token counter of embedder ``counter`` (``local`` or ``cohere``)."""
    child = subprocess.Popen(
        [python, "-c", _CHUNKER, str(path), counter],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(cwd or _REPO)},
    )
    watch = PeakWatch(child.pid, ceiling_mb, ceiling_s=3600)
    out, err = child.communicate()
    watch.stop()
    if watch.stopped:
        return Chunked(watch.peak_mb, watch.cpu_s, 0, 0, watch.stopped)
    if child.returncode != 0:
        raise RuntimeError(f"the chunker failed ({child.returncode}): {err.decode()[-2000:]}")
    before, peak, cpu, pages, chunks = out.split()
    return Chunked(float(peak) - float(before), float(cpu), int(pages), int(chunks))
