"""What a file is, from its bytes: magic numbers, zip container contents, the root element
of XML, HTML sniffing, and text by decoding. The extension only chooses between formats the
content cannot tell apart (Markdown or plain text) and names a damaged zip container whose
members cannot be listed.

:func:`detect` raises :class:`runtime.errors.InvalidDocument` with one line for an empty
file and for a type ragline does not read; a file of a known type that is damaged past its
first bytes is detected as that type and fails at parse, once, naming itself.
"""

from __future__ import annotations

import codecs
import re
import zipfile
from pathlib import Path

import msgspec

from runtime.api import InvalidDocument, one_line

__all__ = [
    "FORMATS",
    "HEAD_BYTES",
    "SUFFIXES",
    "TEXT_READERS",
    "Format",
    "by_media_type",
    "detect",
    "detect_bytes",
    "named_as_document",
]

#: Bytes read to decide (the text checks decode this much).
HEAD_BYTES = 64 * 1024
#: A zip container whose members unpack to more than this is refused (a zip bomb).
MAX_UNZIPPED_BYTES = 1 << 30


class Format(msgspec.Struct, frozen=True):
    """A readable format: its name (shown to users), media type, reader, usual suffixes."""

    name: str
    media_type: str
    #: "pdf", "mupdf" (PyMuPDF opens it), "text", "markdown", "html" or "docx"
    reader: str
    suffixes: tuple[str, ...]
    #: PyMuPDF's filetype for reader "mupdf".
    mupdf_type: str = ""


FORMATS: tuple[Format, ...] = (
    Format("PDF", "application/pdf", "pdf", (".pdf",)),
    Format("XPS", "application/vnd.ms-xpsdocument", "mupdf", (".xps", ".oxps"), "xps"),
    Format("EPUB", "application/epub+zip", "mupdf", (".epub",), "epub"),
    Format("MOBI", "application/x-mobipocket-ebook", "mupdf", (".mobi", ".azw", ".prc"), "mobi"),
    Format("FB2", "application/x-fictionbook+xml", "mupdf", (".fb2",), "fb2"),
    Format("CBZ", "application/vnd.comicbook+zip", "mupdf", (".cbz",), "cbz"),
    Format("SVG", "image/svg+xml", "mupdf", (".svg",), "svg"),
    Format("PNG", "image/png", "mupdf", (".png",), "png"),
    Format("JPEG", "image/jpeg", "mupdf", (".jpg", ".jpeg"), "jpeg"),
    Format("TIFF", "image/tiff", "mupdf", (".tif", ".tiff"), "tiff"),
    Format("GIF", "image/gif", "mupdf", (".gif",), "gif"),
    Format("BMP", "image/bmp", "mupdf", (".bmp", ".dib"), "bmp"),
    Format("JPEG 2000", "image/jp2", "mupdf", (".jp2", ".j2k", ".jpf", ".jpx"), "jpx"),
    Format("Markdown", "text/markdown", "markdown", (".md", ".markdown", ".mdown", ".mkd")),
    Format("HTML", "text/html", "html", (".html", ".htm", ".xhtml")),
    Format(
        "DOCX",
        "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
        "docx",
        (".docx",),
    ),
    Format("text", "text/plain", "text", (".txt", ".text", ".rst")),
)
_BY_NAME = {f.name: f for f in FORMATS}
_BY_MEDIA_TYPE = {f.media_type: f for f in FORMATS}
#: Suffixes a directory walk picks up (any file named on the command line is detected).
SUFFIXES = frozenset(s for f in FORMATS for s in f.suffixes)
_ZIP_FORMATS = ("EPUB", "DOCX", "XPS", "CBZ")
_IMAGE_MEMBER = re.compile(r"\.(png|jpe?g|gif|bmp|tiff?|webp|jxr)$", re.IGNORECASE)
_SUPPORTED = "PDF, " + ", ".join(f.name for f in FORMATS[1:])


def named_as_document(name: str) -> bool:
    """Whether ``name`` has the suffix of a format ragline reads: how a directory walk and
    a source's listing pick files (each is then detected from its content)."""
    return Path(name).suffix.lower() in SUFFIXES


def by_media_type(media_type: str) -> Format | None:
    return _BY_MEDIA_TYPE.get(media_type)


def detect(path: Path, name: str) -> Format:
    """The format of the file at ``path``; ``name`` is how messages refer to it.

    :raises InvalidDocument: empty, or not a type ragline reads (one line).
    """
    with path.open("rb") as f:
        head = f.read(1024)  # enough for every magic number: most files stop here
        if _magic(head) is None:
            head += f.read(HEAD_BYTES - len(head))
    return detect_bytes(head, name, path)


