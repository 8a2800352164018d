"""Vectorised ranking metrics over many rankings at once, matching ranx exactly.

The α-sweep ranks the same queries ~13 times; building a ranx ``Run`` per α costs more than the
ranking itself. These kernels take top-k document positions of shape ``(..., nq, k)`` and return
per-query values of shape ``(..., nq)``, with ranx's definitions (tests check equality). One
registry, :data:`METRICS`, holds them; the CLI help and the error for an unknown name are built
from it, so the list cannot drift.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from normrank.errors import InvalidParameterError

__all__ = ["METRICS", "Metric", "QrelsMatrix", "metrics_help", "parse_metrics", "per_query_metric"]


def metrics_help() -> str:
    """``"ndcg (...), recall (...), ..."``: the registry as one line, for help and errors."""
    return ", ".join(f"{name} ({m.description})" for name, m in METRICS.items())


def parse_metrics(spec: str | Sequence[str]) -> list[str]:
    """``"ndcg@10,recall@100"`` -> ``["ndcg@10", "recall@100"]``, validated."""
    items = [s.strip().lower() for s in (spec.split(",") if isinstance(spec, str) else spec) if s.strip()]
    if not items:
        raise InvalidParameterError("no metrics given")
    for m in items:
        name, _, k = m.partition("@")
        if name not in METRICS or not k.isdigit() or int(k) < 1:
            raise InvalidParameterError(f"bad metric {m!r}: use NAME@K with NAME one of {', '.join(METRICS)}")
    return list(dict.fromkeys(items))


# Up to this many (query, document) entries, relevance is read from a dense float64 table (64 MB)
# rather than searched in the sorted keys: the α-sweep looks up every α's top 100.
_DENSE_RELEVANCE = 1 << 23


class QrelsMatrix:
    """Graded judgements of ``nq`` queries over documents ``0..n-1``, for fast lookup.

    ``qrels[q]`` maps document id -> relevance; ids absent from ``doc_index`` still count as
    relevant documents that were never retrieved (as ranx counts them).
    """

    def __init__(self, qrels: Sequence[dict[str, int]], doc_index: dict[str, int]) -> None:
        self.nq = len(qrels)
        self.n = len(doc_index)
        keys, rels = [], []
        self.n_rel = np.zeros(self.nq, dtype=np.int64)
        self.ideal: list[np.ndarray] = []
        for qi, judged in enumerate(qrels):
            pos = sorted((r for r in judged.values() if r >= 1), reverse=True)
            self.n_rel[qi] = len(pos)
            self.ideal.append(np.asarray(pos, dtype=np.float64))
            for doc, r in judged.items():
                j = doc_index.get(doc)
                if j is not None and r >= 1:
                    keys.append(qi * self.n + j)
                    rels.append(r)
        order = np.argsort(np.asarray(keys, dtype=np.int64), kind="stable")
        self._keys = np.asarray(keys, dtype=np.int64)[order]
        self._rels = np.asarray(rels, dtype=np.float64)[order]
        self._dense: np.ndarray | None = None
        self._table: np.ndarray | None = None

    def relevance(self, positions: np.ndarray) -> np.ndarray:
        """Relevance of each retrieved position, shape of ``positions`` (..., nq, k); -1 -> 0."""
        q = np.arange(self.nq, dtype=np.int64).reshape(-1, 1)
        if self._keys.size == 0:
            return np.zeros(positions.shape, dtype=np.float64)
        if self.nq * (self.n + 1) <= _DENSE_RELEVANCE:
            if self._table is None:  # (nq, n + 1), the last column 0: where position -1 lands
                # Grades are small integers: one byte each keeps the table in cache (an eighth of
                # float64's fresh pages); the values read back are the same.
                small = bool(np.all((self._rels == np.round(self._rels)) & (self._rels <= 255)))
                self._table = np.zeros(self.nq * (self.n + 1), dtype=np.uint8 if small else np.float64)
                self._table[self._keys + self._keys // max(self.n, 1)] = self._rels
            # q * (n + 1) - 1 is the previous row's zero column (q = 0: the last row's)
            return self._table[q * (self.n + 1) + positions].astype(np.float64, copy=False)
        keys = q * self.n + positions
        idx = np.minimum(np.searchsorted(self._keys, keys), self._keys.size - 1)
        hit = (self._keys[idx] == keys) & (positions >= 0)
        return np.where(hit, self._rels[idx], 0.0)

    def pairs(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(query, document, relevance)`` of every judged-relevant pair found in the collection,
        sorted by query then document position (int64, int64, float64)."""
        return self._keys // max(self.n, 1), self._keys % max(self.n, 1), self._rels

    def relevance_rows(self, rows: np.ndarray) -> np.ndarray:
        """Relevance of every document for queries ``rows``: (len(rows), n), from a dense copy
        built once (nq x n floats; kept only by callers that rank whole rows)."""
        if getattr(self, "_dense", None) is None:
            self._dense = np.zeros(self.nq * self.n, dtype=np.float32)
            self._dense[self._keys] = self._rels
            self._dense = self._dense.reshape(self.nq, self.n)
        return self._dense[rows]

    def idcg(self, k: int) -> np.ndarray:
        disc = 1.0 / np.log2(np.arange(2, k + 2))
        out = np.zeros(self.nq)
        for qi, ideal in enumerate(self.ideal):
            top = ideal[:k]
            out[qi] = np.sum(top * disc[: top.size])
        return out


