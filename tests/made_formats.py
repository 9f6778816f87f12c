"""Real files of every format beyond PDF, made at test time (where each comes from is in
docs/formats.md):

- by a library: DOCX (python-docx), PNG and JPEG (PyMuPDF renders a page), TIFF, GIF,
  BMP and JPEG 2000 (Pillow re-encodes that PNG), SVG (PyMuPDF's ``Page.get_svg_image``);
- by hand, to each format's specification, with ``zipfile`` or plain bytes: EPUB (OCF
  container, OPF package, NCX table of contents, XHTML chapters), XPS (a FixedDocument
  package whose Glyphs use a font from PyMuPDF's own), CBZ (a zip of PNG pages), FB2
  (FictionBook XML), MOBI (a Palm database with a PalmDOC/MOBI header and uncompressed
  HTML text records), Markdown, HTML and plain text.

No library on PyPI here writes XPS, FB2 or MOBI; PyMuPDF reads all three, and every file
made here is opened by PyMuPDF (or python-docx) in the tests, not only by ragline's code.
"""

# PyMuPDF's API is only partly typed.
# mypy: disallow-untyped-calls=False

from __future__ import annotations

import html
import io
import struct
import zipfile
from collections.abc import Callable
from pathlib import Path

import docx
import pymupdf
from PIL import Image as PILImage

#: One distinct topic per format: a search for the topic must find that file.
TOPICS: dict[str, tuple[str, str]] = {
    # suffix: (heading, a paragraph on the topic)
    "xps": ("Beekeeping", "Honeybees build wax combs and the beekeeper smokes the hive."),
    "epub": ("Volcanoes", "Magma rises through the crust and erupts as lava from the crater."),
    "mobi": ("Chess openings", "The Sicilian Defence answers the king's pawn with c5."),
    "fb2": ("Whales", "Humpback whales sing long songs while migrating through the ocean."),
    "md": ("Tides", "The moon's gravity raises the ocean twice a day in high tides."),
    "txt": ("Knitting", "Knit and purl stitches with wool yarn make a ribbed scarf."),
    "html": ("Coffee roasting", "Green coffee beans crack and darken in the roasting drum."),
    "docx": ("Glaciers", "A glacier carves a valley as compacted snow turns to flowing ice."),
}
#: Pictures: words OCR reads back (large, plain, dark on white), one line per page.
PICTURE_WORDS: dict[str, tuple[str, ...]] = {
    "png": ("SAILBOAT REGATTA",),
    "jpeg": ("CACTUS DESERT",),
    "tiff": ("TRAIN STATION",),
    "gif": ("HARBOR LIGHTHOUSE",),
    "bmp": ("WINDMILL FARM",),
    "jp2": ("CASTLE TOWER",),
    "svg": ("ORCHESTRA VIOLIN",),
    "epub": ("LAVA FOUNTAIN",),  # a figure in the book's first chapter
    "cbz": ("COMIC PANEL", "SPACESHIP LANDING"),
}

#: The format name detection gives each made file, by its suffix.
FORMAT_NAMES = {
    "xps": "XPS",
    "epub": "EPUB",
    "mobi": "MOBI",
    "fb2": "FB2",
    "cbz": "CBZ",
    "svg": "SVG",
    "png": "PNG",
    "jpeg": "JPEG",
    "tiff": "TIFF",
    "gif": "GIF",
    "bmp": "BMP",
    "jp2": "JPEG 2000",
    "md": "Markdown",
    "txt": "text",
    "html": "HTML",
    "docx": "DOCX",
}


def picture_png(words: str, *, width: int = 520, height: int = 110) -> bytes:
    """PNG of ``words`` in large dark type (PyMuPDF renders a page)."""
    doc = pymupdf.open()
    page = doc.new_page(width=width, height=height)
    page.insert_text((16, height * 0.62), words, fontsize=36, fontname="helv")
    return bytes(page.get_pixmap(dpi=144).tobytes("png"))


def make_png(path: Path) -> Path:
    path.write_bytes(picture_png(PICTURE_WORDS["png"][0]))
    return path


def make_jpeg(path: Path) -> Path:
    doc = pymupdf.open("png", picture_png(PICTURE_WORDS["jpeg"][0]))
    path.write_bytes(doc[0].get_pixmap(dpi=144).tobytes("jpeg"))
    return path


