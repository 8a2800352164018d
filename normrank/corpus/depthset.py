"""Depth-stratified retrieval collections from any heading-structured corpus (TREC CAR's recipe).

TREC CAR (Dietz et al., 2017) makes its queries and qrels mechanically from Wikipedia's heading
tree: each heading path (page / section / subsection / ...) is a query, written as the page title
followed by the headings, and the paragraphs under that heading are its relevant passages. The
same construction applies to any documentation written as HTML (Sphinx, DocBook, hand-written) or
Markdown: :func:`build_depthset` writes a BEIR-layout folder that ``normrank sweep DIR --by-depth``
reads, with no human labels.

Rules (also written into ``depthset.json`` beside the collection):

- **Left out**: ``script``, ``style``, ``nav``, ``header``, ``footer``, ``aside``, ``form``,
  data tables (a header cell, a caption, or DocBook's / Sphinx's / Doxygen's table classes; TREC
  CAR's paragraphs are prose) and code blocks (``pre``); elements with a
  navigation/banner/contentinfo/search role; Sphinx's sidebar, related bar, local table of
  contents (``div.contents.topic``, ``toctree-wrapper``), header links (``¶``), admonition titles
  and rubrics; DocBook's ``navheader``/``navfooter``, ``div.toc`` and lists of tables, figures and
  examples, captions (``p.title``) and admonition headings ("Note"); Texinfo's navigation header,
  menus and table of contents; AsciiDoc's ``#footer`` / ``#toc``; Doxygen's member lists.
- **Paragraph**: a text block, whitespace collapsed: the text between two block boundaries (any
  element but an inline one like ``a``, ``code``, ``em``, ``span``), so ``<p>``, ``<div
  class="para">``, ``<li>``, ``<dd>`` or a layout table's ``<td>`` holding prose is a paragraph,
  and nested blocks are read once. Fewer than ``min_words`` words is an empty block, left out.
  Files that are binary or unreadable are skipped and listed (``unreadable``); Markdown that is
  not UTF-8 is read as Windows-1252 / Latin-1 and listed (``not_utf8``).
- **Headings**: ``h1``..``h6``; leading section numbers are dropped, as manuals print them
  ("9.4.1. ", "9. ", "A.2. ", "IV. ", and Texinfo's "3.2.1 "), never a word ("A Guide", "C API",
  "2024 roadmap"). The page is the
  root (depth 1): its title is the page's only top-level heading when that heading comes first,
  else the HTML ``<title>`` / Markdown front-matter ``title`` / file name, and then every heading
  of the page sits below it (Doxygen's page title heads its page). Depth is the length of the
  heading path, so a skipped level (h1 then
  h3) does not make a deeper query. Paragraphs under a heading with no text are left out.
- **Duplicates**, as TREC CAR's paragraph corpus: a paragraph's id is the SHA-1 of its
  whitespace-collapsed, case-folded text, so a paragraph that occurs several times is one
  corpus row, relevant to every heading it occurs under. Identical heading paths within a page are
  one query (as TREC CAR's heading ids); two pages with the same title get their file path added.
- **qrels**: ``hierarchical`` (default): a paragraph is relevant to the lowest heading it sits
  under; ``tree``: to that heading and every heading above it, the page included (TREC CAR's
  article / top-level variants). Queries with no relevant paragraph are dropped.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

import numpy as np

from normrank.corpus.pages import Page, clean, parse_html, parse_markdown
from normrank.errors import InvalidInputError, InvalidParameterError, MissingDependencyError

__all__ = [
    "FORMATS",
    "QRELS_MODES",
    "DepthSetError",
    "DepthSetStats",
    "Page",
    "build_depthset",
    "parse_html",
    "parse_markdown",
    "query_id",
    "read_path",
]

FORMATS = ("auto", "html", "markdown")
QRELS_MODES = ("hierarchical", "tree")
HTML_SUFFIXES = (".html", ".htm", ".xhtml")
MARKDOWN_SUFFIXES = (".md", ".markdown", ".mdown", ".mkd")
MANIFEST = "depthset.json"


class DepthSetError(InvalidInputError):
    """A source yields no depth set: no pages, no headings or no paragraphs (the message says why)."""


@dataclass
class DepthSetStats:
    """What a build wrote and what it left out (also the ``stats`` of ``depthset.json``)."""

    pages_found: int = 0
    pages_used: int = 0
    pages_skipped: dict[str, int] = field(default_factory=dict)
    paragraph_occurrences: int = 0
    paragraphs: int = 0
    duplicates_merged: int = 0
    left_out: dict[str, int] = field(default_factory=dict)
    queries_per_depth: dict[str, int] = field(default_factory=dict)
    qrels: int = 0
    seconds: float = 0.0
    not_utf8: list[str] = field(default_factory=list)  # Markdown files read as Windows-1252
    unreadable: list[str] = field(default_factory=list)  # skipped files, each with its reason

    def skip(self, reason: str) -> None:
        self.pages_skipped[reason] = self.pages_skipped.get(reason, 0) + 1

    def drop(self, reason: str, n: int = 1) -> None:
        self.left_out[reason] = self.left_out.get(reason, 0) + n

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def query_id(path: Sequence[str]) -> str:
    """A query's id, TREC CAR style: the heading path, each part percent-escaped, joined by ``/``
    (so :func:`normrank.corpus.beir.query_depth` reads its depth from the id too)."""
    return "/".join(quote(p, safe="") for p in path)


def _page_sections(
    page: Page, min_words: int, stats: DepthSetStats
) -> tuple[str, list[tuple[tuple[str, ...], str]]]:
    """``(page title, [(heading path, paragraph)])`` in document order; raises nothing, counts."""
    heads = [b for b in page.blocks if b[0] == "h"]
    top = min(b[1] for b in heads)
    first = heads[0]
    own_title = first[1] == top and sum(1 for b in heads if b[1] == top) == 1 and first[2]
    title = first[2] if own_title else (page.title_hint or Path(page.path).stem)
    stack: list[tuple[int, str]] = [(top if own_title else top - 1, title)]
    out: list[tuple[tuple[str, ...], str]] = []
    seen_first = False
    for kind, level, text in page.blocks:
        if kind == "h":
            if own_title and not seen_first:
                seen_first = True  # the page heading itself is the root
                continue
            while stack[-1][0] >= level:
                stack.pop()
            stack.append((level, text))
            continue
        if not text:
            stats.drop("empty block")
        elif len(text.split()) < min_words:
            stats.drop(f"under {min_words} words")
        elif any(not h for _, h in stack):
            stats.drop("under a heading with no text")
        else:
            out.append((tuple(h for _, h in stack), text))
    return title, out


def _files(source: Path, fmt: str) -> list[tuple[Path, str]]:
    """Files of ``source`` (a file or a folder, recursive) with the format each is read as, sorted."""
    suffixes = {"html": HTML_SUFFIXES, "markdown": MARKDOWN_SUFFIXES}
    kinds = ("html", "markdown") if fmt == "auto" else (fmt,)

    def kind(p: Path) -> str | None:
        return next((k for k in kinds if p.suffix.lower() in suffixes[k]), None)

    if source.is_file():
        k = kind(source) or (fmt if fmt != "auto" else None)
        if k is None:
            raise DepthSetError(
                f"{source}: not HTML ({', '.join(HTML_SUFFIXES)}) or Markdown ({', '.join(MARKDOWN_SUFFIXES)}); "
                "pass --format html|markdown to read it anyway"
            )
        return [(source, k)]
    found = [(p, kind(p)) for p in sorted(source.rglob("*")) if p.is_file()]
    return [(p, k) for p, k in found if k is not None]


def _read_page(path: Path, kind: str, rel: str, stats: DepthSetStats) -> Page | None:
    """The page, or None (skipped, with the file and the reason in ``stats.unreadable`` and a
    warning): one unreadable or binary file does not end the build."""
    try:
        data = path.read_bytes()
        if b"\0" in data[:8192]:  # text formats hold no NUL; images, archives and the like do
            raise InvalidInputError(f"{rel}: a binary file, not {kind} text")
        if kind == "html":
            return parse_html(data, rel)
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError:
            # Markdown declares no encoding: the other one in use is Windows-1252 / Latin-1 (every
            # byte is a character there), said in the stats and a warning rather than U+FFFD
            text = data.decode("cp1252", errors="strict") if _cp1252_ok(data) else data.decode("latin-1")
            stats.not_utf8.append(rel)
            warnings.warn(f"{rel}: not UTF-8; read as Windows-1252 (Latin-1)", UnicodeWarning, stacklevel=3)
        return parse_markdown(text, rel)
    except (OSError, InvalidInputError) as e:
        why = str(e) if isinstance(e, InvalidInputError) else f"{rel}: unreadable ({e.strerror or e})"
        stats.skip("unreadable")
        stats.unreadable.append(why)
        warnings.warn(f"skipped {why}", UserWarning, stacklevel=3)
        return None


def _cp1252_ok(data: bytes) -> bool:
    try:
        data.decode("cp1252")
        return True
    except UnicodeDecodeError:  # the five bytes Windows-1252 leaves undefined
        return False


@dataclass
class _Collection:
    corpus: dict[str, str] = field(default_factory=dict)  # paragraph id -> text, first occurrence
    queries: dict[str, list[str]] = field(default_factory=dict)  # query id -> heading path
    qrels: dict[str, set[str]] = field(default_factory=dict)  # query id -> paragraph ids

    def add(self, path: tuple[str, ...], text: str, mode: str, stats: DepthSetStats) -> None:
        key = text.casefold()
        pid = hashlib.sha1(key.encode("utf-8")).hexdigest()
        stats.paragraph_occurrences += 1
        if pid in self.corpus:
            stats.duplicates_merged += 1
        else:
            self.corpus[pid] = text
        targets = [path] if mode == "hierarchical" else [path[:i] for i in range(1, len(path) + 1)]
        for p in targets:
            qid = query_id(p)
            self.queries.setdefault(qid, list(p))
            self.qrels.setdefault(qid, set()).add(pid)


def _sample(
    files: list[tuple[Path, str, str]], max_pages: int | None, seed: int
) -> list[tuple[Path, str, str]]:
    """All files in sorted order, or a seeded shuffle to read until ``max_pages`` usable pages."""
    if max_pages is None:
        return files
    order = np.random.default_rng(seed).permutation(len(files))
    return [files[i] for i in order]


def _car(dataset_id: str, mode: str, stats: DepthSetStats) -> _Collection:
    """A TREC CAR collection through ir_datasets (``car/v1.5/test200``, ``car/v2.0/...``)."""
    try:
        import ir_datasets
    except ImportError as e:
        raise MissingDependencyError(
            f"{dataset_id}: TREC CAR is read with ir_datasets: pip install 'normrank[bench]'"
        ) from e
    try:
        ds = ir_datasets.load(dataset_id)
    except KeyError as e:
        raise DepthSetError(f"unknown ir_datasets id {dataset_id!r} (TREC CAR ids start with car/)") from e
    coll = _Collection()
    try:
        queries = {str(q.query_id): [str(q.title), *map(str, q.headings)] for q in ds.queries_iter()}
        judged = [(str(r.query_id), str(r.doc_id)) for r in ds.qrels_iter() if int(r.relevance) > 0]
        docs = ds.docs_store().get_many({d for _, d in judged})
    except ImportError as e:  # ir_datasets asks for trec-car-tools this way
        raise MissingDependencyError(f"{dataset_id}: {e}") from e
    except Exception as e:  # ir_datasets raises IOError/HTTP errors of many kinds when it cannot fetch
        raise DepthSetError(
            f"{dataset_id}: TREC CAR's files cannot be fetched here (offline, or they need a manual download; "
            "see ir_datasets' documentation for car/). Build a depth set from HTML or Markdown instead."
        ) from e
    by_id = {q: tuple(p) for q, p in queries.items()}
    for q, d in judged:
        if d in docs and q in by_id:
            text = clean(str(docs[d].text))
            targets = (
                [by_id[q]] if mode == "hierarchical" else [by_id[q][:i] for i in range(1, len(by_id[q]) + 1)]
            )
            coll.corpus.setdefault(d, text)
            for p in targets:
                qid = query_id(p)
                coll.queries.setdefault(qid, list(p))
                coll.qrels.setdefault(qid, set()).add(d)
    stats.paragraph_occurrences = len(judged)
    return coll


def _write_atomic(path: Path, lines: Iterable[str]) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with tmp.open("w", encoding="utf-8", newline="\n") as f:
        f.writelines(lines)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _check_out(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise InvalidInputError(f"--out {out} is a file; pass a folder")
    above = next((p for p in out.absolute().parents if p.exists()), None)  # up front, not after reading
    if above is not None and not above.is_dir():
        raise InvalidInputError(f"--out {out}: {above} is a file, so no folder can be made under it")
    if out.is_dir() and any(out.iterdir()) and not (out / MANIFEST).is_file():
        raise InvalidInputError(
            f"--out {out} is a non-empty folder that is not a depth set (no {MANIFEST}); pass an empty or new folder"
        )


def build_depthset(
    sources: Sequence[str | Path],
    out: str | Path,
    *,
    fmt: str = "auto",
    qrels: str = "hierarchical",
    max_pages: int | None = None,
    seed: int = 0,
    min_words: int = 5,
    show_progress: bool = False,
) -> DepthSetStats:
    """Build a depth-stratified BEIR-layout collection from heading-structured ``sources``.

    Args:
        sources: HTML / Markdown files or folders (read recursively), or TREC CAR ir_datasets ids
            (``car/v1.5/test200``; its files must be reachable).
        out: the folder to write ``corpus.jsonl``, ``queries.jsonl``, ``qrels/test.tsv`` and
            ``depthset.json`` into (new, empty, or a previous depth set, which is replaced).
        fmt: ``auto`` (by file suffix), ``html`` or ``markdown`` (only those files are read).
        qrels: ``hierarchical`` or ``tree`` (module docstring).
        max_pages: read pages in a ``seed``-ed random order until this many usable pages (pages
            with headings and paragraphs) are found; whole pages, so every query keeps all its
            paragraphs. None: every page.
        min_words: paragraphs with fewer words are left out as empty blocks.
    Returns:
        The :class:`DepthSetStats` also written to ``depthset.json``.
    Raises:
        DepthSetError: a source with no pages, no headings or no paragraphs.
    """
    t0 = time.perf_counter()
    if fmt not in FORMATS:
        raise InvalidParameterError(f"format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    if qrels not in QRELS_MODES:
        raise InvalidParameterError(f"qrels must be one of {', '.join(QRELS_MODES)}, got {qrels!r}")
    if max_pages is not None and max_pages < 1:
        raise InvalidParameterError(f"max_pages must be >= 1, got {max_pages}")
    if min_words < 1:
        raise InvalidParameterError(f"min_words must be >= 1, got {min_words}")
    if not sources:
        raise InvalidParameterError("no source given")
    out = Path(out)
    _check_out(out)
    stats = DepthSetStats()
    coll = _Collection()
    files: list[tuple[Path, str, str]] = []
    for src in sources:
        s = str(src)
        p = Path(s).expanduser()
        if not p.exists() and s.startswith("car/"):
            car = _car(s, qrels, stats)
            coll.corpus.update(car.corpus)
            coll.queries.update(car.queries)
            for q, d in car.qrels.items():
                coll.qrels.setdefault(q, set()).update(d)
            continue
        if not p.exists():
            raise DepthSetError(f"{s} does not exist (pass HTML/Markdown files or folders, or a car/... id)")
        found = _files(p, fmt)
        if not found:
            what = "HTML or Markdown" if fmt == "auto" else fmt
            raise DepthSetError(f"{s}: no {what} files found")
        base = p if p.is_dir() else p.parent
        label = p.name or str(p)
        files += [(f, k, f"{label}/{f.relative_to(base).as_posix()}") for f, k in found]
    stats.pages_found = len(files)
    pages: list[tuple[str, str, list[tuple[tuple[str, ...], str]]]] = []
    seen_headings = False
    from normrank.progress import progress_bar

    with progress_bar(enabled=show_progress and bool(files)) as bar:
        task = bar.add_task("pages", total=len(files) if max_pages is None else max_pages)
        for f, kind, rel in _sample(files, max_pages, seed):
            if max_pages is not None and len(pages) >= max_pages:
                break
            page = _read_page(f, kind, rel, stats)
            if page is None:
                pass
            elif not any(b[0] == "h" for b in page.blocks):
                stats.skip("no headings")
            else:
                seen_headings = True
                title, sections = _page_sections(page, min_words, stats)
                if sections:
                    pages.append((rel, title, sections))
                    bar.advance(task) if max_pages is not None else None
                else:
                    stats.skip("no paragraphs")
            if max_pages is None:
                bar.advance(task)
    if files and not seen_headings:
        raise DepthSetError(
            f"{', '.join(map(str, sources))}: no headings (h1-h6 / # lines) in {len(files)} page(s)"
            f"{f' ({len(stats.unreadable)} unreadable)' if stats.unreadable else ''}; a depth set needs a heading tree"
        )
    if files and not pages:
        raise DepthSetError(
            f"{', '.join(map(str, sources))}: headings but no paragraphs of >= {min_words} words in "
            f"{len(files)} page(s) (navigation, tables and code are left out; see --min-words)"
        )
    pages.sort(key=lambda x: x[0])  # the output does not depend on the sampling order
    titles: dict[str, int] = {}
    for _, title, _ in pages:
        titles[title] = titles.get(title, 0) + 1
    for rel, title, sections in pages:
        root = f"{title} ({rel})" if titles[title] > 1 else title
        for path, text in sections:
            coll.add((root, *path[1:]), text, qrels, stats)
    stats.pages_used = len(pages)
    if not coll.qrels:
        raise DepthSetError(f"{', '.join(map(str, sources))}: no judged query")
    _write(out, coll, stats)
    stats.seconds = time.perf_counter() - t0
    args = {"sources": [str(s) for s in sources], "format": fmt, "qrels": qrels, "max_pages": max_pages,
            "seed": seed, "min_words": min_words}  # fmt: skip
    _write_manifest(out, stats, args)
    return stats


def _write(out: Path, coll: _Collection, stats: DepthSetStats) -> None:
    from normrank.corpus.beir import depth_bucket

    (out / "qrels").mkdir(parents=True, exist_ok=True)
    used = sorted({d for ds in coll.qrels.values() for d in ds})
    stats.paragraphs = len(used)
    _write_atomic(
        out / "corpus.jsonl",
        (
            json.dumps({"_id": d, "title": "", "text": coll.corpus[d]}, ensure_ascii=False) + "\n"
            for d in used
        ),
    )
    qids = sorted(coll.qrels)
    per_depth: dict[str, int] = {}
    for q in qids:
        b = depth_bucket(len(coll.queries[q]))
        per_depth[b] = per_depth.get(b, 0) + 1
    stats.queries_per_depth = dict(sorted(per_depth.items()))
    rows = []
    for q in qids:
        path = coll.queries[q]
        meta = {"depth": len(path), "path": path}
        rows.append(
            json.dumps({"_id": q, "text": " ".join(path), "metadata": meta}, ensure_ascii=False) + "\n"
        )
    _write_atomic(out / "queries.jsonl", rows)
    qrows = ["query-id\tcorpus-id\tscore\n"]
    for q in qids:
        qrows += [f"{q}\t{d}\t1\n" for d in sorted(coll.qrels[q])]
    stats.qrels = len(qrows) - 1
    _write_atomic(out / "qrels" / "test.tsv", qrows)


def _write_manifest(out: Path, stats: DepthSetStats, args: dict[str, Any]) -> None:
    rules = (__doc__ or "").split("Rules (also written into ``depthset.json`` beside the collection):", 1)[-1]
    payload = {
        "builder": "normrank depthset build",
        "args": args,
        "stats": stats.to_dict(),
        "rules": rules.strip(),
    }
    _write_atomic(out / MANIFEST, [json.dumps(payload, indent=1, ensure_ascii=False) + "\n"])


def read_path(qid: str) -> list[str]:
    """The heading path a :func:`query_id` encodes."""
    return [unquote(p) for p in qid.split("/")]
