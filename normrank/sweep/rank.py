"""Rank every α exactly: ``cos(q, d) * w**alpha`` with the cosines computed once per query block.

Each α re-weights the same cosine block by ``w**alpha`` (``normrank.scoring.norm_weight``) and takes
the exact top-k over all documents (``normrank.topk.reweighted_topk``: each α bounded by its
neighbour's top-k; equal scores ranked by document order).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from normrank.errors import InvalidInputError
from normrank.scoring import norm_weight
from normrank.settings import SWEEP_BLOCK_FLOATS
from normrank.topk import reweighted_topk

__all__ = ["rank_all_alphas", "unit_rows"]


def unit_rows(x: np.ndarray, what: str) -> tuple[np.ndarray, np.ndarray]:
    """``(x / ||x||, ||x||)`` row-wise in float32; rows must be finite and non-zero."""
    x = np.asarray(x, dtype=np.float32)
    if x.ndim != 2:
        raise InvalidInputError(f"{what} must be 2-D, got shape {x.shape}")
    norms = np.linalg.norm(x, axis=1)
    if not np.all(np.isfinite(norms)) or np.any(norms <= 0):
        raise InvalidInputError(f"{what}: every vector must be finite and non-zero")
    return (x / norms[:, None]).astype(np.float32), norms.astype(np.float32)


def rank_all_alphas(
    queries: np.ndarray, docs: np.ndarray, weights: np.ndarray | None, alphas: Sequence[float], k: int
) -> tuple[np.ndarray, np.ndarray, dict[str, float]]:
    """Exact top-k of ``cos(q, d) * w**alpha`` for every α, the cosines computed once per block.

    Args:
        queries: (nq, d) raw query vectors. docs: (n, d) raw document vectors.
        weights: (n,) positive per-document weights; None -> the document norms.
        alphas: the grid. k: depth kept per query.

    Returns:
        ``(scores, positions, timing)`` with scores float32 and positions int64, both
        ``(n_alphas, nq, k)`` (positions index ``docs``; -1 pads when n < k).
    """
    qn, _ = unit_rows(queries, "queries")
    dn, dnorm = unit_rows(docs, "documents")
    w = dnorm if weights is None else np.asarray(weights, dtype=np.float32)
    na, nq, n = len(alphas), qn.shape[0], dn.shape[0]
    scores = np.empty((na, nq, k), dtype=np.float32)
    pos = np.empty((na, nq, k), dtype=np.int64)
    t_cos = t_rank = 0.0
    # Sorted by α so that neighbours rank alike; the chain starts from the α nearest 0 (cosine).
    order = np.argsort(np.asarray(alphas, dtype=np.float64), kind="stable")
    first = int(np.argmin(np.abs(np.asarray(alphas, dtype=np.float64)[order])))
    weight_rows = np.stack([norm_weight(w, alphas[i]) for i in order])  # w**alpha once per α
    block = max(1, min(nq, SWEEP_BLOCK_FLOATS // max(n, 1)))
    for q0 in range(0, nq, block):
        t = time.perf_counter()
        cos = qn[q0 : q0 + block] @ dn.T
        t_cos += time.perf_counter() - t
        t = time.perf_counter()
        v, p = reweighted_topk(cos, weight_rows, k, first)
        scores[order, q0 : q0 + cos.shape[0]] = v
        pos[order, q0 : q0 + cos.shape[0]] = p
        t_rank += time.perf_counter() - t
    return scores, pos, {"cosine_matmul": t_cos, "reweight_topk": t_rank}