def detect_bytes(head: bytes, name: str, path: Path | None = None) -> Format:
    """:func:`detect` on the file's first bytes (``path``, when given, lets a zip
    container be listed)."""
    if not head:
        raise InvalidDocument(one_line(f"{name}: empty file (0 bytes)"))
    found = _magic(head) or _container(head, name, path) or _markup_or_text(head, name)
    claimed = _by_suffix(name, tuple(_BY_NAME))
    if found is None:
        if claimed is not None:
            raise InvalidDocument(
                one_line(f"{name}: {_not_a(claimed, head)}, nor another type ragline reads")
            )
        raise InvalidDocument(
            one_line(f"{name}: not a type ragline reads (it reads {_SUPPORTED}); convert it first")
        )
    if claimed is not None and claimed.reader not in TEXT_READERS and found.reader in TEXT_READERS:
        # A binary format's name on text: a damaged or mislabelled file, not a text to index.
        raise InvalidDocument(one_line(f"{name}: {_not_a(claimed)}: its content is {found.name}"))
    return found


#: The readers of text formats (plain text, Markdown, HTML).
TEXT_READERS = frozenset({"text", "markdown", "html"})
_SIGNATURES = {
    "PDF": "no %PDF- header",
    "PNG": "no PNG signature",
    "JPEG": "no JPEG SOI marker",
    "TIFF": "no TIFF header",
    "GIF": "no GIF signature",
    "BMP": "no BMP header",
    "JPEG 2000": "no JPEG 2000 signature",
    "MOBI": "no BOOKMOBI header",
}


def _not_a(fmt: Format, head: bytes = b"") -> str:
    signature = _SIGNATURES.get(fmt.name)
    if fmt.name in _ZIP_FORMATS:
        is_zip = head.startswith(b"PK\x03\x04")
        signature = "a zip container of another kind" if is_zip else "no zip container"
    return f"not a {fmt.name}" + (f" ({signature})" if signature else "")


def _magic(head: bytes) -> Format | None:
    # The PDF spec lets junk precede the header within the first KiB.
    if b"%PDF-" in head[:1024]:
        return _BY_NAME["PDF"]
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return _BY_NAME["PNG"]
    if head.startswith(b"\xff\xd8\xff"):
        return _BY_NAME["JPEG"]
    if head[:4] in (b"II*\x00", b"MM\x00*"):
        return _BY_NAME["TIFF"]
    if head[:6] in (b"GIF87a", b"GIF89a"):
        return _BY_NAME["GIF"]
    if head.startswith(_JP2) or head.startswith(b"\xff\x4f\xff\x51"):  # JP2 box, J2K codestream
        return _BY_NAME["JPEG 2000"]
    if _is_bmp(head):
        return _BY_NAME["BMP"]
    if head[60:68] == b"BOOKMOBI":  # a Palm database of type BOOK, creator MOBI
        return _BY_NAME["MOBI"]
    return None


_JP2 = b"\x00\x00\x00\x0cjP  \r\n\x87\n"
#: The sizes of the DIB headers Windows and OS/2 bitmaps use.
_DIB_SIZES = frozenset({12, 16, 40, 52, 56, 64, 108, 124})


def _is_bmp(head: bytes) -> bool:
    """A bitmap: ``BM`` (which starts many texts too), then zero reserved bytes and a known
    DIB header size after its 14-byte file header."""
    return (
        len(head) >= 18
        and head.startswith(b"BM")
        and head[6:10] == b"\x00\x00\x00\x00"
        and int.from_bytes(head[14:18], "little") in _DIB_SIZES
    )


def _container(head: bytes, name: str, path: Path | None) -> Format | None:
    if not head.startswith(b"PK\x03\x04"):
        return None
    members = _zip_members(path, name) if path is not None else None
    if members is not None:
        return _zip_kind(members, path)
    # The central directory (at the end) is unreadable: a truncated or damaged container.
    # The local headers at the start still name the first members.
    if head[30:58] == b"mimetypeapplication/epub+zip":
        return _BY_NAME["EPUB"]
    if b"word/" in head:
        return _BY_NAME["DOCX"]
    if b".fdseq" in head or b".fpage" in head or b"FixedDocumentSequence" in head:
        return _BY_NAME["XPS"]
    return _by_suffix(name, _ZIP_FORMATS)


def _zip_members(path: Path, name: str) -> list[zipfile.ZipInfo] | None:
    try:
        with zipfile.ZipFile(path) as z:
            members = z.infolist()
    except (zipfile.BadZipFile, ValueError, EOFError, OSError):
        return None
    if sum(m.file_size for m in members) > MAX_UNZIPPED_BYTES:
        raise InvalidDocument(
            one_line(
                f"{name}: zip container unpacks to more than {MAX_UNZIPPED_BYTES >> 20} MB; "
                "refused as a possible zip bomb"
            )
        )
    return members


