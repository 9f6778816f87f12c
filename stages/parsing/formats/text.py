"""Formats without pages: plain text and Markdown into sections, and the decoding they share.

A format without pages is stored as numbered sections (the ``page`` column counts them) whose
``section`` label is what search shows: the heading path ("Setup › Linux") where the
format has headings, else the line range ("lines 1–80"). Section texts are verbatim slices
of the file, so the chunker cuts them as it cuts pages.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

import msgspec
from markdown_it import MarkdownIt

from runtime.api import InvalidDocument, one_line
from stages.parsing.formats.detect import BOMS, HEAD_BYTES, guess_decode, guess_encoding

__all__ = [
    "SECTION_MAX_CHARS",
    "Section",
    "bounded",
    "decode_text",
    "markdown_sections",
    "read_text",
    "text_sections",
]

#: Plain text is cut into sections of about this many characters, at blank lines.
TEXT_SECTION_CHARS = 4000
#: No section of a format without pages is much longer than this: a longer one is cut (at
#: a paragraph, else a line, else a space) and goes on in the next, under the same label.
#: A section is a page row, one message from the parser and one paragraph or more for the
#: chunker; none of them should grow with the file (a 500 MB line made one 500 MB page).
SECTION_MAX_CHARS = 64 * 1024
#: A line longer than this is cut at a space (else anywhere) into pieces of this size at
#: most, each ending a text section once it is long enough (a file of one line is read).
LINE_MAX_CHARS = TEXT_SECTION_CHARS
#: Bytes of a plain text file decoded at a time.
_READ_BYTES = 1 << 20
#: Where a text too long for a section may be cut, best first.
_CUTS = (re.compile(r"\n[ \t]*\n"), re.compile(r"\n"), re.compile(r"\s"))
_SPACE = re.compile(r"\s")
#: Where ``str.splitlines`` ends a line, but for a lone "\r".
_BREAKS = "\n\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"


class Section(msgspec.Struct, frozen=True):
    """A part of a document without pages: its text and its label (heading path or lines)."""

    text: str
    label: str | None


def decode_text(data: bytes, name: str, declared: str | None = None) -> str:
    """The whole file as text.

    A BOM, then ``declared`` (an HTML meta charset), is believed. A file whose start is
    UTF-8 is UTF-8, so an invalid byte further on is damage, not another encoding; any
    other file is read in charset-normalizer's best guess.

    :raises InvalidDocument: damaged (invalid bytes for its encoding, NUL bytes) or not
        text in any encoding (one line).
    """
    encoding, body = _encoding(data, declared)
    if encoding is None:
        text = guess_decode(data)
        if text is None:
            raise InvalidDocument(one_line(f"{name}: not text in any encoding ragline knows"))
    else:
        try:
            text = body.decode(encoding)
        except UnicodeDecodeError as exc:
            raise InvalidDocument(
                one_line(
                    f"{name}: damaged text: invalid {encoding} at byte {exc.start}; "
                    "submit an intact copy"
                )
            ) from exc
    if "\x00" in text:
        raise InvalidDocument(
            one_line(
                f"{name}: damaged text: binary data (NUL) at character {text.index(chr(0))}; "
                "submit an intact copy"
            )
        )
    return text


def _encoding(data: bytes, declared: str | None) -> tuple[str | None, bytes]:
    for bom, encoding in BOMS:
        if data.startswith(bom):
            return encoding, data[len(bom) :]
    if declared:
        try:
            return codecs.lookup(declared).name, data
        except LookupError:
            pass
    try:
        codecs.getincrementaldecoder("utf-8")().decode(data[:HEAD_BYTES], final=False)
    except UnicodeDecodeError:
        return None, data
    return "utf-8", data


def text_sections(text: str) -> list[Section]:
    """Plain text cut at blank lines into sections of about :data:`TEXT_SECTION_CHARS`,
    each labelled with its line range (:func:`read_text` on a string)."""
    return list(_text_sections(_pieces([text])))


def read_text(path: Path, name: str) -> Iterator[Section]:
    """A plain text file's sections, read and decoded a megabyte at a time: memory stays
    flat in the file's size, and a line of any length is read (cut into pieces).

    :raises InvalidDocument: as :func:`decode_text` (one line).
    """
    return _text_sections(_pieces(_decoded(path, name)))


def _decoded(path: Path, name: str) -> Iterator[str]:
    """The file's text a block at a time, decoded as :func:`decode_text` decodes it; an
    encoding that must be guessed is guessed from the first megabyte."""
    with path.open("rb") as source:
        head = source.read(_READ_BYTES)
        encoding, skip = _stream_encoding(head, name)
        decoder = codecs.getincrementaldecoder(encoding)()
        source.seek(skip)
        done = chars = 0  # bytes decoded before this block; characters so far
        while True:
            block = source.read(_READ_BYTES)
            pending = len(decoder.getstate()[0])
            try:
                text = decoder.decode(block, final=not block)
            except UnicodeDecodeError as exc:
                raise _invalid(name, encoding, done - pending + exc.start) from exc
            _refuse_nul(text, name, chars)
            chars += len(text)
            done += len(block)
            if text:
                yield text
            if not block:
                return


def _stream_encoding(head: bytes, name: str) -> tuple[str, int]:
    """The encoding of a file that starts with ``head``, and the BOM's length to skip."""
    for bom, encoding in BOMS:
        if head.startswith(bom):
            return encoding, len(bom)
    try:
        codecs.getincrementaldecoder("utf-8")().decode(head[:HEAD_BYTES], final=False)
    except UnicodeDecodeError:
        guessed = guess_encoding(head)
        if guessed is None:
            raise InvalidDocument(
                one_line(f"{name}: not text in any encoding ragline knows")
            ) from None
        return guessed, 0
    return "utf-8", 0


