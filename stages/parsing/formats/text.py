"""Formats without pages: plain text and Markdown into sections, and the decoding they share.

A format without pages is stored as numbered sections (the ``page`` column counts them) whose
``section`` label is what search shows: the heading path ("Setup › Linux") where the
format has headings, else the line range ("lines 1–80"). Section texts are verbatim slices
of the file, so the chunker cuts them as it cuts pages.
"""

from __future__ import annotations

import codecs

import msgspec
from markdown_it import MarkdownIt

from runtime.api import InvalidDocument, one_line
from stages.parsing.formats.detect import BOMS, HEAD_BYTES, guess_decode

__all__ = ["Section", "decode_text", "markdown_sections", "text_sections"]

#: Plain text is cut into sections of about this many characters, at blank lines.
TEXT_SECTION_CHARS = 4000


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
    each labelled with its line range."""
    sections: list[Section] = []
    lines = text.splitlines(keepends=True)
    start = 0
    size = 0
    for i, line in enumerate(lines):
        size += len(line)
        at_break = not line.strip() or i == len(lines) - 1
        if size >= TEXT_SECTION_CHARS and at_break:
            _add_lines(sections, lines, start, i + 1)
            start, size = i + 1, 0
    _add_lines(sections, lines, start, len(lines))
    return sections


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
