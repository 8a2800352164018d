"""The depth-set builder on real HTML manuals of several generators (Debian documentation packages),
each against an independent parse of its heading tree (the standard library's html.parser).

    apt-get install python3-doc postgresql-doc-15 bash-doc git-doc doxygen-doc
    python benchmarks/depthset_manuals.py

Per manual: the reference's distinct headings and its sections with prose (a heading followed, before the
next heading, by a ``<p>``, ``<dd>``, ``<li>`` or ``<td>`` text of at least 5 words); the builder's
queries; precision (builder headings below the page root that are a reference heading, up to a dropped section number)
and recall (reference sections with prose that are a builder query).
"""

from __future__ import annotations

import json
import sys
import tempfile
from html.parser import HTMLParser
from pathlib import Path

MANUALS = {  # generator: a manual Debian packages as HTML
    "Sphinx (python3-doc)": "/usr/share/doc/python3-doc/html",
    "DocBook (postgresql-doc-15)": "/usr/share/doc/postgresql-doc-15/html",
    "Texinfo (bash-doc)": "/usr/share/doc/bash-doc/bashref.html",
    "groff man (bash-doc)": "/usr/share/doc/bash-doc/bash.html",
    "AsciiDoc (git-doc)": "/usr/share/doc/git-doc",
    "Doxygen (doxygen-doc)": "/usr/share/doc/doxygen/html",
}
TEXT_TAGS = ("p", "dd", "li", "td")
SKIP_TAGS = ("script", "style", "pre", "nav", "head")


class _Headings(HTMLParser):
    """Headings h1..h6 and whether prose follows each one before the next heading."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.headings: list[list] = []  # [text, has prose]
        self._in_heading: list[str] | None = None
        self._text: list[str] | None = None
        self._skip = 0

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag in SKIP_TAGS:
            self._skip += 1
        elif tag in ("h1", "h2", "h3", "h4", "h5", "h6"):
            self._in_heading = []
        elif tag in TEXT_TAGS:
            self._end_text()
            self._text = []

    def handle_endtag(self, tag: str) -> None:
        if tag in SKIP_TAGS:
            self._skip = max(0, self._skip - 1)
        elif tag in ("h1", "h2", "h3", "h4", "h5", "h6") and self._in_heading is not None:
            text = " ".join("".join(self._in_heading).replace("\u00b6", " ").split())
            self.headings.append([text, False])
            self._in_heading = None
        elif tag in TEXT_TAGS:
            self._end_text()

    def _end_text(self) -> None:
        if self._text is not None and self.headings and len("".join(self._text).split()) >= 5:
            self.headings[-1][1] = True
        self._text = None

    def handle_data(self, data: str) -> None:
        if self._skip:
            return
        if self._in_heading is not None:
            self._in_heading.append(data)
        elif self._text is not None:
            self._text.append(data)


def reference(source: Path) -> tuple[set[str], set[str]]:
    """(the texts of all headings, of the headings with prose) of every HTML file under ``source``."""
    files = [source] if source.is_file() else sorted(source.rglob("*.html"))
    heads, prose = set(), set()
    for f in files:
        parser = _Headings()
        parser.feed(f.read_bytes().decode("utf-8", errors="replace"))
        parser.close()
        heads |= {t.casefold() for t, _ in parser.headings if t}
        prose |= {t.casefold() for t, has in parser.headings if has and t}
    return heads, prose


def _is_heading(leaf: str, headings: set[str]) -> bool:
    return any(h == leaf or h.endswith(" " + leaf) for h in headings)


def compare(source: str | Path) -> dict:
    """Build ``source`` and compare its queries with the reference parse."""
    from normrank.corpus.depthset import build_depthset

    source = Path(source)
    heads, prose = reference(source)
    with tempfile.TemporaryDirectory() as tmp:
        stats = build_depthset([source], Path(tmp) / "ds")
        rows = [json.loads(line) for line in (Path(tmp) / "ds" / "queries.jsonl").open()]
    leaves = {r["metadata"]["path"][-1].casefold() for r in rows}  # a page's root may be its only h1
    inner = {r["metadata"]["path"][-1].casefold() for r in rows if r["metadata"]["depth"] >= 2}
    all_ref = {t.casefold() for t in prose}
    words = lambda h: h.split()  # noqa: E731
    found = {h for h in all_ref if any(" ".join(words(h)[i:]) in leaves for i in range(len(words(h))))}
    # every heading the builder made a query of is a heading of the reference (sections with prose)
    precise = sum(_is_heading(leaf, heads) for leaf in inner)
    return {
        "pages": stats.pages_used,
        "pages_found": stats.pages_found,
        "paragraphs": stats.paragraphs,
        "queries": len(rows),
        "ref_headings": len(heads),
        "ref_sections_with_prose": len(all_ref),
        "builder_headings": len(inner),
        "precision": precise / max(1, len(inner)),
        "recall": len(found) / max(1, len(all_ref)),
        "skipped": stats.pages_skipped,
    }


def main() -> None:
    for name, path in MANUALS.items():
        if not Path(path).exists():
            print(f"{name}: {path} not installed")
            continue
        r = compare(path)
        print(
            f"{name}: "
            + ", ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in r.items())
        )
        sys.stdout.flush()


if __name__ == "__main__":
    main()
