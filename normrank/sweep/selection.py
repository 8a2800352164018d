"""Choosing α honestly: k-fold cross-validation over queries and the paired test against cosine.

The oracle best α is chosen on the test queries (as the paper's Fig. 4); the cross-validated α is
chosen on the other folds by the CV metric and scored on the held-out fold; the pooled held-out
run is compared with cosine by a paired t-test.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from normrank.errors import InvalidParameterError, MissingDependencyError
from normrank.settings import CV_METRIC

__all__ = [
    "argbest",
    "cross_validate",
    "cv_choose_many",
    "import_ranx",
    "median",
    "paired_p_ranx",
    "paired_t_p",
    "quantile",
    "ranx_run",
]


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


_CV_CHUNK = 1 << 15  # (sweep, α, query) values per block: each fold's copy stays in cache


def cv_choose_many(per_query: np.ndarray, alphas: Sequence[float], fold: np.ndarray) -> np.ndarray:
    """:func:`cross_validate`'s choice for many sweeps at once, on given folds.

    Args:
        per_query: (B, n_alphas, nq) values of the selection metric for B sweeps.
        fold: (nq,) fold of each query (from :func:`cross_validate`).
    Returns:
        (B, nq) held-out values: each query scored at the α chosen on the other folds, with
        :func:`argbest`'s tie rule (closest to 0, then smaller).
    """
    a = np.asarray(alphas, dtype=np.float64)
    pref = np.lexsort((a, np.abs(a)))  # the tie order of argbest
    nb, na, nq = per_query.shape
    out = np.empty((nb, nq))
    # Fold numbers present, ascending, as np.unique gives them (which imports numpy.ma on first use).
    splits = [(fold == f, fold != f) for f in np.flatnonzero(np.bincount(fold))]
    step = max(1, _CV_CHUNK // max(na * nq, 1))  # each sweep's values are reduced alone: same bits
    for b0 in range(0, nb, step):
        pq = per_query[b0 : b0 + step][:, pref]
        for test, train in splits:
            train_mean = pq[:, :, train].mean(axis=2)  # as cross_validate computes it: equal ties
            ok = train_mean >= train_mean.max(axis=1, keepdims=True) - 1e-12
            chosen = np.argmax(ok, axis=1)  # first acceptable in tie order
            out[b0 : b0 + step, test] = np.take_along_axis(pq[:, :, test], chosen[:, None, None], 1)[:, 0]
    return out


def quantile(x: np.ndarray, q: float) -> np.ndarray:
    """``np.quantile(x, q, axis=0)`` (its default "linear" method) for finite float64 ``x``, the
    same bits: written out because np.quantile and np.median import ``numpy.ma`` on first use
    (~10 ms in a fresh process, more than the sweep's CV and test together)."""
    x = np.sort(np.asarray(x, dtype=np.float64), axis=0)
    n = x.shape[0]
    virtual = (n - 1) * q  # numpy's virtual index for its linear method
    prev = min(max(math.floor(virtual), 0), n - 1)
    nxt = min(prev + 1, n - 1)
    gamma = np.float64(virtual - prev) if virtual < n - 1 else np.float64(0.0)
    a, b = x[prev], x[nxt]
    diff = b - a
    # numpy's _lerp: from the lower end below gamma = 0.5, from the upper end at and above it
    return b - diff * (1 - gamma) if gamma >= 0.5 else a + diff * gamma


def median(x: np.ndarray) -> float:
    """``np.median`` of a finite 1-D ``x``, the same bits (see :func:`quantile`)."""
    x = np.sort(np.asarray(x, dtype=np.float64))
    h = x.size // 2
    return float(x[h]) if x.size % 2 else float((x[h - 1] + x[h]) / 2.0)


def _betainc(a: float, b: float, x: float) -> float:
    """Regularised incomplete beta I_x(a, b) by its continued fraction (modified Lentz)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    if x > (a + 1.0) / (a + b + 2.0):  # the fraction converges fast on this side only
        return 1.0 - _betainc(b, a, 1.0 - x)
    front = (
        math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
        / a
    )
    tiny = 1e-300
    f, c, d = 1.0, 1.0, 0.0
    for i in range(400):
        m = i // 2
        if i == 0:
            num = 1.0
        elif i % 2 == 0:
            num = m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m))
        else:
            num = -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))
        d = 1.0 + num * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + num / c
        c = c if abs(c) > tiny else tiny
        f *= c * d
        if abs(1.0 - c * d) < 1e-15:
            break
    return front * (f - 1.0)


ROUNDING = 1e-12  # per-query metric differences below this are summation-order noise


def paired_t_p(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sided paired t-test p-value of per-query values ``b`` vs ``a``: the test of scipy's
    ``ttest_rel``, which ranx's ``compare(stat_test="student")`` runs (tests check equality).
    The t tail is written out (``p = I_{df/(df+t^2)}(df/2, 1/2)``) because importing scipy.stats
    costs seconds in a fresh process, more than the whole sweep. 1.0 when the two never differ.

    Differences within float rounding (|d| <= 1e-12) count as none: NDCG summed in another order
    differs in the last bits, and the t statistic of pure rounding noise is arbitrary, while a
    real change of rank moves NDCG@10 by more than 1e-4."""
    d = np.asarray(b, dtype=np.float64) - np.asarray(a, dtype=np.float64)
    d[np.abs(d) <= ROUNDING] = 0.0
    n = d.size
    if n < 2 or not np.any(d):
        return 1.0
    sd = float(d.std(ddof=1))
    if sd == 0:  # every query moved by the same amount: the t statistic is infinite
        return 0.0
    t = float(d.mean()) / (sd / math.sqrt(n))
    df = n - 1
    return float(min(1.0, _betainc(df / 2.0, 0.5, df / (df + t * t))))


def import_ranx() -> Any:
    """The ranx module, imported on first use: only the ranx cross-check needs it (and numba,
    which ranx compiles its metrics with), so both live in the ``bench`` extra, not the core."""
    try:
        import ranx
    except ImportError as e:
        raise MissingDependencyError(
            f"the ranx cross-check needs ranx and numba ({e}): pip install 'normrank[bench]'"
        ) from e
    return ranx


def ranx_run(
    name: str, qids: Sequence[str], scores: np.ndarray, pos: np.ndarray, doc_ids: Sequence[str]
) -> Any:
    """A ranx ``Run`` from top-k ``scores``/``pos`` (nq, k); -1 padding dropped."""
    run = {
        q: {doc_ids[p]: float(s) for s, p in zip(scores[i], pos[i], strict=True) if p >= 0}
        for i, q in enumerate(qids)
    }
    return import_ranx().Run(run, name=name)


def paired_p_ranx(qrels: Any, a: Any, make_b: Callable[[], Any], da: np.ndarray, db: np.ndarray) -> float:
    """ranx paired t-test p-value of run a vs run ``make_b()`` on NDCG@10 (1.0 when they never differ)."""
    if np.array_equal(da, db):
        return 1.0
    b = make_b()
    rep = (
        import_ranx().compare(qrels, [a, b], [CV_METRIC], stat_test="student", make_comparable=True).to_dict()
    )
    comp = rep[a.name]["comparisons"][b.name][CV_METRIC]
    p = float(comp["p_value"] if isinstance(comp, dict) else comp)
    return p if np.isfinite(p) else 1.0