def _reencoded(path: Path, suffix: str, pillow_format: str) -> Path:
    """The words' PNG saved by Pillow in another picture format."""
    with PILImage.open(io.BytesIO(picture_png(PICTURE_WORDS[suffix][0]))) as img:
        img.save(path, format=pillow_format)
    return path


def make_tiff(path: Path) -> Path:
    return _reencoded(path, "tiff", "TIFF")


def make_gif(path: Path) -> Path:
    return _reencoded(path, "gif", "GIF")


def make_bmp(path: Path) -> Path:
    return _reencoded(path, "bmp", "BMP")


def make_jp2(path: Path) -> Path:
    return _reencoded(path, "jp2", "JPEG2000")


def make_svg(path: Path) -> Path:
    doc = pymupdf.open()
    page = doc.new_page(width=520, height=110)
    page.insert_text((16, 68), PICTURE_WORDS["svg"][0], fontsize=36, fontname="helv")
    path.write_text(page.get_svg_image(text_as_path=True))  # a drawing: no text to extract
    return path


def make_cbz(path: Path) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        for n, words in enumerate(PICTURE_WORDS["cbz"], 1):
            z.writestr(f"{n:03}.png", picture_png(words))
    return path


def _chapter(title: str, body: str, picture: str | None = None) -> str:
    img = f'<p><img src="{picture}" alt="figure"/></p>' if picture else ""
    return (
        '<?xml version="1.0" encoding="utf-8"?>\n'
        '<html xmlns="http://www.w3.org/1999/xhtml"><head><title>'
        f"{html.escape(title)}</title></head><body><h1>{html.escape(title)}</h1>"
        f"<p>{html.escape(body)}</p>{img}</body></html>"
    )


def make_epub(path: Path, chapters: list[tuple[str, str]] | None = None) -> Path:
    """EPUB 2 by hand: the OCF ``mimetype`` first and stored, container.xml, an OPF with
    the chapters (title, text) in its spine (by default two, the first with a PNG figure),
    and an NCX table of contents naming them."""
    heading, body = TOPICS["epub"]
    figure = chapters is None
    if chapters is None:
        chapters = [(heading, body), ("Calderas", "A caldera forms when a magma chamber empties.")]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(zipfile.ZipInfo("mimetype"), "application/epub+zip", zipfile.ZIP_STORED)
        z.writestr(
            "META-INF/container.xml",
            '<?xml version="1.0"?><container version="1.0" '
            'xmlns="urn:oasis:names:tc:opendocument:xmlns:container"><rootfiles>'
            '<rootfile full-path="OEBPS/content.opf" '
            'media-type="application/oebps-package+xml"/></rootfiles></container>',
        )
        items = "".join(
            f'<item id="c{n}" href="c{n}.xhtml" media-type="application/xhtml+xml"/>'
            for n in range(1, len(chapters) + 1)
        )
        if figure:
            items += '<item id="fig" href="figure.png" media-type="image/png"/>'
            z.writestr("OEBPS/figure.png", picture_png(PICTURE_WORDS["epub"][0]))
        spine = "".join(f'<itemref idref="c{n}"/>' for n in range(1, len(chapters) + 1))
        z.writestr(
            "OEBPS/content.opf",
            '<?xml version="1.0" encoding="utf-8"?><package xmlns="http://www.idpf.org/2007/opf"'
            ' version="2.0" unique-identifier="id"><metadata '
            'xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:identifier id="id">urn:uuid:'
            "6f1c5a2e-0000-4000-8000-000000000001</dc:identifier><dc:title>Volcanoes</dc:title>"
            '<dc:language>en</dc:language></metadata><manifest><item id="ncx" href="toc.ncx" '
            f'media-type="application/x-dtbncx+xml"/>{items}</manifest>'
            f'<spine toc="ncx">{spine}</spine></package>',
        )
        points = "".join(
            f'<navPoint id="n{n}" playOrder="{n}"><navLabel><text>{html.escape(t)}</text>'
            f'</navLabel><content src="c{n}.xhtml"/></navPoint>'
            for n, (t, _) in enumerate(chapters, 1)
        )
        z.writestr(
            "OEBPS/toc.ncx",
            '<?xml version="1.0" encoding="utf-8"?><ncx xmlns="http://www.daisy.org/z3986/2005/ncx/"'
            ' version="2005-1"><head/><docTitle><text>Volcanoes</text></docTitle>'
            f"<navMap>{points}</navMap></ncx>",
        )
        for n, (title, text) in enumerate(chapters, 1):
            picture = "figure.png" if figure and n == 1 else None
            z.writestr(f"OEBPS/c{n}.xhtml", _chapter(title, text, picture))
    return path