def _ndcg(rel: np.ndarray, hit: np.ndarray, qm: QrelsMatrix, k: int) -> np.ndarray:
    disc = 1.0 / np.log2(np.arange(2, rel.shape[-1] + 2))
    dcg = (rel * disc).sum(axis=-1)
    idcg = qm.idcg(k)
    return np.where(idcg > 0, dcg / np.where(idcg > 0, idcg, 1.0), 0.0)


def _recall(rel: np.ndarray, hit: np.ndarray, qm: QrelsMatrix, k: int) -> np.ndarray:
    return np.where(qm.n_rel > 0, hit.sum(axis=-1) / np.maximum(qm.n_rel, 1), 0.0)


def _mrr(rel: np.ndarray, hit: np.ndarray, qm: QrelsMatrix, k: int) -> np.ndarray:
    first = np.argmax(hit, axis=-1)
    return np.where(hit.any(axis=-1), 1.0 / (first + 1), 0.0)


def _precision(rel: np.ndarray, hit: np.ndarray, qm: QrelsMatrix, k: int) -> np.ndarray:
    return np.where(qm.n_rel > 0, hit.sum(axis=-1) / k, 0.0)


def _hit_rate(rel: np.ndarray, hit: np.ndarray, qm: QrelsMatrix, k: int) -> np.ndarray:
    return np.where(qm.n_rel > 0, hit.any(axis=-1).astype(np.float64), 0.0)


@dataclass(frozen=True)
class Metric:
    """A per-query metric: ``fn(relevance, hit, qrels, k) -> (..., nq)`` on the top-k slice."""

    description: str
    fn: Callable[[np.ndarray, np.ndarray, QrelsMatrix, int], np.ndarray]


METRICS: dict[str, Metric] = {
    "ndcg": Metric("linear gain, log2 discount, ideal DCG from the qrels; 0 without relevant docs", _ndcg),
    "recall": Metric("relevant retrieved in the top k / all relevant in the qrels", _recall),
    "mrr": Metric("1 / rank of the first relevant document in the top k, else 0", _mrr),
    "precision": Metric("relevant in the top k / k", _precision),
    "hit_rate": Metric("1 if any relevant document is in the top k", _hit_rate),
}


def per_query_metric(metric: str, positions: np.ndarray, qm: QrelsMatrix) -> np.ndarray:
    """Per-query values of ``metric`` (``"ndcg@10"``) for rankings ``positions`` (..., nq, K>=k)."""
    name, _, ks = metric.partition("@")
    if name not in METRICS or not ks.isdigit():
        raise InvalidParameterError(f"unknown metric {metric!r}; valid: {', '.join(METRICS)}")
    k = int(ks)
    pos = positions[..., :k]
    rel = qm.relevance(pos)
    return METRICS[name].fn(rel, rel > 0, qm, k)
