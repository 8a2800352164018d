"""Choosing α honestly: k-fold cross-validation over queries and the paired test against cosine.

The oracle best α is chosen on the test queries (as the paper's Fig. 4); the cross-validated α is
chosen on the other folds by the CV metric and scored on the held-out fold; the pooled held-out
run is compared with cosine by a paired t-test.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from normrank.errors import InvalidParameterError
from normrank.settings import CV_METRIC

__all__ = ["argbest", "cross_validate", "paired_p_ranx", "ranx_run"]


def argbest(values: np.ndarray, alphas: Sequence[float]) -> int:
    """Index of the best value; ties go to the α closest to 0 (cosine), then the smaller α."""
    best = np.max(values)
    cands = [i for i, v in enumerate(values) if v >= best - 1e-12]
    return min(cands, key=lambda i: (abs(alphas[i]), alphas[i]))


def cross_validate(
    per_query: np.ndarray, alphas: Sequence[float], folds: int, seed: int = 0
) -> tuple[list[float], np.ndarray, np.ndarray]:
    """k-fold α selection over queries.

    Args:
        per_query: (n_alphas, nq) values of the selection metric.
    Returns:
        ``(fold_alphas, fold_of_query, chosen_alpha_index_per_query)``.
    """
    nq = per_query.shape[1]
    if folds < 2:
        raise InvalidParameterError(f"folds must be >= 2, got {folds}")
    folds = min(folds, nq)
    perm = np.random.default_rng(seed).permutation(nq)
    fold = np.empty(nq, dtype=np.int64)
    fold[perm] = np.arange(nq) % folds
    chosen = np.empty(nq, dtype=np.int64)
    fold_alphas = []
    for f in range(folds):
        train = fold != f
        ai = argbest(per_query[:, train].mean(axis=1), alphas)
        fold_alphas.append(float(alphas[ai]))
        chosen[fold == f] = ai
    return fold_alphas, fold, chosen


def ranx_run(
    name: str, qids: Sequence[str], scores: np.ndarray, pos: np.ndarray, doc_ids: Sequence[str]
) -> Any:
    """A ranx ``Run`` from top-k ``scores``/``pos`` (nq, k); -1 padding dropped."""
    from ranx import Run

    run = {
        q: {doc_ids[p]: float(s) for s, p in zip(scores[i], pos[i], strict=True) if p >= 0}
        for i, q in enumerate(qids)
    }
    return Run(run, name=name)


def paired_p_ranx(qrels: Any, a: Any, make_b: Callable[[], Any], da: np.ndarray, db: np.ndarray) -> float:
    """ranx paired t-test p-value of run a vs run ``make_b()`` on NDCG@10 (1.0 when they never differ)."""
    if np.array_equal(da, db):
        return 1.0
    from ranx import compare

    b = make_b()
    rep = compare(qrels, [a, b], [CV_METRIC], stat_test="student", make_comparable=True).to_dict()
    comp = rep[a.name]["comparisons"][b.name][CV_METRIC]
    p = float(comp["p_value"] if isinstance(comp, dict) else comp)
    return p if np.isfinite(p) else 1.0
