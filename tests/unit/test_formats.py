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
from stages.pipeline.chunk import section_label
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


def test_a_chunk_names_each_section_it_spans_once() -> None:
    sections = {1: "A", 2: "A", 3: "A › B"}
    assert section_label(sections, 1, 3) == "A | A › B"
    assert section_label(sections, 3, 3) == "A › B"
    assert section_label({}, 1, 9) is None


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


def test_a_directory_walk_takes_documents_and_counts_what_it_leaves(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Files named as a format ragline reads go in (their content is checked at submit);
    a file without a suffix goes in when its content is a document format other than
    text; every other file is counted per suffix and said in one line, hidden ones
    aside."""
    from stages.cli.submit import expand, report_skipped

    root = tmp_path / "folder"
    (root / "sub").mkdir(parents=True)
    (root / ".git").mkdir()
    picture = MAKERS["png"](root / "picture.png")
    (root / "sub" / "report.md").write_text("# Report\n\nText.\n")
    scan = root / "sub" / "scan_001"
    scan.write_bytes(picture.read_bytes())  # a PNG without its suffix
    (root / "README").write_text("A text without a suffix is left out.\n")
    (root / "data.csv").write_text("a,b\n1,2\n")
    (root / "more.CSV").write_text("a,b\n3,4\n")
    (root / "notes.json").write_text('{"a": 1}')
    (root / ".DS_Store").write_bytes(b"\x00\x01")
    (root / ".git" / "config").write_text("[core]\n")
    (root / "gone.pdf").symlink_to(root / "nowhere.pdf")

    found = expand([str(root)])
    assert [p.relative_to(root).as_posix() for p in found.files] == [
        "picture.png",
        "sub/report.md",
        "sub/scan_001",
    ]
    assert [r.reason for r in found.refused] == ["symbolic link to a file that does not exist"]
    assert found.skipped == {"": 1, ".csv": 2, ".json": 1}

    report_skipped(found.skipped)
    [line] = capsys.readouterr().err.splitlines()
    assert line == (
        "skipped 4 file(s) in the directories given, named as no type ragline reads "
        "(no suffix 1, .csv 2, .json 1); name a file on its own to have its content checked"
    )
    report_skipped({})
    assert capsys.readouterr().err == ""
    # Named on its own, a file is taken as it is and its content decides at submit.
    assert expand([str(root / "data.csv")]).files == [root / "data.csv"]
