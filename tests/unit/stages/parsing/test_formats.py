"""Detection from content and the readers of formats without pages (no database)."""

from __future__ import annotations

import importlib
import zipfile
from pathlib import Path

import pytest

from runtime.errors import InvalidDocument
from stages.parsing.formats import detect
from stages.parsing.formats.detect import detect_bytes
from stages.parsing.formats.html import decode_html, html_sections
from stages.parsing.formats.mupdf import BATCH_PAGES
from stages.parsing.formats.read import read_units
from stages.parsing.formats.text import (
    TEXT_SECTION_CHARS,
    decode_text,
    markdown_sections,
    text_sections,
)
from tests.made_formats import FORMAT_NAMES, MAKERS, damaged, make_epub


@pytest.mark.parametrize("suffix", list(MAKERS))
def test_each_format_is_detected_from_its_content(suffix: str, tmp_path: Path) -> None:
    path = MAKERS[suffix](tmp_path / f"x.{suffix}")
    assert detect(path, path.name).name == FORMAT_NAMES[suffix]
    # The content decides, not the name (Markdown and text look alike: the suffix picks).
    if suffix not in ("md", "txt"):
        renamed = path.rename(tmp_path / "no-suffix")
        assert detect(renamed, "no-suffix").name == FORMAT_NAMES[suffix]


@pytest.mark.parametrize("suffix", list(MAKERS))
def test_a_damaged_file_is_still_detected_as_its_format(suffix: str, tmp_path: Path) -> None:
    """So it fails at parse, naming itself, rather than being refused as unknown."""
    path = MAKERS[suffix](tmp_path / f"x.{suffix}")
    bad = tmp_path / f"bad.{suffix}"
    bad.write_bytes(damaged(path, suffix))
    assert detect(bad, bad.name).name == FORMAT_NAMES[suffix]


def test_text_that_starts_like_a_bitmap_is_text_and_a_bad_picture_names_its_format(
    tmp_path: Path,
) -> None:
    """ "BM" starts a BMP and many texts: the rest of a bitmap's header decides."""
    notes = tmp_path / "notes"
    notes.write_text("BMW service manual: change the oil every 15,000 km.\n" * 20)
    assert detect(notes, notes.name).name == "text"
    for suffix, reason in [
        ("gif", "no GIF signature"),
        ("bmp", "no BMP header"),
        ("jp2", "no JPEG 2000 signature"),
    ]:
        fake = tmp_path / f"scan.{suffix}"
        fake.write_bytes(bytes(range(1, 200)) * 4)
        with pytest.raises(InvalidDocument) as caught:
            detect(fake, fake.name)
        expected = f"not a {FORMAT_NAMES[suffix]} ({reason}), nor another type ragline reads"
        assert caught.value.message == f"scan.{suffix}: {expected}"


def test_a_webp_picture_is_refused_with_what_ragline_reads(tmp_path: Path) -> None:
    """PyMuPDF opens no WebP: refused at submit, naming the formats that are read."""
    from PIL import Image as PILImage

    path = tmp_path / "photo.webp"
    PILImage.new("RGB", (64, 48), "teal").save(path, format="WEBP")
    with pytest.raises(InvalidDocument) as caught:
        detect(path, path.name)
    assert caught.value.message.startswith("photo.webp: not a type ragline reads (it reads PDF,")
    assert "GIF, BMP, JPEG 2000" in caught.value.message


def test_a_truncated_epub_is_known_by_its_first_member_whatever_its_name(
    tmp_path: Path,
) -> None:
    path = MAKERS["epub"](tmp_path / "book.epub")
    bad = tmp_path / "book.bin"
    bad.write_bytes(path.read_bytes()[:200])
    assert detect(bad, bad.name).name == "EPUB"


def test_zip_containers_that_unpack_too_far_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = MAKERS["docx"](tmp_path / "x.docx")
    # (The package exports the function under the module's name.)
    module = importlib.import_module("stages.parsing.formats.detect")
    monkeypatch.setattr(module, "MAX_UNZIPPED_BYTES", 10_000)
    with pytest.raises(InvalidDocument, match=r"^x\.docx: zip container unpacks to more than"):
        detect(path, path.name)


def test_an_unknown_zip_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "code.zip"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("a.py", "print(1)\n")
    with pytest.raises(InvalidDocument, match=r"^code\.zip: not a type ragline reads"):
        detect(path, path.name)
    # Named as a zip format, it is not said to lack the zip container it has.
    named = path.rename(tmp_path / "letter.docx")
    with pytest.raises(InvalidDocument) as refused:
        detect(named, named.name)
    assert str(refused.value) == (
        "letter.docx: not a DOCX (a zip container of another kind), nor another type ragline reads"
    )


@pytest.mark.parametrize(
    ("head", "name", "expected"),
    [
        (b"%PDF-1.7\n", "a", "PDF"),
        (b"junk\n%PDF-1.4", "a.txt", "PDF"),  # content over suffix
        (b"<!-- generated --><!DOCTYPE html><p>hi", "page", "HTML"),
        (b'<?xml version="1.0"?>\n<!DOCTYPE html>\n<html xmlns="x">', "a.xhtml", "HTML"),
        (b'<?xml version="1.0"?><svg xmlns="http://www.w3.org/2000/svg"/>', "a", "SVG"),
        (b'<?xml version="1.0"?><FictionBook xmlns="x"/>', "a", "FB2"),
        (b"# Title\n\nBody", "notes.md", "Markdown"),
        (b"# Title\n\nBody", "notes", "text"),
        ("\ufeffUTF-16 text".encode("utf-16"), "a", "text"),
        ("Grüße aus Köln, schöne Straße".encode("cp1252") * 20, "a", "text"),
    ],
)
def test_detect_bytes(head: bytes, name: str, expected: str) -> None:
    assert detect_bytes(head, name).name == expected


