"""``normrank depthset build``: queries and qrels from the heading tree of small Sphinx-like,
DocBook-like and Markdown fixtures (expected trees written out by hand), dedup, determinism,
page sampling, and the errors."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest

from normrank.corpus.beir import load_dataset, query_depth
from normrank.corpus.depthset import DepthSetError, build_depthset, parse_html, query_id, read_path
from normrank.errors import InvalidInputError, InvalidParameterError, MissingDependencyError, NormrankError

P = {  # paragraphs (>= 5 words), by name
    k: f"This is paragraph {k} with enough words to count."
    for k in ("intro", "basic1", "basic2", "dd", "deep", "note", "adv", "pg_intro", "pg_fmt", "pg_note",
              "md_lead", "md_a", "md_b", "md_c", "shared", "other")
}  # fmt: skip

SPHINX = f"""<!DOCTYPE html><html><head><title>json — JSON encoder — Python 3.11 documentation</title></head>
<body>
<div class="related" role="navigation"><h3>Navigation</h3><ul><li><a href="#">next topic page here</a></li></ul></div>
<div class="document"><div class="body" role="main">
<section id="json"><h1>json — JSON encoder<a class="headerlink" href="#json">¶</a></h1>
<p>{P["intro"]}</p>
<div class="contents topic"><p class="topic-title">Contents of this page right here</p></div>
<section id="basic"><h2>Basic Usage<a class="headerlink" href="#basic">¶</a></h2>
<p>{P["basic1"]}</p>
<pre>import json  # code is left out of paragraphs entirely</pre>
<dl class="py function"><dt>json.dump(obj, fp)</dt><dd><p>{P["dd"]}</p></dd></dl>
<div class="admonition note"><p class="admonition-title">Note that this title is dropped</p><p>{P["note"]}</p></div>
<table class="docutils align-default"><thead><tr><th>Name</th></tr></thead><tbody><tr><td><p>A table cell paragraph that is left out.</p></td></tr></tbody></table>
<p>{P["basic2"]}</p>
<p>Too short.</p>
<section id="deep"><h3>Deeper <code>things</code></h3><p>{P["deep"]}</p>
<section id="empty"><h4>No paragraphs here</h4></section>
</section></section>
<section id="adv"><h2>Advanced</h2><p>{P["adv"]}</p></section>
</section></div></div>
<div class="sphinxsidebar" role="navigation"><h3>Table of Contents</h3><p>Sidebar text that is not a paragraph.</p></div>
<div class="footer"><p>Copyright 2001-2024 the Python Software Foundation.</p></div>
</body></html>"""

DOCBOOK = f"""<?xml version="1.0" encoding="UTF-8" standalone="no"?>
<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.0 Transitional//EN" "x"><html xmlns="http://www.w3.org/1999/xhtml">
<head><title>9.4. String Functions and Operators</title></head><body>
<div class="navheader"><table><tr><th>9.4. String Functions and Operators</th></tr><tr><td><p>Prev Up Next Home here</p></td></tr></table><hr/></div>
<div class="sect1" id="FUNCTIONS-STRING"><div class="titlepage"><div><div><h2 class="title">9.4. String Functions and Operators</h2></div></div></div>
<div class="toc"><dl class="toc"><dt><span class="sect2"><a href="#x">9.4.1. format</a></span></dt></dl></div>
<p>{P["pg_intro"]}</p>
<div class="table"><p class="title"><strong>Table 9.9. SQL String Functions and Operators</strong></p><div class="table-contents"><table><tr><td><p>Concatenates the two strings together here.</p></td></tr></table></div></div>
<div class="sect2" id="FUNCTIONS-STRING-FORMAT"><div class="titlepage"><div><div><h3 class="title">9.4.1. <code class="function">format</code></h3></div></div></div>
<p>{P["pg_fmt"]}</p>
<div class="note"><h3 class="title">Note</h3><p>{P["pg_note"]}</p></div>
</div></div>
<div class="navfooter"><hr/><table><tr><td><p>Prev Up Next Home there</p></td></tr></table></div>
</body></html>"""

MD_GUIDE = f"""---
title: Ignored because the page has its own top heading
---
# User guide

{P["md_lead"]}

## Install

{P["md_a"]}

```bash
pip install something   # code is left out
```

| a table | left out of paragraphs entirely |
|---|---|
| x | y |

### From source

{P["md_b"]}

