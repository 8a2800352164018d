"""What the Qdrant backends (client and Edge) share with :mod:`normrank.search.ann`: one definition of
the first band, the cosine depths (both :func:`normrank.search.plan.plan_search`'s), and the
band edge read off the bound.

The method is :mod:`normrank.search.ann`'s: a band of extreme norms on the side alpha favours is
fetched whole (a norm-range filter in Qdrant, a weight-order scan in FAISS) together with the
best cosines of the rest; nothing unseen can beat the k-th score once
:func:`normrank.search.bound.unseen_can_beat` says so of the trusted cosine and the largest weight
outside the band. The sizes below are those of :mod:`normrank.search.ann`, with a Qdrant
``hnsw_ef`` standing in for FAISS's ``efSearch``, so that "the same method" means the same numbers.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike

from normrank.scoring import WEIGHT_CAP
from normrank.search.bound import cosine_slack, weight_limit
from normrank.search.plan import ANY_WEIGHTED_ALPHA, SearchOptions, plan_search
from normrank.validation import as_alpha, as_k, as_vectors, split_norms

__all__ = [
    "LOG_WEIGHT_CAP",
    "band_edge",
    "first_band",
    "hnsw_params",
    "powered",
    "saturates",
    "search_depths",
    "start_search",
]

# ln(WEIGHT_CAP): a backend whose weights can saturate scores exp(min(alpha * ln w, LOG_WEIGHT_CAP)).
LOG_WEIGHT_CAP = math.log(WEIGHT_CAP)


def start_search(
    q: ArrayLike, k: int, dim: int, alpha: float | ArrayLike
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The checks and empty result both backends' ``search`` start from: ``(unit queries, one
    alpha per query, scores filled with -inf, ids filled with -1)``, FAISS's padding."""
    queries = as_vectors(q, dim, what="queries", allow_1d=True)
    nq = queries.shape[0]
    k = as_k(k, nq)
    alphas = as_alpha(alpha, nq)
    scores = np.full((nq, k), -np.inf, dtype=np.float32)
    ids = np.full((nq, k), -1, dtype=np.int64)
    unit_q = split_norms(queries, what="queries")[0] if nq else queries
    return unit_q, alphas, scores, ids


def hnsw_params(hnsw_ef: int | None) -> dict[str, int]:
    """:func:`normrank.search.ann.ann_params` of a Qdrant search: ``{"efSearch": hnsw_ef}``, or ``{}``
    for an exact search (every cosine fetched is the true one, as for a flat index)."""
    return {} if hnsw_ef is None else {"efSearch": int(hnsw_ef)}


def first_band(n: int, params: dict[str, int], n_tail: int | None = None) -> int:
    """Size of the first extreme-norm band: the plan's (:func:`normrank.search.plan.plan_search`:
    ~1/30 of the documents, at most 8 x ``hnsw_ef``, at most 2048 for an exact search), or
    ``n_tail``."""
    if n_tail is not None:
        return int(min(n, int(n_tail)))
    return int(min(n, plan_search(SearchOptions(1, ANY_WEIGHTED_ALPHA, 1, breadth=params), n).band))


def search_depths(
    n: int, k: int, k_factor: int, params: dict[str, int], max_depth: int | None = None
) -> tuple[int, int]:
    """``(depth, trust)`` of the plan (:func:`normrank.search.plan.plan_search`, ``max_depth``
    capping the depth as NormIndex's): the cosine depth fetched outside the band and the rank
    whose cosine bounds every document not fetched (an eighth of ``hnsw_ef``, at least ``2 k``;
    all of the depth for an exact search). Trusting the whole depth instead made the widened
    band a few times smaller but lost recall through the graph's misses (26,953 real MiniLM
    embeddings, hnsw_ef = 512, alpha = 0.5: recall@10 0.979 trusting rank 128, 0.988 trusting
    rank 64; plain cosine recall 0.992)."""
    options = SearchOptions(k, ANY_WEIGHTED_ALPHA, k_factor, max_depth=max_depth, breadth=params)
    plan = plan_search(options, n)
    return plan.depth, plan.trust


def band_edge(kth: float, trusted_cosine: float, alpha: float, dim: int) -> float | None:
    """The weight base beyond which every unseen document must be scored for the bound to hold:
    the base whose weight is :func:`normrank.search.bound.weight_limit` of ``kth`` and the
    ``trusted_cosine`` (vectors of length ``dim``); None when the bound cannot shrink
    (``trusted_cosine`` plus its margin not positive, or ``kth <= 0``): then every document must be
    scored. The one definition the Qdrant and Postgres backends share."""
    if trusted_cosine + cosine_slack(dim) <= 0 or kth <= 0:
        return None
    with np.errstate(over="ignore", under="ignore"):
        return float(np.exp(np.log(weight_limit(kth, trusted_cosine, dim)) / alpha))


def powered(base: ArrayLike, alpha: float) -> np.ndarray:
    """The core's one saturation rule (:func:`normrank.scoring.norm_weight`) in float64: ``base **
    alpha``, at most :data:`~normrank.scoring.WEIGHT_CAP`, 0 where it underflows, never inf or NaN.
    Every backend computes its weights (and the bounds built from them) with it, so that a norm
    whose power leaves float32's range ranks as NormIndex ranks it: a tie at the cap, not an
    error (Qdrant cancels a query whose score is not a finite float32)."""
    b = np.asarray(base, dtype=np.float64)
    if alpha == 0:
        return np.ones(b.shape)
    with np.errstate(over="ignore", under="ignore"):
        return np.minimum(np.power(b, alpha), WEIGHT_CAP)


def saturates(base_lo: float, base_hi: float, alpha: float) -> bool:
    """Whether some ``base ** alpha`` with ``base`` in ``[base_lo, base_hi]`` (> 0) passes the cap:
    the engine's formula must then saturate too (``exp(min(alpha * ln w, LOG_WEIGHT_CAP))``); else
    the plain power is the same value, one operation instead of four."""
    with np.errstate(over="ignore", under="ignore"):
        top = max(np.float64(base_lo) ** alpha, np.float64(base_hi) ** alpha)
    return bool(top > WEIGHT_CAP)
