"""General / specific answer pairs from real text, each with a question both answers serve
(the paper's Appendix D, Table 5, without its LLM-generated triples).

- **Lexicon** (:func:`wordnet_pairs`): a WordNet noun synset with a hypernym gives the question
  "What is a <lemma>?", the *specific* answer its own gloss and the *general* answer its
  hypernym's gloss. Read with NLTK's ``WordNetCorpusReader`` from Debian's ``wordnet-base``
  files (``/usr/share/wordnet``); nothing is downloaded.
- **Manuals** (:func:`manual_pairs`): in a depth set written by ``normrank depthset build``, a
  heading's *general* paragraph (the first directly under it) and a *specific* one (the first
  directly under one of its child headings); the question is the child's heading path.

Both return :class:`SpecificityPair` lists in a deterministic order plus the counts of what was
kept and left out; :func:`sample_pairs` draws a fixed-seed sample.
"""

from __future__ import annotations

import gzip
import io
import json
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from normrank.errors import InvalidInputError, InvalidParameterError, MissingDependencyError

__all__ = [
    "WORDNET_DIR",
    "SpecificityPair",
    "WordNetMissingError",
    "document_order",
    "manual_pairs",
    "one_per",
    "open_wordnet",
    "sample_pairs",
    "wordnet_pairs",
]

WORDNET_DIR = Path("/usr/share/wordnet")
# Files NLTK's reader opens on start-up (data.noun is read when a synset is looked up).
_WORDNET_FILES = ("data.noun", "data.adj", *(f"index.{p}" for p in ("noun", "verb", "adj", "adv")),
                  *(f"{p}.exc" for p in ("noun", "verb", "adj", "adv")))  # fmt: skip
# wordnet-base leaves out ``lexnames`` (its README.Debian: the C library has the list compiled
# in); NLTK needs it, so it is read from the package's own lexnames(5) man page, else numbered.
_LEXNAMES_MAN = Path("/usr/share/man/man5/lexnames.5WN.gz")
_LEXNAME_ROW = re.compile(r"^(\d\d)\t(\S+)\s*\t")


class WordNetMissingError(MissingDependencyError):
    """The WordNet 3.0 database files are not where they were looked for."""


@dataclass(frozen=True)
class SpecificityPair:
    """A question, its specific answer and its general answer, with where they came from."""

    question: str
    specific: str
    general: str
    meta: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def to_dict(self) -> dict[str, Any]:
        return {"question": self.question, "specific": self.specific, "general": self.general, **self.meta}


def _lexnames() -> str:
    rows: list[str] = []
    if _LEXNAMES_MAN.is_file():
        for line in gzip.decompress(_LEXNAMES_MAN.read_bytes()).decode("utf-8", "replace").splitlines():
            m = _LEXNAME_ROW.match(line)
            if m:
                rows.append(f"{m.group(1)}\t{m.group(2)}\t0")
    if not rows:  # only the names are lost: the pairs do not depend on them
        rows = [f"{i:02d}\tlexfile.{i:02d}\t0" for i in range(45)]
    return "\n".join(rows) + "\n"


def open_wordnet(root: str | Path = WORDNET_DIR) -> Any:
    """NLTK's ``WordNetCorpusReader`` over the WordNet database files in ``root``.

    Raises:
        WordNetMissingError: a file the reader needs is missing (``apt-get install wordnet-base``).
    """
    root = Path(root)
    missing = [f for f in _WORDNET_FILES if not (root / f).is_file()]
    if missing:
        raise WordNetMissingError(
            f"WordNet 3.0 database files not found in {root} (missing: {', '.join(missing)}): "
            "apt-get install wordnet-base (Debian/Ubuntu), or pass the folder holding "
            "data.noun and index.noun"
        )
    try:
        import nltk.data
        from nltk.corpus.reader.wordnet import WordNetCorpusReader
    except ImportError as e:
        raise MissingDependencyError("WordNet pairs need nltk: pip install nltk") from e
    # NLTK reads only from folders on its data path (its path sandbox): authorise this one.
    if str(root.resolve()) not in map(str, nltk.data.path):
        nltk.data.path.append(str(root.resolve()))
    lexnames = _lexnames()

    class _Reader(WordNetCorpusReader):
        def open(self, file: str) -> Any:
            if file == "lexnames" and not (root / "lexnames").is_file():
                return io.StringIO(lexnames)
            return super().open(file)

        def map_wn(self, version: str = "wordnet") -> None:
            return None  # maps to NLTK's own downloaded WordNet for multilingual data: not used

    with warnings.catch_warnings():  # "multilingual functions are not available": not used here
        warnings.simplefilter("ignore", UserWarning)
        return _Reader(str(root.resolve()), None)