{P["shared"]}

## Usage

{P["md_c"]}
"""

MD_FAQ = f"""---
title: FAQ
---
## Why?

{P["shared"]}

## How?

{P["other"]}
"""

# The expected heading tree: heading path -> paragraphs directly under it (hierarchical qrels).
EXPECTED = {
    ("json — JSON encoder",): ["intro"],
    ("json — JSON encoder", "Basic Usage"): ["basic1", "dd", "note", "basic2"],
    ("json — JSON encoder", "Basic Usage", "Deeper things"): ["deep"],
    ("json — JSON encoder", "Advanced"): ["adv"],
    ("String Functions and Operators",): ["pg_intro"],
    ("String Functions and Operators", "format"): ["pg_fmt", "pg_note"],
    ("User guide",): ["md_lead"],
    ("User guide", "Install"): ["md_a"],
    ("User guide", "Install", "From source"): ["md_b", "shared"],
    ("User guide", "Usage"): ["md_c"],
    ("FAQ", "Why?"): ["shared"],
    ("FAQ", "How?"): ["other"],
}


@pytest.fixture()
def docs(tmp_path: Path) -> Path:
    root = tmp_path / "docs"
    (root / "library").mkdir(parents=True)
    (root / "library" / "json.html").write_text(SPHINX, encoding="utf-8")
    (root / "functions-string.html").write_text(DOCBOOK, encoding="utf-8")
    (root / "md").mkdir()
    (root / "md" / "guide.md").write_text(MD_GUIDE, encoding="utf-8")
    (root / "md" / "faq.md").write_text(MD_FAQ, encoding="utf-8")
    (root / "style.css").write_text("body {}")  # neither HTML nor Markdown: not read
    return root


def read(out: Path) -> tuple[dict, dict, dict]:
    corpus = {r["_id"]: r for r in map(json.loads, (out / "corpus.jsonl").read_text().splitlines())}
    queries = {r["_id"]: r for r in map(json.loads, (out / "queries.jsonl").read_text().splitlines())}
    qrels: dict[str, set[str]] = {}
    lines = (out / "qrels" / "test.tsv").read_text().splitlines()
    assert lines[0] == "query-id\tcorpus-id\tscore"
    for line in lines[1:]:
        q, d, s = line.split("\t")
        assert s == "1"
        qrels.setdefault(q, set()).add(d)
    return corpus, queries, qrels


def by_path(corpus: dict, queries: dict, qrels: dict) -> dict[tuple[str, ...], list[str]]:
    text_to_name = {v: k for k, v in P.items()}
    return {
        tuple(queries[q]["metadata"]["path"]): sorted(text_to_name[corpus[d]["text"]] for d in ds)
        for q, ds in qrels.items()
    }


def test_hierarchical_qrels_follow_the_heading_tree(docs: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    st = build_depthset([docs], out)
    corpus, queries, qrels = read(out)
    assert by_path(corpus, queries, qrels) == {k: sorted(v) for k, v in EXPECTED.items()}
    for q, row in queries.items():  # pinned query fields
        path = row["metadata"]["path"]
        assert row["text"] == " ".join(path) and row["metadata"]["depth"] == len(path)
        assert q == query_id(path) and read_path(q) == path and query_depth(q) == len(path)
    assert all(r["title"] == "" for r in corpus.values())  # TREC CAR paragraphs have no title
    texts = " ".join(r["text"] for r in corpus.values())
    for left_out in (
        "Sidebar",
        "Copyright",
        "table cell",
        "Concatenates",
        "pip install",
        "Prev Up",
        "dropped",
    ):
        assert left_out not in texts
    assert st.pages_used == 4 and st.pages_found == 4
    assert st.queries_per_depth == {"d=1": 3, "d=2": 7, "d=3": 2}
    # "shared" occurs twice: one corpus row, relevant to both headings (TREC CAR's dedup)
    assert st.duplicates_merged == 1 and st.paragraphs == len(corpus) == len(P)
    # the sweep reads the folder, depths from the metadata
    ds = load_dataset(out)
    assert sorted(ds.qrels) == sorted(queries) and len(ds.doc_ids) == len(corpus)
    manifest = json.loads((out / "depthset.json").read_text())
    assert manifest["args"]["qrels"] == "hierarchical" and "Duplicates" in manifest["rules"]


def test_tree_qrels_add_every_heading_above(docs: Path, tmp_path: Path) -> None:
    build_depthset([docs], tmp_path / "tree", qrels="tree")
    got = by_path(*read(tmp_path / "tree"))
    want: dict[tuple[str, ...], set[str]] = {}
    for path, names in EXPECTED.items():
        for i in range(1, len(path) + 1):
            want.setdefault(path[:i], set()).update(names)
    assert got == {k: sorted(v) for k, v in want.items()}
    assert ("FAQ",) in got  # a page with no paragraph of its own is a query in the tree variant


def test_output_is_deterministic_and_sampling_takes_whole_pages(docs: Path, tmp_path: Path) -> None:
    build_depthset([docs], tmp_path / "a")
    build_depthset([docs], tmp_path / "b")
    for f in ("corpus.jsonl", "queries.jsonl", "qrels/test.tsv"):
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes()
    pages = set()
    for seed in range(6):
        st = build_depthset([docs], tmp_path / f"s{seed}", max_pages=2, seed=seed)
        assert st.pages_used == 2
        got = by_path(*read(tmp_path / f"s{seed}"))
        roots = {p[0] for p in got}
        assert len(roots) == 2
        for path, names in EXPECTED.items():  # a sampled page keeps every query and paragraph
            if path[0] in roots:
                assert got[path] == sorted(names)
        pages.add(frozenset(roots))
        again = build_depthset([docs], tmp_path / f"r{seed}", max_pages=2, seed=seed)
        assert again.pages_used == 2
        assert (tmp_path / f"s{seed}" / "qrels/test.tsv").read_bytes() == (
            tmp_path / f"r{seed}" / "qrels/test.tsv"
        ).read_bytes()
    assert len(pages) > 1  # the seed changes the sample


def test_format_selects_files(docs: Path, tmp_path: Path) -> None:
    build_depthset([docs], tmp_path / "md", fmt="markdown")
    roots = {p[0] for p in by_path(*read(tmp_path / "md"))}
    assert roots == {"User guide", "FAQ"}
    build_depthset([docs / "library"], tmp_path / "html", fmt="html")
    assert {p[0] for p in by_path(*read(tmp_path / "html"))} == {"json — JSON encoder"}


def test_page_without_top_heading_takes_its_title(tmp_path: Path) -> None:
    page = parse_html(f"<html><head><title>Guide</title></head><body><h2>A</h2><p>{P['md_a']}</p><h2>B</h2>"
                      f"<p>{P['md_b']}</p><h4>C</h4><p>{P['md_c']}</p></body></html>", "g.html")  # fmt: skip
    (tmp_path / "g.html").write_text("x")
    src = tmp_path / "src"
    src.mkdir()
    (src / "g.html").write_text(
        f"<html><head><title>Guide</title></head><body><h2>A</h2><p>{P['md_a']}</p><h2>B</h2>"
        f"<p>{P['md_b']}</p><h4>C</h4><p>{P['md_c']}</p></body></html>"
    )
    got = by_path(*read(_build(src, tmp_path / "o")))
    # two h2s: the page title comes from <title>; a skipped level (h2 -> h4) is one level deeper
    assert got == {("Guide", "A"): ["md_a"], ("Guide", "B"): ["md_b"], ("Guide", "B", "C"): ["md_c"]}
    assert [b[0] for b in page.blocks] == ["h", "p", "h", "p", "h", "p"]


def test_duplicates_ignore_case_and_whitespace(tmp_path: Path) -> None:
    """TREC CAR's dedup: the same paragraph in other case or spacing is one row (first text kept),
    relevant to each heading it occurs under."""
    src = tmp_path / "src"
    src.mkdir()
    text = P["md_a"]
    (src / "p.md").write_text(f"# Page\n\n## A\n\n{text}\n\n## B\n\n{text.upper().replace(' ', '   ')}\n")
    st = build_depthset([src], tmp_path / "o")
    corpus, queries, qrels = read(tmp_path / "o")
    assert st.duplicates_merged == 1 and [r["text"] for r in corpus.values()] == [text]
    assert {tuple(queries[q]["metadata"]["path"]) for q in qrels} == {("Page", "A"), ("Page", "B")}
    assert all(ds == set(corpus) for ds in qrels.values())


def _build(src: Path, out: Path, **kw) -> Path:
    build_depthset([src], out, **kw)
    return out


def test_errors(tmp_path: Path, docs: Path) -> None:
    flat = tmp_path / "flat"
    flat.mkdir()
    (flat / "a.html").write_text(f"<html><body><p>{P['intro']}</p></body></html>")
    with pytest.raises(DepthSetError, match="no headings"):
        build_depthset([flat], tmp_path / "o1")
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "a.md").write_text("# Title\n\n## Section\n\nshort\n\n```\ncode only here in a block\n```\n")
    with pytest.raises(DepthSetError, match="no paragraphs"):
        build_depthset([bare], tmp_path / "o2")
    with pytest.raises(DepthSetError, match="no markdown files"):
        build_depthset([docs / "library"], tmp_path / "o3", fmt="markdown")
    with pytest.raises(DepthSetError, match="does not exist"):
        build_depthset([tmp_path / "missing"], tmp_path / "o4")
    with pytest.raises(DepthSetError, match="not HTML"):
        build_depthset([docs / "style.css"], tmp_path / "o5")
    with pytest.raises(InvalidParameterError):
        build_depthset([docs], tmp_path / "o6", fmt="pdf")
    with pytest.raises(InvalidParameterError):
        build_depthset([docs], tmp_path / "o7", qrels="article")
    with pytest.raises(InvalidParameterError):
        build_depthset([docs], tmp_path / "o8", max_pages=0)
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "keep.txt").write_text("mine")
    with pytest.raises(InvalidInputError, match="not a depth set"):
        build_depthset([docs], busy)
    assert (busy / "keep.txt").read_text() == "mine"
    assert (
        not any(p.name.startswith(".") for p in (tmp_path / "o1").glob("*"))
        if (tmp_path / "o1").exists()
        else True
    )


def test_trec_car_fails_here_with_a_typed_message(tmp_path: Path) -> None:
    with pytest.raises(NormrankError) as e:
        build_depthset(["car/v1.5/test200"], tmp_path / "car")
    assert isinstance(e.value, (MissingDependencyError, DepthSetError))
    assert "car/v1.5/test200" in str(e.value)


def test_trec_car_through_a_fake_ir_datasets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The CAR path with ir_datasets' interface faked: the heading paths become queries with their
    depth, the tree variant adds the headings above."""
    Q = types.SimpleNamespace
    queries = [Q(query_id="enwiki:A", title="A", headings=()),
               Q(query_id="enwiki:A/B", title="A", headings=("B",)),
               Q(query_id="enwiki:A/B/C", title="A", headings=("B", "C"))]  # fmt: skip
    qrels = [
        Q(query_id="enwiki:A/B/C", doc_id="p1", relevance=1),
        Q(query_id="enwiki:A", doc_id="p2", relevance=1),
    ]
    store = {"p1": Q(text="paragraph one under C"), "p2": Q(text="paragraph two under A")}
    fake = types.SimpleNamespace(
        load=lambda i: Q(
            queries_iter=lambda: iter(queries),
            qrels_iter=lambda: iter(qrels),
            docs_store=lambda: Q(get_many=lambda ids: {k: store[k] for k in ids}),
        )
    )
    monkeypatch.setitem(sys.modules, "ir_datasets", fake)
    build_depthset(["car/fake"], tmp_path / "h")
    _, qs, qr = read(tmp_path / "h")
    assert {tuple(qs[q]["metadata"]["path"]): sorted(d) for q, d in qr.items()} == {
        ("A",): ["p2"],
        ("A", "B", "C"): ["p1"],
    }
    build_depthset(["car/fake"], tmp_path / "t", qrels="tree")
    _corpus, qs, qr = read(tmp_path / "t")
    assert {tuple(qs[q]["metadata"]["path"]): sorted(d) for q, d in qr.items()} == {
        ("A",): ["p1", "p2"], ("A", "B"): ["p1"], ("A", "B", "C"): ["p1"]}  # fmt: skip


def test_cli_build(docs: Path, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from normrank.cli import app

    r = CliRunner().invoke(app, ["depthset", "build", str(docs), "--out", str(tmp_path / "cli"), "--quiet"])
    assert r.exit_code == 0, r.output
    assert "4 pages" in r.output and (tmp_path / "cli" / "qrels" / "test.tsv").is_file()
    r = CliRunner().invoke(app, ["depthset", "build", str(tmp_path / "nope"), "--out", str(tmp_path / "x")])
    assert r.exit_code == 2 and "does not exist" in r.output
