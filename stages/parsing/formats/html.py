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

from runtime.api import InvalidDocument, one_line
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
#: Elements a page may nest at most this deep (as :func:`nesting_depth` counts them).
#: Lexbor checks the stack of open elements at every block start tag, so its time grows
#: with the square of the depth: on the development machine 10,000 nested ``<div>``s
#: parse in 0.2 s, 20,000 in 1.1 s, 100,000 in over 40 s. Pages people read nest tens
#: deep (Blink's HTML parser stops nesting at 512).
MAX_HTML_DEPTH = 10_000
#: Where a tag (or a comment) starts: group 1 the slash of an end tag, group 2 the name.
_TAG_START = re.compile(r"<(/?)([A-Za-z][^\s/>]*)|<!--")
#: The rest of a tag up to its ">", quoted attribute values whole (possessive: no
#: backtracking, so a tag that never ends costs one scan to the end of the page).
_TAG_REST = re.compile(r"""(?:[^>"']++|"[^"]*+"|'[^']*+')*+>""")
#: Elements that never hold another: void elements, and those an HTML parser closes
#: at the next of their kind (or at a block start tag), so that unclosed they do not nest.
_FLAT = frozenset(
    {
        "area", "base", "basefont", "bgsound", "br", "col", "embed", "frame", "hr", "img",
        "input", "keygen", "link", "meta", "param", "source", "track", "wbr", "p", "li",
        "dt", "dd", "tr", "td", "th", "option", "optgroup", "rb", "rt", "rp", "rtc",
        "thead", "tbody", "tfoot", "colgroup", "caption", "html", "head", "body", "a",
        "nobr", "table", "select", "button", "form",
    }
)  # fmt: skip
#: Elements whose content is text up to their end tag, not elements.
_RAW_TEXT = {
    tag: re.compile(rf"</{tag}[\s/>]", re.IGNORECASE)
    for tag in ("script", "style", "textarea", "title", "xmp", "iframe", "noembed",
                "noframes")
}  # fmt: skip
#: Where an HTML parser honours ``<x/>`` as an element without content.
_FOREIGN = frozenset({"svg", "math"})
#: HTML elements whose ``<x/>`` opens one even there: those that end the SVG or MathML
#: around them, and the other block elements (the ones whose depth costs Lexbor time).
_HTML_IN_FOREIGN = frozenset(
    {
        "b", "big", "blockquote", "body", "br", "center", "code", "dd", "div", "dl", "dt",
        "em", "embed", "font", "h1", "h2", "h3", "h4", "h5", "h6", "head", "hr", "i", "img",
        "li", "listing", "menu", "meta", "nobr", "ol", "p", "pre", "ruby", "s", "small",
        "span", "strong", "strike", "sub", "sup", "table", "tt", "u", "ul", "var",
        "address", "article", "aside", "details", "dialog", "dir", "fieldset",
        "figcaption", "figure", "footer", "form", "header", "hgroup", "main", "nav",
        "search", "section", "summary",
    }
)  # fmt: skip


def decode_html(data: bytes, name: str) -> str:
    """The page as text: BOM, then ``<meta charset>`` in the first KiB, then as plain text."""
    declared = _CHARSET.search(data[:1024])
    return decode_text(data, name, declared.group(1).decode("ascii") if declared else None)


def html_sections(html: str, name: str = "page") -> list[Section]:
    """:raises InvalidDocument: nested deeper than :data:`MAX_HTML_DEPTH` (one line)."""
    if nesting_depth(html) > MAX_HTML_DEPTH:
        raise InvalidDocument(
            one_line(
                f"{name}: HTML nested more than {MAX_HTML_DEPTH} elements deep "
                "(no page needs that, and reading it would take minutes); not read"
            )
        )
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


def nesting_depth(html: str, stop: int = MAX_HTML_DEPTH) -> int:
    """How deep the page nests its elements, counted from its tags in one pass (linear
    time) without parsing it, and no shallower than an HTML parser nests them: an end tag
    closes the open element of its name and those opened inside it (and nothing when none
    is open), ``<x/>`` is an element without content only inside ``<svg>`` or ``<math>``
    (and only if not an HTML element),
    comments and the text of scripts, styles and the like hold no tags, and the elements
    in :data:`_FLAT` do not count. Counting stops once deeper than ``stop``."""
    depth = _Depth()
    at = 0
    while (start := _TAG_START.search(html, at)) is not None:
        if start.group(2) is None:  # a comment
            at = html.find("-->", start.end())
        else:
            rest = _TAG_REST.match(html, start.end())
            if rest is None:
                break  # a tag that never ends: the rest of the page is inside it
            at = depth.tag(html, start, rest.end())
        if at < 0 or depth.deepest > stop:
            break
    return depth.deepest


class _Depth:
    """The open elements as :func:`nesting_depth` counts them."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.opened: dict[str, list[int]] = {}  # name → where in ``names`` it is open
        self.foreign = 0  # open <svg> and <math> elements
        self.deepest = 0

    def tag(self, html: str, start: re.Match[str], end: int) -> int:
        """Count the tag ``html[start.start():end]``; where counting goes on (-1: the
        rest of the page is a raw text element's)."""
        name = start.group(2).lower()
        if start.group(1):
            self._close(name)
        elif html[end - 2] == "/" and self.foreign and name not in _HTML_IN_FOREIGN:
            pass  # an SVG or MathML element without content
        elif name in _RAW_TEXT:
            closing = _RAW_TEXT[name].search(html, end)
            return -1 if closing is None else closing.start()
        elif name not in _FLAT:
            self._open(name)
        return end

    def _open(self, name: str) -> None:
        self.opened.setdefault(name, []).append(len(self.names))
        self.names.append(name)
        self.foreign += name in _FOREIGN
        self.deepest = max(self.deepest, len(self.names))

    def _close(self, name: str) -> None:
        where = self.opened.get(name)
        if not where:
            return  # nothing of that name is open: a parser ignores the end tag
        at = where[-1]
        for closed in self.names[at:]:
            self.opened[closed].pop()
            self.foreign -= closed in _FOREIGN
        del self.names[at:]


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