@pytest.mark.parametrize(
    ("head", "name", "message"),
    [
        (b"", "a.pdf", "a.pdf: empty file (0 bytes)"),
        (b"\x00\x01\x02\x03" * 64, "blob", "blob: not a type ragline reads"),
        (b"\x00\x01\x02\x03" * 64, "x.pdf", "x.pdf: not a PDF (no %PDF- header), nor another"),
        (b"meeting notes\n" * 9, "notes.pdf", "notes.pdf: not a PDF (no %PDF- header): its"),
        (b'<?xml version="1.0"?><rss/>', "feed.xml", "feed.xml: not a type ragline reads"),
    ],
)
def test_refusals_are_one_line(head: bytes, name: str, message: str) -> None:
    with pytest.raises(InvalidDocument) as caught:
        detect_bytes(head, name)
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)


def test_markdown_sections_follow_its_headings_not_hashes_in_code() -> None:
    text = "Intro.\n\n# A\n\none\n\n```\n# code\n```\n\n## B\n\ntwo\n\n# C\nthree\n"
    sections = markdown_sections(text)
    assert [s.label for s in sections] == ["lines 1–2", "A", "A › B", "C"]
    assert "".join(s.text for s in sections) == text  # verbatim slices, nothing lost


def test_text_sections_are_line_ranges_of_bounded_size() -> None:
    paragraph = "word " * 60 + "\n\n"
    text = paragraph * 100
    sections = text_sections(text)
    assert len(sections) > 1
    assert "".join(s.text for s in sections) == text
    assert all(len(s.text) < TEXT_SECTION_CHARS + len(paragraph) for s in sections)
    assert sections[0].label is not None and sections[0].label.startswith("lines 1–")
    assert all(s.text.endswith("\n\n") for s in sections[:-1])  # cut at blank lines


def test_html_sections_drop_scripts_and_keep_structure() -> None:
    page = (
        "<html><head><title>T</title><script>hidden()</script></head><body>"
        "<nav>Menu</nav><h1>One <em>big</em></h1><p>a  b<br>c</p><pre>x\n  y</pre>"
        "<h2>Two</h2><ul><li>i</li><li>ii</li></ul><h1>Three</h1><p>z</p>"
        "<style>p{}</style></body></html>"
    )
    sections = html_sections(page)
    assert [s.label for s in sections] == ["T", "One big", "One big › Two", "Three"]
    assert sections[1].text == "One big\n\na b\nc\n\nx\n  y"
    assert sections[2].text == "Two\n\ni\n\nii"
    assert all("hidden" not in s.text and "p{}" not in s.text for s in sections)


def test_html_reads_what_stands_in_for_pictures_where_it_stands() -> None:
    page = (
        "<p>The harbour<img src='map.png' alt='Map of Tyre harbour'>at dawn"
        "<input type=image alt='Enlarge'><input type=text value='typed'></p>"
        "<figure><svg><style>.t{}</style><title>Grain prices</title>"
        "<g><text>Wheat <tspan>rose</tspan></text></g><text>Barley fell</text></svg></figure>"
        "<p>Area <math alttext='pi r squared'><mi>π</mi></math> or "
        "<math><mi>a</mi><mo>=</mo><mi>b</mi></math></p>"
    )
    [section] = html_sections(page)
    assert section.text == (
        "The harbour Map of Tyre harbour at dawn Enlarge\n\n"
        "Grain prices Wheat rose Barley fell\n\n"
        "Area pi r squared or a = b"
    )


def test_decoding_believes_boms_and_meta_charset_and_refuses_damage() -> None:
    assert decode_text("\ufeffhé".encode("utf-16-le"), "a") == "hé"
    assert decode_html(b'<meta charset="iso-8859-15"><p>\xa4', "a").endswith("€")
    with pytest.raises(InvalidDocument, match=r"^a\.txt: damaged text: invalid utf-8 at byte"):
        decode_text(b"ok " * 30_000 + b"\xff\xfe", "a.txt")
    with pytest.raises(InvalidDocument, match=r"^a\.txt: damaged text: binary data"):
        decode_text(b"ok\x00ok", "a.txt")


def test_a_book_longer_than_a_batch_keeps_every_page_and_its_chapter(tmp_path: Path) -> None:
    """Pages are converted BATCH_PAGES at a time (PyMuPDF's own convert_to_pdf fails for a
    range that does not start at page 0): every page must come through, numbered."""
    count = BATCH_PAGES + 8
    chapters = [(f"Chapter {n}", f"Unique words of chapter number {n}.") for n in range(count)]
    path = make_epub(tmp_path / "long.epub", chapters)
    units = list(read_units(path, detect(path, path.name), path.name, (32, 1024, 10**7)))
    assert [u.page for u in units] == list(range(1, len(units) + 1))
    assert len(units) >= count
    for n in (0, BATCH_PAGES + 5, count - 1):
        [unit] = [u for u in units if f"chapter number {n}." in u.text]
        assert unit.section == f"Chapter {n}"


def test_a_picture_over_max_image_pixels_is_refused_before_decoding(tmp_path: Path) -> None:
    path = MAKERS["png"](tmp_path / "scan.png")  # 1040 x 220 px
    fmt = detect(path, path.name)
    with pytest.raises(InvalidDocument, match=r"^scan\.png: PNG of 1040x220 px is over"):
        list(read_units(path, fmt, path.name, (32, 1024, 100_000)))
    assert len(list(read_units(path, fmt, path.name, (32, 1024, 300_000)))) == 1