def _zip_kind(members: list[zipfile.ZipInfo], path: Path | None) -> Format | None:
    names = {m.filename for m in members}
    if "META-INF/container.xml" in names or _epub_mimetype(path, names):
        return _BY_NAME["EPUB"]
    if "word/document.xml" in names:
        return _BY_NAME["DOCX"]
    if any(n.endswith((".fdseq", ".fpage")) for n in names):
        return _BY_NAME["XPS"]
    files = [m.filename for m in members if not m.is_dir()]
    if files and all(_IMAGE_MEMBER.search(n) for n in files):
        return _BY_NAME["CBZ"]
    return None


def _epub_mimetype(path: Path | None, names: set[str]) -> bool:
    if path is None or "mimetype" not in names:
        return False
    try:
        with zipfile.ZipFile(path) as z:
            return z.read("mimetype")[:64].strip() == b"application/epub+zip"
    except (zipfile.BadZipFile, ValueError, EOFError, OSError):
        return False


def _markup_or_text(head: bytes, name: str) -> Format | None:
    text = decode_head(head)
    if text is None:
        return None
    start = text.lstrip("\ufeff \t\r\n")[:2048]
    lowered = start.lower()
    if lowered.startswith("<?xml") or lowered.startswith("<!--") or lowered.startswith("<svg"):
        root = _xml_root(start)
        if root == "svg":
            return _BY_NAME["SVG"]
        if root == "FictionBook":
            return _BY_NAME["FB2"]
        if root and root.lower() == "html":
            return _BY_NAME["HTML"]
    if _looks_html(lowered):
        return _BY_NAME["HTML"]
    if lowered.startswith("<?xml"):
        return None  # XML that is none of the above
    return _by_suffix(name, ("Markdown",)) or _BY_NAME["text"]


_ROOT = re.compile(r"<([A-Za-z_][\w.-]*:)?([A-Za-z_][\w.-]*)")
_SKIP = re.compile(r"\s*(<\?.*?\?>|<!--.*?-->|<!DOCTYPE[^>]*>)", re.DOTALL | re.IGNORECASE)


def _xml_root(text: str) -> str | None:
    pos = 0
    while m := _SKIP.match(text, pos):
        pos = m.end()
    root = _ROOT.match(text[pos:].lstrip())
    return root.group(2) if root else None


_COMMENT = re.compile(r"\s*(<\?.*?\?>|<!--.*?-->)", re.DOTALL)
_HTML_START = ("<!doctype html", "<html", "<head", "<body", "<meta", "<title")


def _looks_html(lowered: str) -> bool:
    """WHATWG-style sniffing: the text begins (after comments) with an HTML tag."""
    pos = 0
    while m := _COMMENT.match(lowered, pos):
        pos = m.end()
    return lowered[pos:].lstrip().startswith(_HTML_START)


def decode_head(head: bytes) -> str | None:
    """The start of a text file as text, or None when it is not text (NUL bytes, control
    characters, or no encoding fits). UTF-8 (with or without BOM) and UTF-16/32 with a BOM
    are taken as they say; anything else goes to charset-normalizer."""
    for bom, encoding in BOMS:
        if head.startswith(bom):
            return _decode_prefix(head[len(bom) :], encoding)
    if b"\x00" in head:
        return None
    text = _decode_prefix(head, "utf-8")
    if text is None:
        text = guess_decode(head)
    if text is None or _control_share(text) > 0.01:
        return None
    return text


BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)


def _decode_prefix(data: bytes, encoding: str) -> str | None:
    """Decode ``data``, which may end in the middle of a character."""
    try:
        return codecs.getincrementaldecoder(encoding)().decode(data, final=False)
    except UnicodeDecodeError:
        return None


def guess_decode(data: bytes) -> str | None:
    """charset-normalizer's best reading of ``data``, or None."""
    encoding = guess_encoding(data)
    return None if encoding is None else data.decode(encoding)


def guess_encoding(data: bytes) -> str | None:
    """The encoding charset-normalizer finds likeliest for ``data`` (a Python codec
    name), or None."""
    from charset_normalizer import from_bytes  # here: only non-UTF-8 text needs it

    results = from_bytes(data)
    best = results.best()
    if best is None:
        return None
    # A tie means the bytes cannot tell those encodings apart; Windows-1252 is then by far
    # the likeliest (charset-normalizer's order among equals is arbitrary: cp1250 first).
    for match in results:
        tied = (match.percent_chaos, match.percent_coherence) == (
            best.percent_chaos,
            best.percent_coherence,
        )
        if tied and "cp1252" in match.could_be_from_charset:
            return str(match.encoding)
    return str(best.encoding)


def _control_share(text: str) -> float:
    if not text:
        return 0.0
    controls = sum(1 for c in text if (c < " " and c not in "\t\n\r\f\v") or c == "\x7f")
    return controls / len(text)


def _by_suffix(name: str, allowed: tuple[str, ...]) -> Format | None:
    suffix = Path(name).suffix.lower()
    for format_name in allowed:
        if suffix in _BY_NAME[format_name].suffixes:
            return _BY_NAME[format_name]
    return None
