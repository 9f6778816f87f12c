"""stages.parsing.formats.pdf: validation of broken inputs, page text, image extraction and memory.

In-memory PDFs are built with PyMuPDF in each test; the samples are the committed ones
under samples/; corpus tests use real PDFs from tests/corpus/fetch.sh and skip without it.
"""

# mypy: disallow-untyped-calls=False

from __future__ import annotations

import json
import logging
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import pymupdf
import pytest

import stages.parsing.formats.pdf
from runtime.errors import InvalidDocument, MissingInput
from stages.parsing.formats.pdf import PageText, iter_pages, open_pdf
from stages.parsing.formats.pdf_text import page_text, text_at, text_blocks
from stages.parsing.formats.unit import Image
from tests.made_formats import make_epub
from tests.support.corpus import big_pdf, broken_pdfs, corpus_pdfs

ROOT = Path(__file__).resolve().parents[4]
SAMPLES = ROOT / "samples"
# PyMuPDF's type hints miss some of its constants.
AES_256: int = pymupdf.PDF_ENCRYPT_AES_256  # type: ignore[attr-defined]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
JPEG_MAGIC = b"\xff\xd8"


def noisy_png(width: int, height: int, seed: int) -> bytes:
    """A PNG that does not compress away (random pixels), so it passes the byte threshold."""
    samples = random.Random(seed).randbytes(width * height * 3)
    return bytes(pymupdf.Pixmap(pymupdf.csRGB, width, height, samples, 0).tobytes("png"))


def pdf_bytes(pages: list[str]) -> bytes:
    doc = pymupdf.open()
    for text in pages:
        doc.new_page().insert_text((72, 72), text, fontsize=12)
    return bytes(doc.tobytes())


def zero_page_pdf() -> bytes:
    """A well-formed PDF whose page tree is empty (PyMuPDF refuses to save one)."""
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [] /Count 0 >>"]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 3\n0000000000 65535 f \n"
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size 3 /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % xref
    return bytes(out)


