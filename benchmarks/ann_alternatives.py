"""ANN methods evaluated against normrank's choice in speed.py (not part of the library).

* ``depth_growing_search``: the method normrank shipped first: re-search the index at a growing
  cosine depth until the bound holds, plus a fixed exact tail of the highest weights.
* ``Banded``: norm ranging (Yan et al., NeurIPS 2018): one sub-index per norm band, each searched
  with its own, nearly constant weights; results merged.
* baked storage (in speed.py): index ``d_hat * ||d||**a0``, re-score by ``||d||**(a - a0)``.
"""

from __future__ import annotations

import faiss
import numpy as np

from normrank import topk
from normrank.search.bound import unseen_can_beat
from normrank.search.faiss_info import ann_params
from normrank.search.id_lookup import IdLookup

_GROWTH = 4


def _search(index: faiss.Index, q: np.ndarray, depth: int) -> tuple[np.ndarray, np.ndarray]:
    """``index.search`` at ``depth``, an HNSW beam widened to ``depth`` (FAISS returns fewer
    results than asked when ``efSearch`` is smaller)."""
    ef = ann_params(index).get("efSearch")
    if ef is not None and depth > ef:
        return index.search(q, depth, params=faiss.SearchParametersHNSW(efSearch=depth))
    return index.search(q, depth)


def _select(scores: np.ndarray, pos: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-``k`` of candidate rows (``normrank.search.flat``) with their positions; ``-inf`` / ``-1``
    pad rows with fewer than ``k`` finite scores."""
    values, cols = topk(scores, k)
    return values, np.where(cols >= 0, np.take_along_axis(pos, np.maximum(cols, 0), axis=1), -1)


def depth_growing_search(
    index: faiss.Index,
    unit_q: np.ndarray,
    k: int,
    weights: np.ndarray,
    lookup: IdLookup,
    *,
    start_depth: int,
    max_depth: int,
    tail: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The first method normrank shipped, kept here for the comparison: the cosine depth grows
    (x4 per round, the index searched again) until ``c_D * w_max`` falls below the k-th score,
    with a fixed exact tail of the highest weights.

    Arguments as :func:`normrank.search.ann.adaptive_search` (``weights`` required), plus
    ``start_depth`` / ``max_depth`` (first and largest cosine depth) and ``tail``
    (``(positions, unit vectors)`` of the highest weights, scanned exactly; the bound then uses
    the largest weight outside them).

    Returns:
        ``(scores, positions)`` float32 / int64 ``(nq, k)``, padded with ``-inf`` / ``-1``.
    """
    nq = unit_q.shape[0]
    out_s = np.full((nq, k), -np.inf, dtype=np.float32)
    out_p = np.full((nq, k), -1, dtype=np.int64)
    in_tail = np.zeros(weights.size, dtype=bool)
    tail_s = tail_p = None
    if tail is not None and tail[0].size:
        tpos, tvec = tail
        in_tail[tpos] = True
        # A few thousand rows at most: one small matmul, selected in numpy.
        tscores = ((unit_q @ tvec.T) * weights[tpos]).astype(np.float32)
        tail_s, tail_p = _select(tscores, np.broadcast_to(tpos, tscores.shape), k)
    rest = weights[~in_tail]
    w_max = float(rest.max()) if rest.size else 0.0
    w_min = float(rest.min()) if rest.size else 0.0

    active = np.arange(nq)
    depth = max(k, min(start_depth, max_depth))
    while active.size:
        cos, cand_ids = _search(index, unit_q[active], depth)
        pos = lookup(cand_ids)
        valid = pos >= 0
        safe = np.maximum(pos, 0)
        # Tail documents are already scored exactly by the flat scan: drop them here.
        keep = valid & ~in_tail[safe]
        # FAISS pads with -FLT_MAX: zero those before multiplying so nothing overflows.
        rescored = np.where(keep, np.where(keep, cos, 0) * weights[safe], -np.inf).astype(np.float32)
        if tail_s is not None:
            rescored = np.concatenate([rescored, tail_s[active]], axis=1)
            pos = np.concatenate([pos, tail_p[active]], axis=1)
        s, picked = _select(rescored, pos, k)
        exhausted = cand_ids[:, -1] < 0  # the index had fewer than `depth` candidates to give
        proven = ~unseen_can_beat(s[:, -1], cos[:, -1].astype(np.float64), w_max, w_min, unit_q.shape[1])
        done = exhausted | proven | (depth >= max_depth)
        out_s[active[done]] = s[done]
        out_p[active[done]] = picked[done]
        active = active[~done]
        depth = min(depth * _GROWTH, max_depth)
    return out_s, out_p


class Banded:
    """One sub-index per norm band (quantiles), each searched by ``depth_growing_search``."""

    def __init__(self, x: np.ndarray, build, factory_for, n_bands: int = 4) -> None:
        norms = np.linalg.norm(x, axis=1)
        edges = np.quantile(norms, np.linspace(0, 1, n_bands + 1))
        band = np.clip(np.searchsorted(edges, norms, side="right") - 1, 0, n_bands - 1)
        self.parts = []
        for b in range(n_bands):
            pos = np.flatnonzero(band == b)
            unit = (x[pos] / norms[pos, None]).astype(np.float32)
            self.parts.append(
                (pos, norms[pos], build(unit, factory_for(pos.size)), IdLookup(np.arange(pos.size)))
            )

    def search(self, qu: np.ndarray, alpha: float, k: int, start_depth: int | None = None) -> np.ndarray:
        """Positions of the top-``k``; each band's cosine depth starts at ``start_depth``
        (default ``2 k``) and grows until that band's bound holds."""
        s_all, p_all = [], []
        for pos, nb, idx, lk in self.parts:
            w = (nb.astype(np.float64) ** alpha).astype(np.float32)
            start = 2 * k if start_depth is None else start_depth
            s, p = depth_growing_search(idx, qu, k, w, lk, start_depth=start, max_depth=pos.size)
            s_all.append(s)
            p_all.append(np.where(p >= 0, pos[np.maximum(p, 0)], -1))
        s, p = np.concatenate(s_all, 1), np.concatenate(p_all, 1)
        return np.take_along_axis(p, np.argsort(-s, axis=1)[:, :k], 1)
