"""Text pairs for the probe's virtual objective.

* :func:`pairs_from_qrels`: (query, relevant document) from a BEIR folder's ``qrels/train.tsv``
  (SciFact has one), every row with a positive grade.
* :func:`self_pairs`: from the documents alone: title <-> text where a title exists, otherwise
  the first half of the words <-> the second half.
* :func:`pairs_from_tsv`: a file of ``anchor<TAB>positive`` lines (lines starting with ``#``
  and blank lines are skipped).
* :func:`load_pairs`: picks one of these for a data folder.
"""

from __future__ import annotations

from pathlib import Path

from normrank.corpus.beir import read_jsonl, read_qrels, resolve_beir_folder
from normrank.errors import InvalidInputError

__all__ = ["load_pairs", "pairs_from_qrels", "pairs_from_tsv", "read_corpus", "self_pairs"]


def _read_jsonl(path: Path) -> dict[str, dict]:
    """{_id: row}, every line validated by the sweep's own BEIR reader (file and line in errors)."""
    ids, rows = read_jsonl(path, fields=("title", "text"))
    return dict(zip(ids, rows, strict=True))


def read_corpus(folder: str | Path) -> tuple[list[str], list[str], list[str], list[str]]:
    """``(doc_ids, titles, bodies, doc_texts)`` of a BEIR folder (or a BEIR name, resolved as
    :func:`normrank.corpus.beir.resolve_beir_folder` does), ``doc_text = title + " " + body``.

    Only ``corpus.jsonl`` is needed: the probe reads documents, not queries or judgements.
    """
    path = Path(folder)
    if not path.is_dir():
        path = resolve_beir_folder(str(folder), download=False)
    corpus = path / "corpus.jsonl"
    if not corpus.is_file():
        raise InvalidInputError(f"{folder} is not a BEIR folder (no corpus.jsonl)")
    rows = _read_jsonl(corpus)
    ids = list(rows)
    titles = [str(rows[i].get("title") or "") for i in ids]
    bodies = [str(rows[i].get("text") or "") for i in ids]
    texts = [f"{t} {b}".strip() for t, b in zip(titles, bodies, strict=True)]
    return ids, titles, bodies, texts


def pairs_from_qrels(folder: str | Path, split: str = "train") -> list[tuple[str, str]]:
    """(query text, title + " " + text) for every positive judgement in ``qrels/{split}.tsv``."""
    folder = Path(folder)
    qrels = folder / "qrels" / f"{split}.tsv"
    if not qrels.is_file():
        raise InvalidInputError(f"{qrels} does not exist")
    queries = _read_jsonl(folder / "queries.jsonl")
    corpus = _read_jsonl(folder / "corpus.jsonl")
    pairs = []
    for qid, judged in read_qrels(qrels).items():
        for did, score in judged.items():
            if score <= 0:
                continue
            if qid not in queries or did not in corpus:
                raise InvalidInputError(
                    f"{qrels}: query {qid!r} or document {did!r} is not in the collection"
                )
            doc = corpus[did]
            pairs.append((queries[qid]["text"], f"{doc.get('title') or ''} {doc.get('text') or ''}".strip()))
    return pairs


def self_pairs(titles: list[str], texts: list[str]) -> list[tuple[str, str]]:
    """title <-> text where both exist, else the two halves of the text's words (>= 2 words)."""
    pairs = []
    for title, text in zip(titles, texts, strict=True):
        title, text = (title or "").strip(), (text or "").strip()
        if title and text:
            pairs.append((title, text))
            continue
        words = (text or title).split()
        if len(words) >= 2:
            half = len(words) // 2
            pairs.append((" ".join(words[:half]), " ".join(words[half:])))
    return pairs


def pairs_from_tsv(path: str | Path) -> list[tuple[str, str]]:
    """``anchor<TAB>positive`` per line; extra columns are ignored."""
    pairs = []
    with Path(path).open(encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line.strip() or line.startswith("#"):
                continue
            cols = line.split("\t")
            if len(cols) < 2 or not cols[0].strip() or not cols[1].strip():
                raise InvalidInputError(f"{path}:{n}: expected 'anchor<TAB>positive'")
            pairs.append((cols[0], cols[1]))
    return pairs


def load_pairs(source: str | Path, *, titles: list[str] | None = None, texts: list[str] | None = None):
    """Pairs for a probe run, and a short description of where they came from.

    ``source``: a TSV file of pairs, or a BEIR folder (train qrels when present, else self-pairs
    from ``titles``/``texts``, which must then be given).
    """
    source = Path(source)
    if source.is_file():
        return pairs_from_tsv(source), f"tsv:{source.name}"
    if (source / "qrels" / "train.tsv").is_file():
        return pairs_from_qrels(source, "train"), "qrels/train.tsv (query, relevant document)"
    if titles is None or texts is None:
        raise InvalidInputError(f"{source} has no qrels/train.tsv; give the documents for self-pairs")
    has_titles = any(t.strip() for t in titles)
    return self_pairs(
        titles, texts
    ), "self-pairs (title <-> text)" if has_titles else "self-pairs (text halves)"