def make_xps(path: Path) -> Path:
    """XPS by hand: the package's content types and start part, a FixedDocumentSequence,
    one FixedDocument with one FixedPage whose Glyphs draw the text in a font taken from
    PyMuPDF (Nimbus Sans, a CFF font MuPDF loads)."""
    heading, body = TOPICS["xps"]
    glyphs = "".join(
        f'<Glyphs Fill="#ff000000" FontUri="/Resources/font.otf" FontRenderingEmSize="14" '
        f'OriginX="96" OriginY="{y}" UnicodeString="{html.escape(text, quote=True)}"/>'
        for y, text in ((96, heading), (130, body))
    )
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(
            "[Content_Types].xml",
            '<?xml version="1.0" encoding="utf-8"?><Types '
            'xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
            '<Default Extension="rels" '
            'ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
            '<Default Extension="fdseq" '
            'ContentType="application/vnd.ms-package.xps-fixeddocumentsequence+xml"/>'
            '<Default Extension="fdoc" '
            'ContentType="application/vnd.ms-package.xps-fixeddocument+xml"/>'
            '<Default Extension="fpage" '
            'ContentType="application/vnd.ms-package.xps-fixedpage+xml"/>'
            '<Default Extension="otf" ContentType="application/vnd.ms-opentype"/></Types>',
        )
        z.writestr(
            "_rels/.rels",
            '<?xml version="1.0" encoding="utf-8"?><Relationships '
            'xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
            '<Relationship Type="http://schemas.microsoft.com/xps/2005/06/fixedrepresentation" '
            'Target="/FixedDocSeq.fdseq" Id="R0"/></Relationships>',
        )
        z.writestr(
            "FixedDocSeq.fdseq",
            '<FixedDocumentSequence xmlns="http://schemas.microsoft.com/xps/2005/06">'
            '<DocumentReference Source="/Documents/1/FixedDoc.fdoc"/></FixedDocumentSequence>',
        )
        z.writestr(
            "Documents/1/FixedDoc.fdoc",
            '<FixedDocument xmlns="http://schemas.microsoft.com/xps/2005/06">'
            '<PageContent Source="/Documents/1/Pages/1.fpage"/></FixedDocument>',
        )
        z.writestr(
            "Documents/1/Pages/1.fpage",
            '<FixedPage xmlns="http://schemas.microsoft.com/xps/2005/06" Width="816" '
            f'Height="1056" xml:lang="en-US">{glyphs}</FixedPage>',
        )
        z.writestr("Resources/font.otf", pymupdf.Font("helv").buffer)
    return path


#: The formats that are one UTF-8 text: a template filled with the format's topic.
UTF8_TEMPLATES = {
    "fb2": (
        '<?xml version="1.0" encoding="utf-8"?>\n'
        '<FictionBook xmlns="http://www.gribuser.ru/xml/fictionbook/2.0">'
        "<description><title-info><book-title>{heading}</book-title></title-info>"
        "</description><body><section><title><p>{heading}</p></title><p>{body}</p>"
        "</section></body></FictionBook>"
    ),
    "md": (
        "Notes on the sea.\n\n# {heading}\n\n{body}\n\n```\n# a comment, not a heading\n```\n\n"
        "## Spring tides\n\nWhen sun and moon align the range is largest.\n"
    ),
    "html": (
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>Roastery</title>"
        "<style>p{{color:red}}</style><script>var hidden = 'never indexed';</script></head>"
        "<body><p>Welcome.</p><h1>{heading}</h1><p>{body}</p><h2>First crack</h2>"
        "<p>At about 196 °C the beans pop audibly.</p></body></html>"
    ),
}


