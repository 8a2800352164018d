"""The benchmarks' exact reference: the norm-weighted top-10 by numpy, and recall against it.

Shared by speed.py and qdrant_edge_bench.py (each imports it; neither imports the other).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

K = 10


def unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


@dataclass
class ExactTop:
    """The exact 10th score of ``cos * norm**alpha`` per query, with what scores any result."""

    kth: np.ndarray
    x_unit: np.ndarray
    norms: np.ndarray
    qu: np.ndarray
    alpha: float


def exact_top(x_unit: np.ndarray, norms: np.ndarray, qu: np.ndarray, alpha: float) -> ExactTop:
    """Reference: the exact top-10 of cos * norm**alpha by numpy, in blocks (its 10th score)."""
    w = norms.astype(np.float64) ** alpha
    kth = np.empty(qu.shape[0])
    for i in range(0, qu.shape[0], 256):
        s = (qu[i : i + 256] @ x_unit.T) * w
        kth[i : i + 256] = -np.partition(-s, K - 1, axis=1)[:, K - 1]
    return ExactTop(kth, x_unit, norms, qu, alpha)


def recall(got: np.ndarray, ref: ExactTop) -> float:
    """Recall@10 against the exact top-10, ties counted: a result is right when its exact score
    reaches the exact 10th score (less 1e-6 relative, float32 rounding). The corpora hold
    duplicated documents, and which of two equal scores an exact reference keeps is arbitrary;
    counting by id would score the reference's tie order, not the search."""
    hits = 0
    for i, row in enumerate(np.asarray(got)):
        row = np.unique(row[row >= 0])  # a result returned twice counts once
        s = (ref.x_unit[row].astype(np.float64) @ ref.qu[i].astype(np.float64)) * (
            ref.norms[row].astype(np.float64) ** ref.alpha
        )
        hits += min(K, int(np.sum(s >= ref.kth[i] - 1e-6 * abs(ref.kth[i]))))
    return hits / (K * len(got))