def _words(text: str) -> int:
    return len(text.split())


def _mentions(text: str, term: str) -> bool:
    return re.search(rf"(?<!\w){re.escape(term)}(?!\w)", text, re.IGNORECASE) is not None


def wordnet_pairs(
    root: str | Path = WORDNET_DIR, min_words: int = 5
) -> tuple[list[SpecificityPair], dict[str, int]]:
    """Every noun synset with a hypernym (of several, the one with the smallest offset; instance
    hypernyms are not used) as a pair:
    "What is a <first lemma>?", its gloss (specific), its hypernym's gloss (general).

    Kept only when both glosses have ``>= min_words`` words, differ, and neither contains any of
    the synset's lemmas (else the answer names what it defines). Returns ``(pairs, counts)``,
    pairs ordered by synset offset.
    """
    if min_words < 1:
        raise InvalidParameterError(f"min_words must be >= 1, got {min_words}")
    wn = open_wordnet(root)
    counts = {"noun synsets": 0, "no hypernym": 0, f"gloss under {min_words} words": 0,
              "gloss names the lemma": 0, "same gloss": 0, "kept": 0}  # fmt: skip
    pairs = []
    for syn in wn.all_synsets("n"):
        counts["noun synsets"] += 1
        # NLTK keeps pointers in a set: its order changes between runs, the offsets do not
        hyper = sorted(syn.hypernyms(), key=lambda h: h.offset())
        if not hyper:
            counts["no hypernym"] += 1
            continue
        spec, gen = syn.definition().strip(), hyper[0].definition().strip()
        lemmas = [name.replace("_", " ") for name in syn.lemma_names()]
        if min(_words(spec), _words(gen)) < min_words:
            counts[f"gloss under {min_words} words"] += 1
        elif any(_mentions(g, lem) for lem in lemmas for g in (spec, gen)):
            counts["gloss names the lemma"] += 1
        elif spec.casefold() == gen.casefold():
            counts["same gloss"] += 1
        else:
            counts["kept"] += 1
            meta = {"source": "wordnet", "synset": syn.name(), "hypernym": hyper[0].name(),
                    "lexname": syn.lexname()}  # fmt: skip
            pairs.append(SpecificityPair(f"What is a {lemmas[0]}?", spec, gen, meta))
    return pairs, counts


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        raise InvalidInputError(f"{path} not found: pass a folder written by `normrank depthset build`")
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def document_order(sources: Sequence[str | Path]) -> dict[str, int]:
    """Each paragraph's case-folded text -> its first position in ``sources`` (HTML / Markdown
    files or folders, read in sorted order with the depth-set builder's own parsers), the order a
    depth set does not keep."""
    from normrank.corpus.depthset import parse_html, parse_markdown

    order: dict[str, int] = {}
    for src in sources:
        src = Path(src)
        if not src.exists():
            raise InvalidInputError(f"{src} does not exist")
        files = [src] if src.is_file() else sorted(p for p in src.rglob("*") if p.is_file())
        for f in files:
            suffix = f.suffix.lower()
            if suffix in (".html", ".htm", ".xhtml"):
                page = parse_html(f.read_bytes(), str(f))
            elif suffix in (".md", ".markdown"):
                page = parse_markdown(f.read_text(encoding="utf-8", errors="replace"), str(f))
            else:
                continue
            for kind, _, text in page.blocks:
                if kind == "p" and text:
                    order.setdefault(text.casefold(), len(order))
    return order