def truncated_pdf() -> bytes:
    """The first half of a PDF whose objects all sit in an object stream at its end, so
    MuPDF's repair finds no page at all."""
    doc = pymupdf.open(SAMPLES / "lighthouses.pdf")
    data = bytes(doc.tobytes(use_objstms=1, garbage=3, deflate=True))
    return data[: len(data) // 2]


def encrypted_pdf() -> bytes:
    doc = pymupdf.open(stream=pdf_bytes(["secret plans"]), filetype="pdf")
    return bytes(doc.tobytes(encryption=AES_256, user_pw="u-pass", owner_pw="o-pass"))


BROKEN: dict[str, tuple[bytes, str]] = {
    "zero-byte": (b"", "empty file"),
    "not-a-pdf": (b"Quarterly notes, saved as text.\n" * 20, "not a PDF"),
    "garbage": (random.Random(7).randbytes(4096), "not a PDF"),
    "corrupt": (b"%PDF-1.7\n" + random.Random(8).randbytes(4096), "corrupt PDF"),
    "encrypted": (b"", "password-protected"),
    "truncated": (b"", "damaged PDF"),
    "no-pages": (b"", "no pages"),
}
_BUILDERS = {"encrypted": encrypted_pdf, "truncated": truncated_pdf, "no-pages": zero_page_pdf}


@pytest.mark.parametrize("kind", sorted(BROKEN))
def test_broken_bytes_raise_invalid_document_naming_the_file(kind: str) -> None:
    data, reason = BROKEN[kind]
    data = _BUILDERS[kind]() if kind in _BUILDERS else data
    name = f"report {kind}.pdf"
    with pytest.raises(InvalidDocument) as info:
        open_pdf(data, name=name)
    message = str(info.value)
    assert message.startswith(f"{name}: ")
    assert reason in message
    assert "\n" not in message


@pytest.mark.parametrize("kind", ["zero-byte", "not-a-pdf", "corrupt", "encrypted", "truncated"])
def test_broken_files_on_disk_raise_invalid_document(tmp_path: Path, kind: str) -> None:
    data, reason = BROKEN[kind]
    path = tmp_path / "upload.pdf"
    path.write_bytes(_BUILDERS[kind]() if kind in _BUILDERS else data)
    with pytest.raises(InvalidDocument, match=f"^upload.pdf: .*{reason}"):
        open_pdf(path, name="upload.pdf")


def test_missing_file_is_missing_input(tmp_path: Path) -> None:
    with pytest.raises(MissingInput, match=r"^gone\.pdf: file not found"):
        open_pdf(tmp_path / "gone.pdf", name="gone.pdf")


def test_unreadable_path_is_invalid_document(tmp_path: Path) -> None:
    with pytest.raises(InvalidDocument, match=r"^dir\.pdf: cannot be read"):
        open_pdf(tmp_path, name="dir.pdf")


def test_header_after_leading_junk_is_accepted() -> None:
    doc = open_pdf(b"junk before header\n" + pdf_bytes(["hello"]), name="junk.pdf")
    assert doc.page_count == 1


def test_encrypted_with_empty_user_password_opens() -> None:
    plain = pymupdf.open(stream=pdf_bytes(["open to all"]), filetype="pdf")
    data = plain.tobytes(encryption=AES_256, owner_pw="owner", user_pw="")
    doc = open_pdf(data, name="restricted.pdf")
    [(page, _)] = list(iter_pages(doc))
    assert "open to all" in page.text


def test_the_outline_is_not_loaded() -> None:
    """PyMuPDF resolves every bookmark on open; ragline never reads them
    (stages.parsing.formats.pdf)."""
    doc = pymupdf.open(stream=pdf_bytes(["intro", "body"]), filetype="pdf")
    doc.set_toc([[1, "Intro", 1], [1, "Body", 2]])
    data = bytes(doc.tobytes())
    assert pymupdf.open(stream=data, filetype="pdf").outline is not None
    opened = open_pdf(data, name="toc.pdf")
    assert opened.outline is None
    assert [text.text for text, _ in iter_pages(opened)] == ["intro", "body"]


def test_text_of_every_page_in_order() -> None:
    doc = open_pdf(pdf_bytes(["alpha page", "beta page", "gamma page"]), name="t.pdf")
    pages = [text for text, _ in iter_pages(doc)]
    assert [p.page for p in pages] == [1, 2, 3]
    for page, word in zip(pages, ["alpha", "beta", "gamma"], strict=True):
        assert page.text == f"{word} page"


def test_after_the_last_page_all_free_heap_goes_back(monkeypatch: pytest.MonkeyPatch) -> None:
    # The parser process idles beside the worker's models between documents: it keeps
    # none of its free heap (a worker keeps 64 MB for its next job).
    kept: list[int] = []

    def release(keep: int) -> bool:
        kept.append(keep)
        return True

    monkeypatch.setattr(stages.parsing.formats.pdf, "release_free_heap", release)
    doc = open_pdf(pdf_bytes(["alpha page", "beta page"]), name="t.pdf")
    pages = iter_pages(doc)
    next(pages)
    assert kept == []
    assert list(pages) and kept == [0]


def test_an_unreadable_page_is_left_out_and_the_rest_parsed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    doc = pymupdf.open(stream=pdf_bytes(["first page", "second page"]), filetype="pdf")
    # 100,000 nested graphics states: MuPDF gives up on this page's content.
    doc.update_stream(doc[0].get_contents()[0], b"q " * 100_000)
    opened = open_pdf(bytes(doc.tobytes()), name="deep.pdf")
    with caplog.at_level(logging.WARNING, logger="stages.parsing.formats.pdf"):
        texts = [text.text for text, _ in iter_pages(opened)]
    assert texts == ["", "second page"]
    assert "page 1 text cannot be read" in caplog.text


def test_page_text_keeps_no_block_in_memory() -> None:
    """PyMuPDF 2.0 leaks every block tuple of ``extractBLOCKS`` (and its text with it);
    ``page_text`` gives those references back, so reading a page again and again holds
    nothing more (before: 6 objects per block per read)."""
    doc = open_pdf(pdf_bytes(["first block\nsecond line"] * 2), name="leak.pdf")
    page = doc.load_page(0)
    assert page_text(page) == "first block\nsecond line"
    before = sys.getallocatedblocks()
    for _ in range(300):
        page_text(page)
    assert sys.getallocatedblocks() - before < 100


def test_text_blocks_are_held_by_their_list_alone() -> None:
    doc = open_pdf(pdf_bytes(["one page"]), name="refs.pdf")
    blocks = text_blocks(doc.load_page(0))
    # The list's reference and the argument's: no leaked one, none taken too many.
    assert [sys.getrefcount(blocks[i]) for i in range(len(blocks))] == [2] * len(blocks)
    assert blocks[0][4] == "one page\n"


def test_text_at_reads_what_the_public_path_reads(tmp_path: Path) -> None:
    """``text_at`` skips PyMuPDF's Page object; the text must not change: plain and
    rotated PDF pages, a page with a NUL glyph mapping, and a non-PDF document (EPUB)."""
    doc = pymupdf.open()
    for rotation in (0, 90, 180, 270):
        page = doc.new_page()
        page.insert_text((72, 72), "first line of a paragraph\nsecond line of it")
        page.insert_text((320, 72), "right column")
        page.insert_text((72, 400), "lower block")
        page.set_rotation(rotation)
    doc.new_page().insert_text((72, 72), "nul\x00here")
    opened = open_pdf(bytes(doc.tobytes()), name="rotated.pdf")
    epub = pymupdf.open(make_epub(tmp_path / "book.epub"))
    for d in (opened, epub):
        public = [page_text(d.load_page(n)) for n in range(d.page_count)]
        assert [text_at(d, n) for n in range(d.page_count)] == public
        assert any(public)
    # Read as if unrotated: the same blocks in the same order at every rotation.
    blocks = "first line of a paragraph\nsecond line of it\n\nright column\n\nlower block"
    assert [text_at(opened, n) for n in range(4)] == [blocks] * 4


def test_text_off_the_page_is_not_read() -> None:
    """Text wholly off the page (below it, left of it, outside its crop box) is left out
    without MuPDF's mediabox clip, which page_text does not ask for; a line running past
    the edge keeps the part on the page. Plain and rotated pages, both paths."""
    doc = pymupdf.open()
    for rotation in (0, 90):
        page = doc.new_page(width=300, height=400)
        page.insert_text((72, 72), "on the page")
        page.insert_text((250, 120), "overfull line runs past the edge")
        page.insert_text((72, 300), "outside the crop box")
        page.insert_text((72, 520), "below the page")
        page.insert_text((-200, 150), "left of it")
        page.set_cropbox(pymupdf.Rect(0, 0, 300, 200))
        page.set_rotation(rotation)
    opened = open_pdf(bytes(doc.tobytes()), name="offpage.pdf")
    kept = "on the page\n\noverfull line"
    assert [text_at(opened, n) for n in range(2)] == [kept] * 2
    assert [page_text(opened.load_page(n)) for n in range(2)] == [kept] * 2


def test_text_at_keeps_no_block_in_memory() -> None:
    doc = open_pdf(pdf_bytes(["first block\nsecond line"] * 2), name="leak.pdf")
    assert text_at(doc, 0) == "first block\nsecond line"
    before = sys.getallocatedblocks()
    for _ in range(300):
        text_at(doc, 0)
    assert sys.getallocatedblocks() - before < 100


def test_ligatures_are_expanded() -> None:
    doc = pymupdf.open()
    page = doc.new_page()
    # HTML layout shapes "ffi"/"fi" into ligature glyphs, as TeX and word processors do.
    page.insert_htmlbox(pymupdf.Rect(72, 72, 400, 200), "<p>efficient fish</p>")
    assert "\ufb03" in page.get_text()
    [(text, _)] = list(iter_pages(open_pdf(bytes(doc.tobytes()), name="lig.pdf")))
    assert text.text == "efficient fish"


def images_pdf() -> bytes:
    """Page 1: photo A, a 16x16 icon and a 400x2 rule; page 2: photo A again (same xref)
    and photo B; page 3: a copy of photo B under another xref."""
    photo_a, photo_b = noisy_png(200, 150, 1), noisy_png(160, 120, 2)
    first = pymupdf.open()
    page = first.new_page()
    page.insert_text((72, 72), "page one")
    xref_a = page.insert_image(pymupdf.Rect(72, 100, 272, 250), stream=photo_a)
    page.insert_image(pymupdf.Rect(72, 300, 88, 316), stream=noisy_png(16, 16, 3))
    page.insert_image(pymupdf.Rect(72, 400, 472, 402), stream=noisy_png(400, 2, 4))
    page = first.new_page()
    page.insert_image(pymupdf.Rect(72, 100, 272, 250), xref=xref_a)
    page.insert_image(pymupdf.Rect(72, 300, 232, 420), stream=photo_b)
    # insert_image reuses the xref of identical bytes within a document; a page from
    # another document brings its own xref for the same bytes.
    other = pymupdf.open()
    other.new_page().insert_image(pymupdf.Rect(72, 100, 232, 220), stream=photo_b)
    first.insert_pdf(other)
    return bytes(first.tobytes())


def test_images_deduplicated_by_xref_and_content_and_tiny_ones_skipped() -> None:
    doc = open_pdf(images_pdf(), name="images.pdf")
    xrefs = [len({i[0] for i in page.get_images(full=True)}) for page in doc.pages()]
    assert xrefs == [3, 2, 1]  # the document really repeats images
    by_page = [images for _, images in iter_pages(doc)]
    assert [[(i.width, i.height) for i in images] for images in by_page] == [
        [(200, 150)],
        [(160, 120)],
        [],
    ]
    for image in (i for images in by_page for i in images):
        assert image.data.startswith(PNG_MAGIC)
        assert image.media_type == "image/png"


def test_image_thresholds_are_configurable() -> None:
    doc = open_pdf(images_pdf(), name="images.pdf")
    found = iter_pages(doc, min_image_px=1, min_image_bytes=0)
    sizes = {(i.width, i.height) for _, images in found for i in images}
    assert (16, 16) in sizes
    assert (400, 2) in sizes
    doc = open_pdf(images_pdf(), name="images.pdf")
    none = [ims for _, ims in iter_pages(doc, min_image_bytes=10**9)]
    assert none == [[], [], []]


def test_declared_gigapixel_image_skipped_without_decoding(
    caplog: pytest.LogCaptureFixture,
) -> None:
    doc = pymupdf.open()
    page = doc.new_page()
    xref = page.insert_image(pymupdf.Rect(72, 72, 272, 222), stream=noisy_png(200, 150, 5))
    # A stream that claims 60,000 x 60,000 pixels: decoding it would need ~10 GB.
    doc.xref_set_key(xref, "Width", "60000")
    doc.xref_set_key(xref, "Height", "60000")
    opened = open_pdf(bytes(doc.tobytes()), name="bomb.pdf")
    with caplog.at_level(logging.WARNING, logger="stages.parsing.formats.pdf"):
        [(_, images)] = list(iter_pages(opened))
    assert images == []
    assert "60000x60000" in caplog.text


def test_cmyk_jpeg_is_converted_to_png() -> None:
    rgb = pymupdf.Pixmap(noisy_png(120, 90, 6))
    cmyk = pymupdf.Pixmap(pymupdf.csCMYK, pymupdf.Pixmap(noisy_png(120, 90, 7)))
    doc = pymupdf.open()
    page = doc.new_page()
    page.insert_image(pymupdf.Rect(72, 72, 192, 162), stream=cmyk.tobytes("jpeg"))
    page.insert_image(pymupdf.Rect(72, 200, 192, 290), stream=rgb.tobytes("jpeg"))
    [(_, images)] = list(iter_pages(open_pdf(bytes(doc.tobytes()), name="cmyk.pdf")))
    kinds = sorted((i.ext, i.data[:2]) for i in images)
    assert kinds == [("jpeg", JPEG_MAGIC), ("png", PNG_MAGIC[:2])]


def test_trimming_the_cache_does_not_change_output() -> None:
    data = images_pdf()
    plain = list(iter_pages(open_pdf(data, name="a.pdf")))
    trimmed = list(iter_pages(open_pdf(data, name="a.pdf"), trim_cache_every_pages=1))
    assert plain == trimmed


def test_decoded_images_over_the_budget_empty_the_store(monkeypatch: pytest.MonkeyPatch) -> None:
    data = images_pdf()
    plain = list(iter_pages(open_pdf(data, name="a.pdf")))
    pages: list[tuple[PageText, list[Image]]] = []
    emptied_after: list[int] = []
    monkeypatch.setattr(stages.parsing.formats.pdf, "DECODED_IMAGES_BUDGET", 200 * 150 * 4 - 1)
    monkeypatch.setattr(pymupdf.TOOLS, "store_shrink", lambda _: emptied_after.append(len(pages)))
    for page in iter_pages(open_pdf(data, name="a.pdf")):
        pages.append(page)
    assert pages == plain
    # Photo A (200x150) is over the budget alone, photo B (160x120) twice (its copy on
    # page 3 under another xref is decoded too); then the last page.
    assert emptied_after == [0, 2, 3]


@pytest.mark.parametrize("stem", ["lighthouses", "sourdough", "rust-borrow-checker"])
def test_samples_have_text_headings_and_one_figure_and_one_logo(stem: str) -> None:
    doc = open_pdf(SAMPLES / f"{stem}.pdf", name=f"{stem}.pdf")
    results = list(iter_pages(doc))
    texts: list[PageText] = [text for text, _ in results]
    images: list[Image] = [i for _, ims in results for i in ims]
    assert len(texts) >= 2
    assert all(t.text.strip() for t in texts[:2])
    assert doc.metadata is not None
    assert doc.metadata["title"] in texts[0].text
    # The logo is on every page but comes out once; the figure is the large one.
    assert sorted((i.width, i.height) for i in images) == [(96, 96), (734, 459)]
    assert len({i.sha256 for i in images}) == 2


def test_samples_stay_small() -> None:
    total = sum(p.stat().st_size for p in SAMPLES.glob("*.pdf"))
    assert 0 < total < 200_000


@pytest.mark.corpus
def test_corpus_broken_variants() -> None:
    expected = {
        "truncated": "damaged PDF",
        "zero-byte": "empty file",
        "encrypted": "password-protected",
        "not-a-pdf": "not a PDF",
        "garbage": "not a PDF",
        "corrupt": "corrupt PDF",
    }
    for kind, path in broken_pdfs().items():
        with pytest.raises(InvalidDocument) as info:
            open_pdf(path, name=path.name)
        assert str(info.value).startswith(f"{path.name}: ")
        assert expected[kind] in str(info.value)


@pytest.mark.corpus
@pytest.mark.timeout(300)
def test_corpus_every_pdf_parses() -> None:
    """Every real PDF opens and yields text and valid, distinct images (first 8 pages each,
    to stay fast; the image-heavy manuals in full)."""
    pdfs = corpus_pdfs(min_count=60)
    pages = with_text = images = 0
    for path in pdfs:
        doc = open_pdf(path, name=path.name)
        limit = doc.page_count if "expeyes" in path.name else 8
        hashes: set[str] = set()
        for text, found in iter_pages(doc):
            pages += 1
            with_text += bool(text.text.strip())
            for image in found:
                assert image.data.startswith((PNG_MAGIC, JPEG_MAGIC)), path.name
                assert image.sha256 not in hashes
                hashes.add(image.sha256)
            images += len(found)
            if text.page >= limit:
                break
        doc.close()
    assert pages > 1500
    assert with_text / pages > 0.95
    assert images > 150


_RSS_PROBE = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    from stages.parsing.formats.pdf import iter_pages, open_pdf

    def peak_mb():
        # VmHWM, not ru_maxrss: Linux carries ru_maxrss over from the parent (pytest).
        status = Path("/proc/self/status").read_text()
        return int(status.split("VmHWM:")[1].split()[0]) // 1024

    rss = {}
    doc = open_pdf(sys.argv[1], name="big.pdf")
    for text, _ in iter_pages(doc):
        if text.page in (1000, 2000):
            rss[text.page] = peak_mb()
    print(json.dumps(rss))
    """
)


@pytest.mark.corpus
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_memory_levels_off_on_a_2000_page_pdf() -> None:
    """Peak RSS (MB) after 1,000 pages and after 2,000: the second thousand adds little."""
    path = big_pdf()
    out = subprocess.run(
        [sys.executable, "-c", _RSS_PROBE, str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=280,
    )
    rss = {int(k): v for k, v in json.loads(out.stdout).items()}
    assert rss[2000] - rss[1000] < 64, rss
    assert rss[2000] < 600, rss


def test_importing_the_pipeline_keeps_pymupdfs_layout_analyser_out() -> None:
    # PyMuPDF 2.0 would load onnxruntime layout models in every worker (see stages/__init__).
    probe = textwrap.dedent(
        """
        import sys
        import stages.parsing.formats.pdf, pymupdf
        doc = pymupdf.open()
        doc.new_page().insert_text((72, 72), "still works")
        print(sys.modules.get("pymupdf.layout") is None, pymupdf._get_layout is None,
              "still works" in doc[0].get_text())
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["True", "True", "True"], out.stderr