def _invalid(name: str, encoding: str, at: int) -> InvalidDocument:
    return InvalidDocument(
        one_line(f"{name}: damaged text: invalid {encoding} at byte {at}; submit an intact copy")
    )


def _refuse_nul(text: str, name: str, before: int) -> None:
    at = text.find("\x00")
    if at != -1:
        raise InvalidDocument(
            one_line(
                f"{name}: damaged text: binary data (NUL) at character {before + at}; "
                "submit an intact copy"
            )
        )


#: A piece of a line: its text, the line's index, and whether it ends the line.
Piece = tuple[str, int, bool]


def _pieces(blocks: Iterable[str]) -> Iterator[Piece]:
    """The lines of the text (as ``str.splitlines(keepends=True)`` cuts them), a line
    longer than :data:`LINE_MAX_CHARS` in pieces, whatever the blocks it came in."""
    carry = ""
    line = 0
    for block in blocks:
        lines = (carry + block).splitlines(keepends=True)
        # The last line may go on in the next block (a "\r" may be half of a "\r\n").
        carry = lines.pop() if lines and not _ended(lines[-1]) else ""
        for text in lines:
            yield from _cut_line(text, line, ends=True)
            line += 1
        if len(carry) > LINE_MAX_CHARS:
            head, carry = _split_long(carry)
            yield from ((piece, line, False) for piece in head)
    if carry:
        yield from _cut_line(carry, line, ends=True)


def _ended(line: str) -> bool:
    """Whether ``line`` ends in a line break (a lone "\\r" may be half of a "\\r\\n")."""
    return line[-1] in _BREAKS


def _cut_line(text: str, line: int, *, ends: bool) -> Iterator[Piece]:
    head, rest = _split_long(text) if len(text) > LINE_MAX_CHARS else ([], text)
    yield from ((piece, line, False) for piece in head)
    if rest:
        yield rest, line, ends


