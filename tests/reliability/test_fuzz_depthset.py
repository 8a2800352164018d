"""``normrank depthset build``, fuzzed (issue 37): generated trees of hostile HTML and Markdown
pages (deep and misnested elements, unclosed tags, every kind of text block, navigation, tables,
numbered and unnumbered headings, front matter, fences, encodings, binary files, empty files).

Every tree either builds a depth set or raises a :class:`NormrankError` with a one-line message;
no other exception. A built set is checked against the files themselves: every page is used or
skipped for a counted reason, every row of the qrels names a written query and paragraph, ids are
the SHA-1 of the case-folded text, depths are path lengths, every paragraph has at least
``min_words`` words, and every HTML paragraph and heading is text of its page as the standard
library's html.parser reads it (whitespace aside).

Profiles (env NORMRANK_TEST_PROFILE): ``small`` (default) 80 trees, ``full`` 3,000.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from normrank.corpus.depthset import build_depthset
from normrank.errors import NormrankError

FULL = os.environ.get("NORMRANK_TEST_PROFILE", "small") == "full"
OUTCOMES: Counter[str] = Counter()
SETTINGS = settings(
    max_examples=3000 if FULL else 80,
    deadline=None,
    derandomize=not FULL,
    suppress_health_check=list(HealthCheck),
    database=None,
)
WORDS = st.sampled_from(
    ["alpha", "Beta", "9.4.1.", "A", "C", "2024", "IV.", "¶", "é", "漢字", "x", "the", "API"]
)
TEXT = st.lists(WORDS, min_size=0, max_size=9).map(" ".join)
TAGS = ["p", "div", "span", "a", "code", "em", "li", "ul", "ol", "dl", "dt", "dd", "table", "tr", "td", "th",
        "section", "pre", "script", "nav", "header", "blockquote", "br", "b"]  # fmt: skip
HEADINGS = ["h1", "h2", "h3", "h4", "h5", "h6"]
CLASSES = ["", "para", "paragraph", "contents", "toc", "header", "related", "chapter", "section", "title",
           "headerlink", "note", "admonition-title", "menu", "table", "textblock", "navheader"]  # fmt: skip


@st.composite
def element(draw, depth: int = 0) -> str:
    if depth > 6 or draw(st.integers(0, 3)) == 0:
        return draw(TEXT)
    tag = draw(st.sampled_from(TAGS + HEADINGS))
    cls = draw(st.sampled_from(CLASSES))
    attrs = f' class="{cls}"' if cls else ""
    attrs += draw(st.sampled_from(["", ' role="navigation"', ' id="footer"', ' id="x"']))
    inner = "".join(draw(st.lists(element(depth + 1), max_size=3)))
    close = draw(
        st.sampled_from([f"</{tag}>", f"</{tag}>", f"</{tag}>", "", "</div>"])
    )  # unclosed, misnested
    return f"<{tag}{attrs}>{inner}{close}{draw(TEXT)}"


@st.composite
def html_page(draw) -> str:
    nest = draw(st.integers(0, 300)) if draw(st.integers(0, 9)) == 0 else 0  # deeper than recursion allows
    title = draw(st.sampled_from(["", "<title>T</title>", "<title></title>"]))
    body = "".join(draw(st.lists(element(), max_size=8)))
    decl = draw(st.sampled_from(["", '<?xml version="1.0" encoding="UTF-8"?>', "<!DOCTYPE html>"]))
    return f"{decl}<html><head>{title}</head><body>{'<div>' * nest}{body}{'</div>' * nest}</body></html>"


@st.composite
def markdown_page(draw) -> str:
    lines = []
    if draw(st.booleans()):
        lines += ["---", f"title: {draw(TEXT)}", draw(st.sampled_from(["---", "...", ""]))]
    for _ in range(draw(st.integers(0, 12))):
        kind = draw(st.integers(0, 7))
        text = draw(TEXT)
        lines += [
            [f"{'#' * draw(st.integers(1, 7))} {text}"],
            [text, draw(st.sampled_from(["===", "---"]))],  # setext
            [text, ""],
            [f"- {text}", f"  - {draw(TEXT)}"],
            ["```", text],  # a fence, maybe never closed
            [f"| {text} | x |", "|---|---|", "| a | b |"],
            [f"<div class='para'>{text}</div>"],
            [f"> {text}"],
        ][kind]
    return "\n".join(lines) + "\n"


@st.composite
def encoded(draw, text: str) -> bytes:
    how = draw(
        st.sampled_from(["utf-8", "utf-8", "utf-8", "utf-8-sig", "latin-1", "utf-16", "binary", "empty"])
    )
    if how == "binary":
        return bytes(draw(st.lists(st.integers(0, 255), min_size=1, max_size=64))) + b"\0"
    if how == "empty":
        return b""
    return text.encode(how, errors="replace")


@st.composite
def trees(draw) -> dict[str, bytes]:
    files = {}
    for i in range(draw(st.integers(1, 5))):
        if draw(st.booleans()):
            name, text = f"d{i % 2}/p{i}.html", draw(html_page())
        else:
            name, text = f"d{i % 2}/p{i}.md", draw(markdown_page())
        files[name] = draw(encoded(text))
    return files


class _Text(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []

    def handle_data(self, data: str) -> None:
        self.parts.append(data)


def squeezed(text: str) -> str:
    return "".join(text.replace("\u00b6", "").split())


def page_text(data: bytes) -> str:
    for enc in ("utf-8-sig", "utf-16"):
        try:
            text = data.decode(enc)
            break
        except UnicodeDecodeError:
            continue
    else:
        text = data.decode("latin-1")
    p = _Text()
    p.feed(text)
    p.close()
    return squeezed("".join(p.parts))


def check(out: Path, files: dict[str, bytes], stats, min_words: int) -> None:
    assert stats.pages_found == len(files)
    assert stats.pages_used + sum(stats.pages_skipped.values()) == stats.pages_found, stats
    corpus = {
        r["_id"]: r["text"] for r in map(json.loads, (out / "corpus.jsonl").read_text("utf-8").splitlines())
    }
    queries = {r["_id"]: r for r in map(json.loads, (out / "queries.jsonl").read_text("utf-8").splitlines())}
    rows = (out / "qrels" / "test.tsv").read_text("utf-8").splitlines()
    assert rows[0] == "query-id\tcorpus-id\tscore" and len(rows) - 1 == stats.qrels
    judged = set()
    for line in rows[1:]:
        q, d, g = line.split("\t")
        assert q in queries and d in corpus and g == "1"
        judged |= {q, d}
    assert judged == set(queries) | set(corpus)  # nothing unjudged is written
    for d, text in corpus.items():
        assert d == hashlib.sha1(text.casefold().encode()).hexdigest()
        assert len(text.split()) >= min_words and text == " ".join(text.split())
    for q in queries.values():
        path = q["metadata"]["path"]
        assert q["metadata"]["depth"] == len(path) >= 1 and q["text"] == " ".join(path) and all(path)
    html = [page_text(b) for n, b in files.items() if n.endswith(".html") and b"\0" not in b[:8192]]
    if html and not any(n.endswith(".md") for n in files):  # every paragraph and heading is page text
        for text in corpus.values():
            assert any(squeezed(text) in t for t in html), text
        for q in queries.values():
            for h in q["metadata"]["path"][1:]:
                assert any(squeezed(h) in t for t in html), h


@SETTINGS
@given(files=trees(), min_words=st.sampled_from([5, 1]))
def test_fuzz_depthset_build(files, min_words, tmp_path_factory):
    root = tmp_path_factory.mktemp("tree")
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    out = root.parent / (root.name + "-out")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # skipped and re-decoded files are counted in the stats
            stats = build_depthset([root], out, min_words=min_words)
    except NormrankError as e:
        assert "\n" not in str(e), str(e)
        OUTCOMES[type(e).__name__] += 1
        return
    check(out, files, stats, min_words)
    OUTCOMES["built"] += 1
    OUTCOMES["pages skipped"] += sum(stats.pages_skipped.values())


def test_zz_report(record_property):
    """The tally (runs last in this module), to the report file (``pytest --junitxml``)."""
    record_property("profile", "full" if FULL else "small")
    record_property("outcomes", dict(OUTCOMES))
