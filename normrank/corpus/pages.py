"""One HTML or Markdown page read as a depth set reads it: its headings and text blocks in document
order, with navigation, data tables and code left out (the rules: :mod:`normrank.corpus.depthset`)."""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from normrank.errors import InvalidInputError, MissingDependencyError

__all__ = ["Page", "clean", "parse_html", "parse_markdown"]

_DROP_TAGS = ("script", "style", "nav", "header", "footer", "aside", "form", "noscript", "template", "svg",
              "pre", "head", "caption", "thead")  # fmt: skip
_DROP_ROLES = ("navigation", "banner", "contentinfo", "search")
_DROP_CLASSES = (
    # Sphinx
    "sphinxsidebar", "related", "footer", "header", "headerlink", "toctree-wrapper",
    "admonition-title", "rubric", "mobile-nav", "breadcrumbs", "wy-nav-side", "rst-footer-buttons",
    # DocBook
    "navheader", "navfooter", "toc", "list-of-tables", "list-of-figures", "list-of-examples", "lot",
    # Texinfo
    "contents-heading", "shortcontents-heading", "shortcontents", "menu", "nav-panel", "copiable-anchor",
    "copiable-link",
    # Doxygen
    "memberdecls", "directory", "navpath", "navelem",
)  # fmt: skip
_DROP_IDS = ("footer", "toc", "toctitle", "nav-path", "side-nav", "MSearchBox", "MSearchResultsWindow")
# Data tables (a header row, a caption, or the DocBook/Doxygen table classes) are not prose, as TREC
# CAR's paragraphs; the cells of a layout table (none of those) are text blocks.
_DATA_TABLE_CLASSES = ("table", "informaltable", "doxtable", "markdownTable", "fieldtable", "params", "memname",
                       "docutils", "simplelist", "calstable")  # fmt: skip
_ADMONITIONS = ("note", "tip", "warning", "caution", "important", "admonition", "seealso", "attention")
_HEADINGS = ("h1", "h2", "h3", "h4", "h5", "h6")
# Section numbers as manuals print them, with their trailing dot (DocBook and Sphinx "9.4.1. ",
# "9. ", appendix "A.2. ", part "IV. "): a capital letter, a number or a version alone is a word
# ("A Guide", "C API", "2024 roadmap", "2.0 Release Notes") and stays.
_NUMBERING = re.compile(r"^(?:(?:\d+|[A-Z])(?:\.\d+)+\.|\d+\.|(?=[IVX])X{0,3}(?:IX|IV|V?I{0,3})\.)\s+(?=\S)")
# Texinfo's numbered headings carry their kind as a class and print the number with no dot
# ("3.2.1 Simple Commands", "A.1 Foo"); only there a number without a dot goes.
_TEXINFO_NUMBERED = frozenset(("chapter", "section", "subsection", "subsubsection", "appendix", "appendixsec",
                               "appendixsubsec", "appendixsubsubsec"))  # fmt: skip
_TEXINFO_NUMBERING = re.compile(r"^(?:\d+|[A-Z])(?:\.\d+)*\s+(?=\S)")
# Inline elements: their text belongs to the text block around them. Every other element is a
# block boundary, so a <div class="para">, <li>, <dd> or <td> holding prose is a text block of its
# own, and text in nested blocks is read once, in document order.
_INLINE = frozenset(
    [
        "a",
        "abbr",
        "acronym",
        "b",
        "bdi",
        "bdo",
        "big",
        "br",
        "cite",
        "code",
        "data",
        "del",
        "dfn",
        "em",
        "font",
        "i",
        "img",
        "ins",
        "kbd",
        "mark",
        "q",
        "s",
        "samp",
        "small",
        "span",
        "strike",
        "strong",
        "sub",
        "sup",
        "time",
        "tt",
        "u",
        "var",
        "wbr",
        "label",
    ]
)
_XML_DECL = re.compile(r"\A\s*<\?xml[^>]*\?>")
_FRONT_MATTER = re.compile(r"\A---\s*\n(.*?)\n(?:---|\.\.\.)\s*\n", re.S)


@dataclass
class Page:
    """One parsed page: its title hint and its blocks in document order, ``("h", level, text)`` or
    ``("p", 0, text)``."""

    path: str
    title_hint: str
    blocks: list[tuple[str, int, str]]


def clean(text: str) -> str:
    return " ".join(text.replace("\u00b6", " ").split())


def _heading_text(text: str, texinfo: bool = False) -> str:
    text = _NUMBERING.sub("", clean(text))
    return (_TEXINFO_NUMBERING.sub("", text) if texinfo else text).strip(" #:")


def _classes(el: Any) -> set[str]:
    return set((el.get("class") or "").split())