def _split_long(text: str) -> tuple[list[str], str]:
    """Pieces of at most :data:`LINE_MAX_CHARS` cut after a space (else anywhere) off the
    front of ``text``, and the rest (no longer than that)."""
    pieces: list[str] = []
    start = 0
    while len(text) - start > LINE_MAX_CHARS:
        limit = start + LINE_MAX_CHARS
        end = _cut_at(text, start, limit, _SPACE) or limit
        pieces.append(text[start:end])
        start = end
    return pieces, text[start:]


def _cut_at(text: str, start: int, limit: int, where: re.Pattern[str]) -> int | None:
    """The end of the last match of ``where`` in the second half of
    ``text[start:limit]`` (None: no match there)."""
    last = None
    for m in where.finditer(text, start + (limit - start) // 2, limit):
        last = m.end()
    return last


def _text_sections(pieces: Iterable[Piece]) -> Iterator[Section]:
    """Sections of about :data:`TEXT_SECTION_CHARS` ending at a blank line (or between
    two pieces of a long line), or at any line once :data:`SECTION_MAX_CHARS` long;
    labelled with their line range."""
    parts: list[str] = []
    size = 0
    first = last = 0
    for text, line, ends in pieces:
        if not parts:
            first = line
        parts.append(text)
        size += len(text)
        last = line
        at_break = not ends or not text.strip()
        if (size >= TEXT_SECTION_CHARS and at_break) or size >= SECTION_MAX_CHARS:
            yield from _section(parts, first, last)
            parts, size = [], 0
    yield from _section(parts, first, last)


def _section(parts: list[str], first: int, last: int) -> Iterator[Section]:
    body = "".join(parts)
    if body.strip():
        yield Section(body, _lines_label(first, last + 1))


def bounded(sections: Iterable[Section]) -> Iterator[Section]:
    """``sections``, each longer than :data:`SECTION_MAX_CHARS` cut (at a blank line, else
    a line end, else a space, else anywhere) into pieces under the same label."""
    for section in sections:
        text, start = section.text, 0
        while len(text) - start > SECTION_MAX_CHARS:
            end = _cut_any(text, start, start + SECTION_MAX_CHARS)
            yield Section(text[start:end], section.label)
            start = end
        yield Section(text[start:] if start else text, section.label)


def _cut_any(text: str, start: int, limit: int) -> int:
    for where in _CUTS:
        end = _cut_at(text, start, limit, where)
        if end is not None:
            return end
    return limit


def _add_lines(sections: list[Section], lines: list[str], start: int, end: int) -> None:
    body = "".join(lines[start:end])
    if body.strip():
        sections.append(Section(body, _lines_label(start, end)))


def _lines_label(start: int, end: int) -> str:
    return f"line {start + 1}" if end - start == 1 else f"lines {start + 1}–{end}"


def markdown_sections(text: str) -> list[Section]:
    """Markdown cut at its headings (as CommonMark parses them: not ``#`` lines inside code
    blocks), each section labelled with its heading path; text before the first heading
    is labelled with its line range."""
    lines = text.splitlines(keepends=True)
    tokens = MarkdownIt("commonmark").parse(text)
    heads: list[tuple[int, int, str]] = []  # (first line, level, title)
    for i, tok in enumerate(tokens):
        if tok.type == "heading_open" and tok.map is not None:
            title = " ".join(tokens[i + 1].content.split())
            heads.append((tok.map[0], int(tok.tag[1]), title))
    sections: list[Section] = []
    first = heads[0][0] if heads else len(lines)
    _add_lines(sections, lines, 0, first)
    path: list[tuple[int, str]] = []
    for n, (line, level, title) in enumerate(heads):
        end = heads[n + 1][0] if n + 1 < len(heads) else len(lines)
        path = [(lv, t) for lv, t in path if lv < level] + [(level, title)]
        body = "".join(lines[line:end])
        if body.strip():
            sections.append(Section(body, heading_path([t for _, t in path])))
    return sections


def heading_path(titles: list[str]) -> str:
    """Headings from the outermost in, as search shows them (at most 200 characters)."""
    label = " › ".join(t for t in titles if t) or "untitled"
    return label if len(label) <= 200 else label[:199] + "…"
