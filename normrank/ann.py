"""Exact-recall norm-weighted search on ANN indexes (IVF, HNSW) with query-time alpha.

The problem: an ANN index ranks by cosine, but a document far down the cosine ranking can be
lifted into the top-k by its weight ``w = ||d||**alpha``. A fixed over-fetch misses it.

Method (chosen by measurement, see benchmarks/results/speed.md): **adaptive over-fetch with a
stopping bound, plus an exact "tail band"**.

* Fetch the top ``D`` by cosine, re-score ``cos * w`` exactly. Every document not fetched has
  cosine ``<= c_D`` (the last fetched), so it scores at most ``c_D * w_max`` when ``c_D >= 0``
  and at most ``c_D * w_min`` when ``c_D < 0`` (a negative cosine is hurt least by the
  smallest weight). Once the k-th re-scored score reaches that bound, nothing unseen can enter
  the top-k; otherwise ``D`` grows geometrically and the query is searched again.
* ``w_max`` is dominated by a few extreme-norm documents, which makes the bound loose. The
  ``tail`` documents with the largest weights for this alpha (the lowest norms when
  ``alpha < 0``, the highest when ``alpha > 0``) are therefore scored exactly by a small flat
  scan (norm ranging, Yan et al., NeurIPS 2018, with the extreme band brute-forced), and the
  bound uses the largest weight *outside* the tail.

"Exact" is relative to the ANN index itself: documents the index would not return for any depth
at the given ``nprobe`` / ``efSearch`` are missed, as plain ANN misses them. When the index runs
out of candidates (an IVF probe set exhausted) the search stops there.
"""

from __future__ import annotations

from dataclasses import dataclass

import faiss
import numpy as np

__all__ = [
    "AnnStats",
    "IdLookup",
    "adaptive_search",
    "ann_params",
    "default_start",
    "default_tail",
    "tail_positions",
    "unseen_bound",
]

# Depth grows by this factor per round: total work stays within 1/(1-1/4) of the last round.
_GROWTH = 4


class IdLookup:
    """Vectorised FAISS id -> storage position (``-1`` for ids not present, e.g. tombstones)."""

    def __init__(self, ids: np.ndarray) -> None:
        ids = np.asarray(ids, dtype=np.int64)
        self.n = ids.size
        hi = int(ids.max()) + 1 if ids.size else 0
        # A dense table is one gather per candidate; fall back to binary search for sparse ids.
        if hi <= 4 * max(ids.size, 1024):
            self._dense = np.full(hi, -1, dtype=np.int64)
            self._dense[ids] = np.arange(ids.size, dtype=np.int64)
            self._sorted = self._order = None
        else:
            self._dense = None
            self._order = np.argsort(ids, kind="stable")
            self._sorted = ids[self._order]

    def __call__(self, cand: np.ndarray) -> np.ndarray:
        out = np.full(cand.shape, -1, dtype=np.int64)
        if self._dense is not None:
            ok = (cand >= 0) & (cand < self._dense.size)
            out[ok] = self._dense[cand[ok]]
            return out
        if not self.n:
            return out
        at = np.minimum(np.searchsorted(self._sorted, cand), self.n - 1)
        hit = (self._sorted[at] == cand) & (cand >= 0)
        out[hit] = self._order[at[hit]]
        return out


def unseen_bound(c_last: np.ndarray, w_max: float, w_min: float) -> np.ndarray:
    """Largest score ``c * w`` any document with cosine ``c <= c_last`` and weight in
    ``[w_min, w_max]`` can reach: ``c_last * w_max`` if ``c_last >= 0``, else ``c_last * w_min``."""
    return np.where(c_last >= 0, c_last * w_max, c_last * w_min)


def ann_params(index: faiss.Index) -> dict[str, int]:
    """The search-breadth parameters of a (possibly wrapped) IVF or HNSW index."""
    inner = (
        faiss.downcast_index(index.index)
        if isinstance(index, faiss.IndexIDMap | faiss.IndexIDMap2)
        else index
    )
    out: dict[str, int] = {}
    if isinstance(inner, faiss.IndexHNSW):
        out["efSearch"] = int(inner.hnsw.efSearch)
    try:
        ivf = faiss.extract_index_ivf(inner)
    except RuntimeError:
        ivf = None
    if ivf is not None:
        out["nprobe"] = int(ivf.nprobe)
        out["nlist"] = int(ivf.nlist)
    return out


