"""Training pairs, and the raw features of each side from the embedding cache.

Sources (``DATA`` of ``normrank train-head``):

* a BEIR folder, ``pairs="qrels"``: (query, relevant document) for every positive judgement in
  ``qrels/{split}.tsv`` (``split="train"`` by default; SciFact has one);
* a BEIR folder, ``pairs="titles"``: (title, the document as the sweep encodes it,
  ``title + " " + text``) for every document with a title;
* a ``.tsv`` file of ``anchor<TAB>positive`` lines (``#`` lines and blank lines skipped).

Each side keeps the ids and texts the sweep caches under (documents ``"title+text"``, queries
``"text"``), so features of a collection the sweep has seen come from the cache unencoded.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from normrank.errors import InvalidInputError

__all__ = ["PairSet", "Side", "cache_model_key", "load_pair_sets", "side_features"]


@dataclass
class Side:
    """The distinct texts of one side of the pairs, keyed as the embedding cache keys them."""

    ids: list[str]
    texts: list[str]
    fields: str  # "title+text" (documents), "text" (queries, TSV lines), "title"
    part: str  # cache manifest label, e.g. "corpus", "queries-train"
    label: str  # the dataset, for the cache manifest


@dataclass
class PairSet:
    """Pairs ``(anchors.texts[ia[k]], positives.texts[ib[k]])`` from one source."""

    anchors: Side
    positives: Side
    ia: np.ndarray
    ib: np.ndarray
    source: str  # how the pairs were made, for train_log.json

    def __len__(self) -> int:
        return len(self.ia)


def cache_model_key(model: str, options: dict[str, Any] | None) -> str:
    """The embedding-cache key of a model spec, as the sweep writes it
    (:func:`normrank.sweep.embed.model_key`; restated here because train sits beside sweep,
    not above it; a test checks the two agree)."""
    name = model.split("/", 1)[1] if model.startswith("sentence-transformers/") else model
    if options:
        name += "|" + ",".join(f"{k}={options[k]}" for k in sorted(options) if k != "device")
    return name


def _beir_pairs(folder: str, pairs: str, split: str) -> PairSet:
    from normrank.corpus.beir import load_dataset

    if pairs == "qrels":
        qrels = Path(folder) / "qrels" / f"{split}.tsv"
        if Path(folder).is_dir() and not qrels.is_file():
            raise InvalidInputError(
                f"{qrels} does not exist: pass --split with a qrels file the folder has (and do not "
                "evaluate the head on that split), or --pairs titles"
            )
    ds = load_dataset(folder, split if pairs == "qrels" else "test")
    label = ds.source or ds.name
    docs = Side(list(ds.doc_ids), list(ds.doc_texts), "title+text", "corpus", label)
    where = {d: i for i, d in enumerate(ds.doc_ids)}
    if pairs == "titles":
        rows = [i for i, t in enumerate(ds.doc_titles) if t.strip()]
        if len(rows) < 2:
            raise InvalidInputError(f"{folder}: fewer than two documents have a title (--pairs titles)")
        titles = Side([ds.doc_ids[i] for i in rows], [ds.doc_titles[i] for i in rows], "title",
                      "titles", label)  # fmt: skip
        ia = np.arange(len(rows))
        return PairSet(
            titles, docs, ia, np.asarray(rows), f"{label}: title -> title + text, {len(rows)} documents"
        )
    qids, qtexts = ds.judged()
    ia, ib = [], []
    for k, q in enumerate(qids):
        for d, grade in ds.qrels[q].items():
            if grade > 0 and d in where:
                ia.append(k)
                ib.append(where[d])
    if len(ia) < 2:
        raise InvalidInputError(f"{folder}: fewer than two positive judgements in qrels/{split}.tsv")
    queries = Side(qids, qtexts, "text", f"queries-{ds.split}", label)
    return PairSet(queries, docs, np.asarray(ia), np.asarray(ib),
                   f"{label}: qrels/{split}.tsv query -> relevant document, {len(ia)} pairs")  # fmt: skip


def read_tsv(path: Path) -> list[tuple[str, str]]:
    """``anchor<TAB>positive`` per line; extra columns ignored; ``#`` and blank lines skipped."""
    out = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise InvalidInputError(f"{path}: cannot be read as UTF-8 text ({e})") from e
    for no, line in enumerate(lines, 1):
        if not line.strip() or line.startswith("#"):
            continue
        cols = line.split("\t")
        if len(cols) < 2 or not cols[0].strip() or not cols[1].strip():
            raise InvalidInputError(f"{path}:{no}: expected anchor<TAB>positive")
        out.append((cols[0], cols[1]))
    if len(out) < 2:
        raise InvalidInputError(f"{path}: fewer than two pairs")
    return out


def tsv_pair_set(path: Path) -> PairSet:
    """Distinct anchors and positives of a TSV file, as a :class:`PairSet`."""
    rows = read_tsv(path)
    anchors = list(dict.fromkeys(a for a, _ in rows))
    positives = list(dict.fromkeys(b for _, b in rows))
    wa, wb = {t: i for i, t in enumerate(anchors)}, {t: i for i, t in enumerate(positives)}
    ia = np.array([wa[a] for a, _ in rows])
    ib = np.array([wb[b] for _, b in rows])
    label = str(path.resolve())
    a = Side([str(i) for i in range(len(anchors))], anchors, "text", "tsv-anchors", label)
    b = Side([str(i) for i in range(len(positives))], positives, "text", "tsv-positives", label)
    return PairSet(a, b, ia, ib, f"{path.name}: anchor<TAB>positive, {len(rows)} pairs")


def load_pair_sets(data: Sequence[str], pairs: str = "qrels", split: str = "train") -> list[PairSet]:
    """One :class:`PairSet` per source in ``data`` (BEIR folders or names, ``.tsv`` files)."""
    if pairs not in ("qrels", "titles"):
        raise InvalidInputError(f"pairs must be 'qrels' or 'titles', got {pairs!r}")
    if not data:
        raise InvalidInputError("no training data given")
    out = []
    for src in data:
        p = Path(src).expanduser()
        out.append(tsv_pair_set(p) if p.is_file() else _beir_pairs(str(src), pairs, split))
    return out


def side_features(
    side: Side, model_key: str, encoder: Callable[[], Any], cache: Any, *, show_progress: bool = False
) -> np.ndarray:
    """Raw base-encoder features of one side, from the cache or encoded once and cached."""
    emb, _ = cache.get_or_encode(
        model_key, side.label, side.part, side.ids, side.texts, encoder, fields=side.fields,
        show_progress=show_progress,
    )  # fmt: skip
    return emb
