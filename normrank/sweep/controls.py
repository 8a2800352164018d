"""Controls beside the norm, from the same cosine matrix: is it the norm, or the length, or chance?

- **length prior**: ``cos * len**β`` over a β grid (``len``: tokens of the model's tokenizer, else
  words; :mod:`normrank.sweep.lengths`).
- **residual norm**: ``cos * r**α`` with ``log r`` the residual of ``log ||d|| = a + b log len``
  fitted by least squares on this collection's documents (the fit is reported): the part of the
  norm that length does not predict.
- **permutation null**: the norms shuffled over documents K times (:mod:`normrank.sweep.null`),
  giving the permutation p-value of the real norm's cross-validated gain.

Each weight is selected exactly as the norm is (same folds, same tie rule, the oracle best on
all queries) and tested against cosine with the same paired t-test. Their NDCG@10 comes from the
ranks of the relevant documents (:class:`normrank.sweep.null.RelevantRanks`, exact, shared with
the null), not from a second full ranking.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from normrank.settings import CV_METRIC
from normrank.sweep.result import pct
from normrank.sweep.selection import argbest, cross_validate, median, paired_t_p, quantile

__all__ = ["average_ranks", "length_residual", "permutation_summary", "spearman", "weight_control"]


def length_residual(norms: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, dict[str, float]]:
    """``(exp(residual), fit)`` of ``log ||d|| = a + b log len`` by least squares."""
    x, y = np.log(lengths.astype(np.float64)), np.log(norms.astype(np.float64))
    if np.ptp(x) == 0:  # every document the same length: nothing to regress out
        b, a = 0.0, float(y.mean())
    else:
        b, a = (float(v) for v in np.polyfit(x, y, 1))
    resid = y - (a + b * x)
    ss = float(((y - y.mean()) ** 2).sum())
    r2 = 1.0 - float((resid**2).sum()) / ss if ss > 0 else 0.0
    return np.exp(resid), {"intercept": a, "slope": b, "r2": r2}


def average_ranks(x: np.ndarray) -> np.ndarray:
    """Ranks 1..n with ties given their average rank (as ``scipy.stats.rankdata``)."""
    order = np.argsort(x, kind="stable")
    xs = x[order]
    first = np.r_[True, xs[1:] != xs[:-1]]
    group = np.cumsum(first) - 1
    starts = np.flatnonzero(first)
    ends = np.r_[starts[1:], xs.size]
    avg = (starts + ends + 1) / 2.0  # mean of ranks start+1 .. end
    out = np.empty(x.size)
    out[order] = avg[group]
    return out


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman's rank correlation (Pearson's on average ranks, as scipy's ``spearmanr``); 0 when
    either side is constant. Written out: importing ``scipy.stats`` costs seconds."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if np.ptp(x) == 0 or np.ptp(y) == 0:
        return 0.0
    return float(np.corrcoef(average_ranks(x), average_ranks(y))[0, 1])


def weight_control(
    pq: np.ndarray,
    exponents: Sequence[float],
    cosine_pq: np.ndarray,
    folds: int,
    seed: int,
    name: str = "alpha",
) -> dict[str, Any]:
    """One control weight's sweep entry from its per-query NDCG@10 ``pq`` (n_exponents, nq)."""
    ex = [float(e) for e in exponents]
    fold_ex, _, chosen = cross_validate(pq, ex, folds, seed)
    held = pq[chosen, np.arange(pq.shape[1])]
    means = pq.mean(axis=1)
    bi, base = argbest(means, ex), float(cosine_pq.mean())
    return {
        f"{name}s": ex,
        CV_METRIC: [float(v) for v in means],
        f"best_{name}": ex[bi],
        "best_gain_pct": pct(float(means[bi]), base),
        "cv": {
            f"{name}s": [float(e) for e in fold_ex],
            CV_METRIC: float(held.mean()),
            "gain_pct": pct(float(held.mean()), base),
            "p_value": paired_t_p(cosine_pq, held),
        },
        "_per_query_cv": held,  # dropped from JSON; the report and tests read it
        "_per_query": pq,  # (n_exponents, nq), dropped from JSON; the depth tables read it
    }


def permutation_summary(null_gains: np.ndarray, real_gain: float, k: int, seed: int) -> dict[str, Any]:
    """The permutation entry: p = (1 + #{null >= real}) / (K + 1), with the null's spread."""
    g = np.asarray(null_gains, dtype=np.float64)
    ge = int(np.sum(g >= real_gain - 1e-9))
    return {
        "k": int(k),
        "seed": int(seed),
        "p_value": (1 + ge) / (k + 1),
        "null_cv_gain_pct": [float(x) for x in g],
        "null_median_pct": median(g) if g.size else 0.0,
        "null_max_pct": float(g.max()) if g.size else 0.0,
        "null_q95_pct": float(quantile(g, 0.95)) if g.size else 0.0,
    }