def _select(scores: np.ndarray, pos: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-``k`` of small candidate rows, in numpy: FAISS's heap helpers open an OpenMP region per
    call, which costs milliseconds on a busy machine for a few microseconds of work."""
    nq, m = scores.shape
    out_s = np.full((nq, k), -np.inf, dtype=np.float32)
    out_p = np.full((nq, k), -1, dtype=np.int64)
    if m == 0 or nq == 0:
        return out_s, out_p
    kk = min(k, m)
    part = (
        np.argpartition(-scores, kk - 1, axis=1)[:, :kk] if m > kk else np.broadcast_to(np.arange(m), (nq, m))
    )
    ps = np.take_along_axis(scores, part, 1)
    order = np.argsort(-ps, axis=1, kind="stable")
    ps = np.take_along_axis(ps, order, 1)
    pp = np.take_along_axis(np.take_along_axis(pos, part, 1), order, 1)
    ok = np.isfinite(ps) & (pp >= 0)
    out_s[:, :kk] = np.where(ok, ps, -np.inf)
    out_p[:, :kk] = np.where(ok, pp, -1)
    return out_s, out_p


def _search(index: faiss.Index, q: np.ndarray, depth: int) -> tuple[np.ndarray, np.ndarray]:
    """``index.search`` at ``depth``; HNSW's beam is widened to ``depth`` (FAISS would return
    fewer than ``depth`` results when ``efSearch < depth``), never narrowed."""
    ef = ann_params(index).get("efSearch")
    if ef is not None and depth > ef:
        return index.search(q, depth, params=faiss.SearchParametersHNSW(efSearch=depth))
    return index.search(q, depth)


@dataclass
class AnnStats:
    """What one :func:`adaptive_search` call did (for benchmarks and tuning)."""

    rounds: int = 0
    max_depth: int = 0
    unproven: int = 0  # queries that hit ``max_depth`` before the bound held


def default_tail(n: int, params: dict[str, int] | None = None) -> int:
    """Tail size: ~1/30 of the documents, capped so that its flat scan stays a fraction of the ANN's
    own work (IVF: a quarter of the probed share; HNSW: 8 x efSearch distance evaluations).

    Measured on 30k MiniLM-like vectors (benchmarks/results/speed.md): no tail made the bound so
    loose that 3-4 rounds were needed (5-7x plain latency); ~3% brought it to one or two rounds.
    """
    params = params or {}
    cap = 2048
    if "efSearch" in params:
        cap = 8 * params["efSearch"]
    elif "nprobe" in params and params.get("nlist"):
        cap = int(n * params["nprobe"] / params["nlist"] / 4)
    return int(max(0, min(n, max(64, min(n // 30, cap)))))


def default_start(k: int, k_factor: int, params: dict[str, int]) -> int:
    """First cosine depth: HNSW explores ``efSearch`` candidates anyway; an IVF scan costs the
    same at any depth, so it starts deeper (4 x) to finish in one round."""
    if "efSearch" in params:
        return max(k * k_factor, params["efSearch"])
    if "nprobe" in params:
        return 4 * k * k_factor
    return k * k_factor


def tail_positions(weights: np.ndarray, n_tail: int) -> np.ndarray:
    """Storage positions of the ``n_tail`` largest weights."""
    if n_tail <= 0:
        return np.empty(0, dtype=np.int64)
    n_tail = min(n_tail, weights.size)
    return np.argpartition(-weights, n_tail - 1)[:n_tail].astype(np.int64)


def adaptive_search(
    index: faiss.Index,
    unit_q: np.ndarray,
    k: int,
    weights: np.ndarray | None,
    lookup: IdLookup,
    *,
    start_depth: int,
    max_depth: int,
    tail: tuple[np.ndarray, np.ndarray] | None = None,
    stats: AnnStats | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Top-``k`` of ``cos * weights`` through the ANN ``index``, growing depth until proven.

    Args:
        index: FAISS inner-product index over unit vectors; returns ids that ``lookup`` maps.
        unit_q: ``(nq, d)`` float32 unit queries.
        k: results per query.
        weights: ``(n,)`` float32 weights by storage position, or None (cosine: depth ``k``).
        lookup: FAISS id -> storage position.
        start_depth / max_depth: first and largest cosine depth fetched.
        tail: ``(positions (T,), unit vectors (T, d))`` of the highest-weight documents, scored
            exactly by a flat scan; the bound then uses the largest weight outside them.
        stats: filled with rounds / depth / unproven counts when given.

    Returns:
        ``(scores, positions)`` float32 / int64 ``(nq, k)``, padded with ``-inf`` / ``-1``.
    """
    nq = unit_q.shape[0]
    out_s = np.full((nq, k), -np.inf, dtype=np.float32)
    out_p = np.full((nq, k), -1, dtype=np.int64)
    stats = stats if stats is not None else AnnStats()
    if weights is None:  # cosine: the ANN ranking is the answer
        cos, cand = _search(index, unit_q, k)
        pos = lookup(cand)
        stats.rounds, stats.max_depth = 1, k
        return _select(np.where(pos >= 0, cos, -np.inf).astype(np.float32), pos, k)

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
        stats.rounds += 1
        stats.max_depth = max(stats.max_depth, depth)
        cos, cand = _search(index, unit_q[active], depth)
        pos = lookup(cand)
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
        exhausted = cand[:, -1] < 0  # the index had fewer than `depth` candidates to give
        proven = s[:, -1] >= unseen_bound(cos[:, -1].astype(np.float64), w_max, w_min)
        done = exhausted | proven | (depth >= max_depth)
        stats.unproven += int(np.count_nonzero(done & ~exhausted & ~proven))
        out_s[active[done]] = s[done]
        out_p[active[done]] = picked[done]
        active = active[~done]
        depth = min(depth * _GROWTH, max_depth)
    return out_s, out_p