def parse_html(text: str | bytes, path: str = "", title: str = "") -> Page:
    """Parse one HTML page (text, or bytes whose encoding the page declares) into its headings and
    paragraphs (module docstring: the rules)."""
    try:
        import lxml.html
        from lxml import etree
    except ImportError as e:
        raise MissingDependencyError("HTML sources need lxml: pip install 'normrank[depth]'") from e

    try:
        if isinstance(text, bytes):
            # UTF-8 first: lxml reads undeclared bytes as Latin-1, and most pages are UTF-8; else the
            # bytes go to lxml, which honours the page's declared encoding
            with contextlib.suppress(UnicodeDecodeError):
                text = text.decode("utf-8")
        if isinstance(text, str):
            text = _XML_DECL.sub("", text, count=1)  # lxml refuses a str with an encoding declaration
        # huge_tree: past 255 levels libxml2 otherwise drops the rest of the page without a word
        root = lxml.html.document_fromstring(
            text or "<html></html>", parser=lxml.html.HTMLParser(huge_tree=True)
        )
    except (etree.ParserError, ValueError) as e:
        raise InvalidInputError(f"{path}: not parseable as HTML ({e})") from e
    doxygen_title = root.find(".//div[@class='headertitle']/div[@class='title']")  # Doxygen's page heading
    hint = title or clean(doxygen_title.text_content() if doxygen_title is not None else "")
    hint = hint or clean(root.findtext(".//title") or "") or Path(path).stem
    for el in list(root.iter()):
        # comments, processing instructions, and what the rules leave out
        if el.getparent() is not None and (not isinstance(el.tag, str) or _dropped(el)):
            # drop_tree keeps the element's tail text (it belongs to the parent)
            el.drop_tree() if hasattr(el, "drop_tree") else el.getparent().remove(el)
    body = root.find("body")
    blocks = _text_blocks(body if body is not None else root)
    if doxygen_title is not None and hint:  # Doxygen's h1 are the sections below its page title
        blocks.insert(0, ("h", 0, hint))
    return Page(path, hint, blocks)


def _dropped(el: Any) -> bool:
    """Whether ``el`` and everything in it is left out (module docstring: the rules)."""
    cls = _classes(el)
    if el.tag == "table" and not cls & set(_DROP_CLASSES):
        around = [
            _classes(a) for _, a in zip(range(3), el.iterancestors(), strict=False)
        ]  # DocBook's div.table
        data = cls & set(_DATA_TABLE_CLASSES) or any(c & {"table", "informaltable"} for c in around)
        return bool(data or el.find(".//th") is not None)
    return bool(
        el.tag in _DROP_TAGS
        or el.get("role") in _DROP_ROLES
        or el.get("id") in _DROP_IDS
        or cls & set(_DROP_CLASSES)
        # docutils' local table of contents, Texinfo's (links only); Doxygen's body is a div.contents too
        or ("contents" in cls and (cls & {"topic", "local"} or not el.xpath(".//p|.//h1|.//h2|.//h3|.//h4")))
        or (el.tag == "p" and "title" in cls)  # DocBook captions
        or (el.tag in _HEADINGS and _classes(el.getparent()) & set(_ADMONITIONS))
    )


def _text_blocks(top: Any) -> list[tuple[str, int, str]]:
    """Headings and text blocks of ``top`` in document order: a text block is the text between two
    block boundaries (entering or leaving any element that is not inline), so nested blocks are
    read once. Iterative: a hostile page nests deeper than Python's recursion limit."""
    out: list[tuple[str, int, str]] = []
    buf: list[str] = []

    def flush(keep_empty: bool = False) -> None:
        text = clean("".join(buf))
        buf.clear()
        if text or keep_empty:
            out.append(("p", 0, text))

    stack: list[tuple[bool, Any]] = [(True, top)]
    while stack:
        enter, el = stack.pop()
        block = el.tag not in _INLINE
        if not enter:
            if block:
                flush(keep_empty=el.tag == "p")  # an empty <p> is counted as an empty block
            if el is not top and el.tail:
                buf.append(el.tail)
            continue
        if el.tag in _HEADINGS:
            flush()
            texinfo = bool(_classes(el) & _TEXINFO_NUMBERED)
            out.append(("h", int(el.tag[1]), _heading_text(el.text_content(), texinfo)))
            if el.tail:
                buf.append(el.tail)
            continue
        if block:
            flush()
        elif el.tag == "br":
            buf.append(" ")
        if el.text:
            buf.append(el.text)
        stack.append((False, el))
        stack.extend((True, c) for c in reversed(el))
    flush()
    return out


def parse_markdown(text: str, path: str = "") -> Page:
    """Parse one Markdown page (CommonMark + tables, raw HTML kept) into headings and paragraphs:
    rendered to HTML by markdown-it-py, then read by :func:`parse_html`."""
    try:
        from markdown_it import MarkdownIt
    except ImportError as e:
        raise MissingDependencyError(
            "Markdown sources need markdown-it-py: pip install 'normrank[depth]'"
        ) from e
    title = ""
    m = _FRONT_MATTER.match(text)
    if m:
        for line in m.group(1).splitlines():
            if line.lower().startswith("title:"):
                title = line.split(":", 1)[1].strip().strip("'\"")
        text = text[m.end() :]
    html = MarkdownIt("commonmark", {"html": True}).enable("table").render(text)
    return parse_html(f"<html><body>{html}</body></html>", path, title or Path(path).stem)
