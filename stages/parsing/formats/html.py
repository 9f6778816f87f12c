"""HTML into sections with selectolax (the Lexbor engine: an HTML5 parser, so a page
parses as a browser parses it, tag soup included).

Scripts, styles and other non-content elements are dropped; block elements become
paragraphs (the chunker cuts at blank lines); ``<pre>`` keeps its lines; each ``<h1>``–
``<h6>`` starts a section labelled with its heading path (before the first, the page's
``<title>``). What stands in for a picture is read where it stands (``alt`` texts, an
inline ``<svg>``'s labels, a ``<math>``'s ``alttext``): docs/formats.md.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from selectolax.lexbor import LexborHTMLParser, LexborNode

from stages.parsing.formats.text import Section, decode_text, heading_path

__all__ = ["decode_html", "html_sections"]

_DROP = frozenset({"script", "style", "noscript", "template", "head", "iframe", "object"})
#: Elements read as a whole, in place (their text is not the page's running text).
_GRAPHICS = frozenset({"svg", "math"})
_ALT = frozenset({"img", "area", "input"})
#: An inline SVG's elements that carry words (a ``<tspan>`` sits inside a ``<text>``).
_SVG_WORDS = frozenset({"title", "desc", "text"})
_HEADINGS = {f"h{n}": n for n in range(1, 7)}
_BLOCKS = frozenset(
    {
        "address", "article", "aside", "blockquote", "caption", "dd", "details", "div",
        "dl", "dt", "fieldset", "figcaption", "figure", "footer", "form", "header", "hr",
        "li", "main", "nav", "ol", "p", "pre", "section", "summary", "table", "tbody",
        "td", "tfoot", "th", "thead", "tr", "ul", *_HEADINGS,
    }
)  # fmt: skip
_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""", re.IGNORECASE)


def decode_html(data: bytes, name: str) -> str:
    """The page as text: BOM, then ``<meta charset>`` in the first KiB, then as plain text."""
    declared = _CHARSET.search(data[:1024])
    return decode_text(data, name, declared.group(1).decode("ascii") if declared else None)


def html_sections(html: str) -> list[Section]:
    tree = LexborHTMLParser(html)
    title_node = tree.css_first("title")
    title = " ".join(title_node.text().split()) if title_node is not None else ""
    root = tree.body or tree.root
    if root is None:
        return []
    builder = _Builder(title or None)
    for event, node in _walk(root):
        builder.feed(event, node)
    return builder.finish()


def _walk(root: LexborNode) -> Iterator[tuple[str, LexborNode]]:
    """("start" | "end" | "text", node) in document order, without recursion (a deeply
    nested page must not hit Python's recursion limit)."""
    stack: list[tuple[bool, LexborNode]] = [(False, root)]
    while stack:
        leaving, node = stack.pop()
        if leaving:
            yield "end", node
            continue
        if node.tag == "-text":
            yield "text", node
            continue
        if node.tag in _DROP or node.tag == "-comment":
            continue
        if node.tag in _GRAPHICS:
            yield "graphic", node
            continue
        yield "start", node
        stack.append((True, node))
        stack.extend((False, child) for child in reversed(list(node.iter(include_text=True))))


class _Builder:
    def __init__(self, first_label: str | None) -> None:
        self.sections: list[Section] = []
        self.label = first_label
        self.path: list[tuple[int, str]] = []
        self.paragraphs: list[str] = []
        self.current: list[str] = []
        self.heading: list[str] | None = None
        self.pre = 0

    def feed(self, event: str, node: LexborNode) -> None:
        tag = node.tag or ""
        if event == "text":
            self._text(node.text(deep=False))
        elif event == "graphic":
            self._text(_spaced(_graphic_text(node)))
        elif tag in _ALT and event == "start":
            self._text(_spaced(_alt_text(node)))
        elif tag == "br" and event == "start":
            self.current.append("\n")
        elif tag in _HEADINGS:
            self._heading(event, _HEADINGS[tag])
        elif tag in _BLOCKS:
            self._paragraph()
            if tag == "pre":
                self.pre += 1 if event == "start" else -1

    def _text(self, text: str) -> None:
        if not text:
            return
        self.current.append(text if self.pre else re.sub(r"\s+", " ", text))
        if self.heading is not None:
            self.heading.append(text)

    def _heading(self, event: str, level: int) -> None:
        if event == "start":
            self._section()
            self.heading = []
            return
        title = " ".join("".join(self.heading or []).split())
        self.heading = None
        self.path = [(lv, t) for lv, t in self.path if lv < level] + [(level, title)]
        self.label = heading_path([t for _, t in self.path])
        self._paragraph()

    def _paragraph(self) -> None:
        text = "".join(self.current)
        if not self.pre:
            text = "\n".join(" ".join(line.split()) for line in text.split("\n"))
        if text.strip():
            self.paragraphs.append(text.strip("\n") if self.pre else text.strip())
        self.current = []

    def _section(self) -> None:
        self._paragraph()
        if self.paragraphs:
            self.sections.append(Section("\n\n".join(self.paragraphs), self.label))
        self.paragraphs = []

    def finish(self) -> list[Section]:
        self._section()
        return self.sections


def _spaced(words: str) -> str:
    """Words set apart from the text around them ("" for none)."""
    return f" {words} " if words.strip() else ""


def _alt_text(node: LexborNode) -> str:
    """An image's ``alt`` text (an ``<input>`` has one only as a picture button)."""
    if node.tag == "input" and (node.attributes.get("type") or "").lower() != "image":
        return ""
    return node.attributes.get("alt") or ""


def _graphic_text(node: LexborNode) -> str:
    """The words of an inline ``<svg>`` or ``<math>``, on one line."""
    if node.tag == "math":
        alt = node.attributes.get("alttext")
        words = alt if alt and alt.strip() else node.text(deep=True, separator=" ")
        return " ".join(words.split())
    parts: list[str] = []
    stack = list(reversed(list(node.iter(include_text=False))))
    while stack:
        child = stack.pop()
        if child.tag in _SVG_WORDS:
            parts.append(child.text(deep=True, separator=" "))
        elif child.tag not in _DROP:
            stack.extend(reversed(list(child.iter(include_text=False))))
    return " ".join(" ".join(parts).split())