def manual_pairs(
    depthset: str | Path,
    order: dict[str, int] | None = None,
    min_words: int = 5,
    max_words: int | None = None,
) -> tuple[list[SpecificityPair], dict[str, int]]:
    """Pairs from a depth set (hierarchical qrels: a paragraph belongs to the lowest heading it
    sits under). For every heading C whose parent heading P has paragraphs of its own: the
    question is C's heading path (TREC CAR's query text), the general answer P's first paragraph,
    the specific answer C's first paragraph.

    ``order`` maps a paragraph's case-folded text to its position in the documents (a depth set
    keeps no order: :func:`normrank.corpus.depthset.parse_html` gives it); without it, or for a
    paragraph it does not know, the first is the one with the smallest id. Paragraphs outside
    ``min_words..max_words`` words are not used (``max_words`` keeps the general answer, repeated,
    within the models' input length). Returns ``(pairs, counts)`` ordered by question id.
    """
    root = Path(depthset)
    corpus = {d["_id"]: d["text"] for d in _read_jsonl(root / "corpus.jsonl")}
    queries = {q["_id"]: q for q in _read_jsonl(root / "queries.jsonl")}
    qrels_path = root / "qrels" / "test.tsv"
    if not qrels_path.is_file():
        raise InvalidInputError(f"{qrels_path} not found: pass a folder written by `normrank depthset build`")
    own: dict[str, list[str]] = {}
    for line in qrels_path.read_text(encoding="utf-8").splitlines()[1:]:
        qid, did, *_ = line.split("\t")
        if did in corpus:
            own.setdefault(qid, []).append(did)

    def usable(did: str) -> bool:
        n = _words(corpus[did])
        return n >= min_words and (max_words is None or n <= max_words)

    def first(qid: str) -> str | None:
        docs = [d for d in own.get(qid, []) if usable(d)]
        if not docs:
            return None
        pos = order or {}
        return min(docs, key=lambda d: (pos.get(corpus[d].casefold(), 1 << 62), d))

    by_path = {tuple(q["metadata"]["path"]): qid for qid, q in queries.items()}
    counts = {"headings": len(queries), "top level": 0, "parent has no usable paragraph": 0,
              "no usable paragraph": 0, "same paragraph": 0, "kept": 0}  # fmt: skip
    pairs = []
    for qid in sorted(queries):
        path = tuple(queries[qid]["metadata"]["path"])
        if len(path) < 2:
            counts["top level"] += 1
            continue
        parent = by_path.get(path[:-1])
        spec, gen = first(qid), first(parent) if parent else None
        if gen is None:
            counts["parent has no usable paragraph"] += 1
        elif spec is None:
            counts["no usable paragraph"] += 1
        elif spec == gen:
            counts["same paragraph"] += 1
        else:
            counts["kept"] += 1
            meta = {"source": root.name, "query_id": qid, "depth": len(path), "parent_id": parent}
            pairs.append(SpecificityPair(queries[qid]["text"], corpus[spec], corpus[gen], meta))
    return pairs, counts


def sample_pairs(pairs: Sequence[SpecificityPair], n: int | None, seed: int = 0) -> list[SpecificityPair]:
    """``n`` pairs drawn without replacement with ``seed`` (all of them when ``n`` is None or
    at least their number), in their original order."""
    if n is None or n >= len(pairs):
        return list(pairs)
    if n < 1:
        raise InvalidParameterError(f"sample size must be >= 1, got {n}")
    keep = np.sort(np.random.default_rng(seed).choice(len(pairs), size=n, replace=False))
    return [pairs[i] for i in keep]


def one_per(pairs: Sequence[SpecificityPair], key: str, seed: int = 0) -> list[SpecificityPair]:
    """One pair per value of ``meta[key]`` (e.g. one child per parent heading, so no general
    answer serves two pairs), drawn with ``seed``, in the pairs' original order."""
    groups: dict[Any, list[int]] = {}
    for i, p in enumerate(pairs):
        if key not in p.meta:
            raise InvalidInputError(f"pair {i} has no {key!r} in its meta")
        groups.setdefault(p.meta[key], []).append(i)
    rng = np.random.default_rng(seed)
    keep = sorted(int(rng.choice(ix)) for _, ix in sorted(groups.items(), key=lambda kv: str(kv[0])))
    return [pairs[i] for i in keep]