def make_utf8(path: Path, suffix: str) -> Path:
    """The format ``suffix`` of :data:`UTF8_TEMPLATES`, about its topic."""
    heading, body = TOPICS[suffix]
    path.write_text(UTF8_TEMPLATES[suffix].format(heading=heading, body=body), encoding="utf-8")
    return path


def make_fb2(path: Path) -> Path:
    return make_utf8(path, "fb2")


def make_mobi(path: Path) -> Path:
    """MOBI by hand: a Palm database (type BOOK, creator MOBI) whose record 0 holds a
    PalmDOC header (no compression) and a MOBI header (UTF-8), followed by the book's HTML
    in text records of at most 4096 bytes."""
    heading, body = TOPICS["mobi"]
    text = f"<html><body><h1>{heading}</h1><p>{html.escape(body)}</p></body></html>".encode()
    records = [text[i : i + 4096] for i in range(0, len(text), 4096)]
    palmdoc = struct.pack(">HHIHHHH", 1, 0, len(text), len(records), 4096, 0, 0)
    mobi = bytearray(232)
    mobi[0:4] = b"MOBI"
    struct.pack_into(">III", mobi, 4, len(mobi), 2, 65001)  # length, type book, UTF-8
    all_records = [palmdoc + bytes(mobi), *records]
    header = bytearray(78)
    header[0:14] = b"chess-openings"
    header[60:68] = b"BOOKMOBI"
    struct.pack_into(">H", header, 76, len(all_records))
    offset = 78 + 8 * len(all_records) + 2
    table = b""
    for n, record in enumerate(all_records):
        table += struct.pack(">II", offset, n * 2)
        offset += len(record)
    path.write_bytes(bytes(header) + table + b"\0\0" + b"".join(all_records))
    return path


def make_markdown(path: Path) -> Path:
    return make_utf8(path, "md")


def make_text(path: Path) -> Path:
    """Plain text in Windows-1252 (charset-normalizer has to find the encoding)."""
    heading, body = TOPICS["txt"]
    text = f"{heading}\r\n\r\n{body} Café-style naïve patterns, façade of cables.\r\n"
    path.write_bytes(text.encode("cp1252"))
    return path


def make_html(path: Path) -> Path:
    return make_utf8(path, "html")


def make_docx(path: Path) -> Path:
    heading, body = TOPICS["docx"]
    document = docx.Document()
    document.add_heading(heading, 1)
    document.add_paragraph(body)
    document.add_heading("Moraines", 2)
    table = document.add_table(rows=1, cols=2)
    table.cell(0, 0).text = "terminal moraine"
    table.cell(0, 1).text = "rock debris at the glacier's snout"
    document.add_picture(io.BytesIO(picture_png("ICEBERG CALVING")))
    document.save(str(path))
    return path


MAKERS: dict[str, Callable[[Path], Path]] = {
    "xps": make_xps,
    "epub": make_epub,
    "mobi": make_mobi,
    "fb2": make_fb2,
    "cbz": make_cbz,
    "svg": make_svg,
    "png": make_png,
    "jpeg": make_jpeg,
    "tiff": make_tiff,
    "gif": make_gif,
    "bmp": make_bmp,
    "jp2": make_jp2,
    "md": make_markdown,
    "txt": make_text,
    "html": make_html,
    "docx": make_docx,
}


def make_all(folder: Path) -> dict[str, Path]:
    """One file of each format in ``folder``, by suffix."""
    return {suffix: make(folder / f"sample.{suffix}") for suffix, make in MAKERS.items()}


def damaged(path: Path, suffix: str) -> bytes:
    """The file's bytes damaged the way real files are: truncated (zip containers, XML,
    pictures, books), or valid text followed, past detection's first 64 KiB, by bytes
    that are not in its encoding (an overwritten tail)."""
    data = path.read_bytes()
    if suffix in ("md", "txt", "html"):
        filler = b"A line of perfectly ordinary text, repeated.\n" * 1600  # ~70 KB
        if suffix == "html":
            return data.replace(b"<body>", b"<body><p>" + filler) + b"\xff\xfe\xc3\x28" * 64
        return filler + data + b"\xff\xfe\xc3\x28" * 64
    if suffix in ("jpeg", "bmp"):
        # libjpeg and MuPDF's BMP decoder read what half a picture holds; a header they cannot
        return data[:64]
    return data[: len(data) // 2]
