"""Calibration, measured: does a score separate relevant from non-relevant (query, document)
pairs POOLED over queries, so that one global threshold means the same for every query?

The paper (“Optimization Dynamics Imprint Semantic Specificity in Contrastive Embedding Norms”,
§4.3, eq. 4.20) proposes the symmetric score ``cos · ‖q‖^−γ ‖d‖^−γ`` for "pairwise calibration
across varying queries". Among each query's cosine top-100 candidates, pooled over queries, three
scores are compared: ``cos``, ``cos · ‖q‖^−γ`` (re-scales queries only: rankings unchanged) and the
symmetric one, with γ chosen by cross-validation over queries (the sweep's folds) on pooled
AUROC. Reported per held-out fold, then averaged over folds: the AUROC of that fold's pairs
pooled, and the precision (and F1) there of the single global threshold that maximises F1 on the
other folds (so neither γ nor the threshold sees the pairs it is scored on).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from normrank.sweep.controls import average_ranks
from normrank.sweep.metrics import QrelsMatrix
from normrank.sweep.rank import rank_all_alphas, unit_rows

__all__ = ["auroc", "best_threshold", "calibration"]

CALIBRATION_DEPTH = 100


def auroc(scores: np.ndarray, labels: np.ndarray) -> float:
    """Area under the ROC curve (Mann-Whitney, ties counted half); 0.5 without both classes."""
    pos = int(labels.sum())
    neg = labels.size - pos
    if pos == 0 or neg == 0:
        return 0.5
    r = average_ranks(scores)
    return float((r[labels].sum() - pos * (pos + 1) / 2) / (pos * neg))


def best_threshold(scores: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """The global threshold with the highest F1 (keep score >= t): its precision, recall, F1."""
    order = np.argsort(-scores, kind="stable")
    s, y = scores[order], labels[order]
    tp = np.cumsum(y)
    kept = np.arange(1, s.size + 1)
    last = np.r_[s[1:] != s[:-1], True]  # a threshold can only fall between distinct scores
    prec, rec = tp / kept, tp / max(int(y.sum()), 1)
    f1 = np.where(prec + rec > 0, 2 * prec * rec / np.where(prec + rec > 0, prec + rec, 1), 0.0)
    f1 = np.where(last, f1, -1.0)
    i = int(np.argmax(f1))
    return {
        "threshold": float(s[i]),
        "precision": float(prec[i]),
        "recall": float(rec[i]),
        "f1": float(f1[i]),
    }


def calibration(
    queries: np.ndarray, docs: np.ndarray, qm: QrelsMatrix, fold: np.ndarray, gammas: Sequence[float]
) -> dict[str, Any]:
    """Pooled AUROC and best-threshold precision of cos, cos·‖q‖^−γ and cos·‖q‖^−γ‖d‖^−γ."""
    _, qnorm = unit_rows(queries, "queries")
    _, dnorm = unit_rows(docs, "documents")
    scores, pos, _ = rank_all_alphas(queries, docs, None, [0.0], CALIBRATION_DEPTH)
    cos, pos = scores[0].astype(np.float64), pos[0]
    valid = pos >= 0
    labels = qm.relevance(pos) > 0
    lq = np.log(qnorm.astype(np.float64))[:, None]
    ld = np.log(dnorm.astype(np.float64))[np.where(valid, pos, 0)]
    g = np.asarray(gammas, dtype=np.float64)
    forms = {
        "cos": None,
        "query": lambda gam: cos * np.exp(-gam * lq),
        "symmetric": lambda gam: cos * np.exp(-gam * (lq + ld)),
    }
    out: dict[str, Any] = {"depth": CALIBRATION_DEPTH, "gammas": [float(x) for x in g], "pairs": int(valid.sum()),
                           "relevant_pairs": int(labels[valid].sum())}  # fmt: skip
    for name, fn in forms.items():
        grid = [cos] if fn is None else [fn(gam) for gam in g]
        chosen, aucs_f, prec_f, f1_f = [], [], [], []
        for f in np.unique(fold):
            train, test = (fold != f)[:, None] & valid, (fold == f)[:, None] & valid
            aucs = np.array([auroc(sg[train], labels[train]) for sg in grid])
            ok = np.flatnonzero(aucs >= aucs.max() - 1e-12)
            gi = 0 if fn is None else int(ok[np.argmin(np.abs(g[ok]))])  # ties: the γ closest to 0
            chosen.append(float(g[gi]) if fn is not None else 0.0)
            sg = grid[gi]
            # Held out: this fold's pairs pooled, scored with the γ and the threshold of the others.
            t = best_threshold(sg[train], labels[train])["threshold"]
            kept, y = sg[test] >= t, labels[test]
            tp = int((kept & y).sum())
            prec, rec = tp / max(int(kept.sum()), 1), tp / max(int(y.sum()), 1)
            aucs_f.append(auroc(sg[test], y))
            prec_f.append(prec)
            f1_f.append(2 * prec * rec / (prec + rec) if prec + rec else 0.0)
        out[name] = {
            "cv_gammas": chosen if fn is not None else [],
            "auroc": float(np.mean(aucs_f)),
            "threshold_precision": float(np.mean(prec_f)),
            "threshold_f1": float(np.mean(f1_f)),
        }
    return out
