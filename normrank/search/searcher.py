"""How a NormIndex search runs, in one place: queries grouped by alpha, then the flat kernel
(:mod:`normrank.search.flat`, or :mod:`normrank.search.torch_flat` on a device) for flat storage, or
the ANN method (:mod:`normrank.search.ann`) for IVF / HNSW; positions mapped back to ids."""

from __future__ import annotations

import math

import faiss
import numpy as np

from normrank.search import ann as _ann
from normrank.search import quantized_scan
from normrank.search.cache import SearchCache
from normrank.search.faiss_info import ann_params, breadth_reader, flat_storage, search_raw
from normrank.search.flat import weighted_flat_search
from normrank.settings import WEIGHT_CACHE_ENTRIES
from normrank.validation import (
    MAX_ABS_ALPHA,
    MAX_RESULT_ENTRIES,
    as_alpha,
    as_k,
    as_k_factor,
    as_vectors,
    split_norms,
    storable_norm,
)

__all__ = ["OneQuery", "search_args", "search_into"]

# ANN searches run this many queries at a time, so candidate arrays stay bounded.
_ANN_QUERY_BLOCK = 256


def search_args(q, k, alpha, k_factor, dim: int, default_alpha: float, default_factor: int):
    """A search call's arguments checked: ``(unit queries, k, one alpha per query, k_factor)``."""
    one = _one_query_args(q, k, alpha, k_factor, dim, default_alpha, default_factor)
    if one is not None:
        return one
    queries = as_vectors(q, dim, what="queries", allow_1d=True)
    nq = queries.shape[0]
    k = as_k(k, nq)
    alphas = as_alpha(default_alpha if alpha is None else alpha, nq)
    factor = default_factor if k_factor is None else as_k_factor(k_factor)
    unit_q = split_norms(queries, what="queries")[0] if nq else queries
    return unit_q, k, alphas, factor


def _one_query_args(q, k, alpha, k_factor, dim: int, default_alpha: float, default_factor: int):
    """:func:`search_args` for the latency case (one float32 query of the index's dimension, a
    plain int ``k`` and number ``alpha``) in a few numpy calls; None for anything else, and for
    anything the full checks would refuse, so that those raise their own typed errors."""
    if k_factor is not None:
        return None
    one = _one_query(q, k, alpha, dim, default_alpha)
    return None if one is None else (one[0], k, np.array([one[1]]), default_factor)


def _one_query(q, k, alpha, dim: int, default_alpha: float) -> tuple[np.ndarray, float] | None:
    """``(unit query (1, dim) float32, alpha)`` of :func:`_one_query_args`, or None. The unit
    query is computed by the same operations as :func:`split_norms`: bit for bit the same."""
    if (
        type(q) is not np.ndarray
        or q.dtype != np.float32
        or q.size != dim
        or q.shape[-1] != dim
        or q.ndim not in (1, 2)
        or type(k) is not int
        or not 1 <= k <= MAX_RESULT_ENTRIES
    ):
        return None
    a = default_alpha if alpha is None else alpha
    if type(a) not in (float, int) or not -MAX_ABS_ALPHA <= a <= MAX_ABS_ALPHA:  # NaN fails too
        return None
    x64 = q.reshape(1, dim).astype(np.float64)
    norm = math.sqrt(np.einsum("ij,ij->i", x64, x64)[0])  # IEEE sqrt: numpy's, bit for bit
    if not storable_norm(norm):  # zero, NaN or inf: the full checks say which
        return None
    # (dividing by the float is the same IEEE division as by split_norms' broadcast column)
    return (x64 / norm).astype(np.float32), float(a)


def search_into(
    scores: np.ndarray,
    ids: np.ndarray,
    unit_q: np.ndarray,
    k: int,
    alphas: np.ndarray,
    *,
    index: faiss.Index,
    inner: faiss.Index,
    doc_ids: np.ndarray,
    base: np.ndarray,
    n_removed: int,
    cache: SearchCache,
    factor: int,
    ann: str,
    n_tail: int | None,
    max_depth: int | None,
    device: str | None,
) -> None:
    """Fill ``scores`` / ``ids`` ``(nq, k)`` with the top-``k`` of ``cos * base**alpha``.

    ``index`` holds the unit vectors (``inner``: the index beneath its id map), ``doc_ids`` and
    ``base`` (weights) are by storage position, ``n_removed`` counts tombstoned vectors still in
    ``index``; the options are those of ``NormIndex``."""
    nq = unit_q.shape[0]
    # The work is bounded by what exists: a huge k on a few documents costs what k = ntotal does,
    # and the rest of each row stays the -inf / -1 padding the caller allocated.
    if k > doc_ids.size:
        k = doc_ids.size
        scores, ids = scores[:, :k], ids[:, :k]
    flat = inner if isinstance(inner, faiss.IndexFlat) else None
    if nq == 1 and flat is None:  # the latency case: one query, one alpha, no grouping
        plan = _ann_plan(index, inner, doc_ids, base, n_removed, cache, k, float(alphas[0]),
                         factor, ann, n_tail, max_depth)  # fmt: skip
        s, pos = _ann.adaptive_search(index, unit_q, k, **plan)
        scores[0] = s[0]
        ids[0] = cache.fenced_ids(doc_ids)[pos[0]]  # position -1 reads the fence: id -1
        return
    uniform = (alphas == alphas[0]).all()  # the usual case: skip grouping by alpha
    for a in alphas[:1] if uniform else np.unique(alphas):
        rows = np.arange(nq) if uniform else np.flatnonzero(alphas == a)
        alpha = float(a)
        if flat is not None:  # the flat kernel blocks queries and documents itself
            weights = cache.power(base, alpha)
            s, pos = _search_flat(flat, weights, unit_q[rows], k, alpha, cache, device)
            scores[rows] = s
            ids[rows] = np.where(pos >= 0, doc_ids[np.maximum(pos, 0)], -1)
            continue
        plan = _ann_plan(
            index, inner, doc_ids, base, n_removed, cache, k, alpha, factor, ann, n_tail, max_depth
        )
        for r0 in range(0, rows.size, _ANN_QUERY_BLOCK):  # bounded candidate arrays
            sub = rows[r0 : r0 + _ANN_QUERY_BLOCK]
            s, pos = _ann.adaptive_search(index, unit_q[sub], k, **plan)
            scores[sub] = s
            ids[sub] = np.where(pos >= 0, doc_ids[np.maximum(pos, 0)], -1)


class OneQuery:
    """The latency case, bound to one index state: one float32 query through an IVF / HNSW index
    at FAISS's own breadth. Built at the state's first single search and dropped with its
    :class:`SearchCache` (any change of the index), it keeps what :func:`search_into` would look
    up again on every call (the breadth reader, the plan's compiled scan and its buffers, the
    ids by position), so that a call costs the argument checks, FAISS's search and the compiled
    scan: 8.4k documents, HNSW efSearch 64, ~14 us a query less than through
    :func:`search_into`. The same plans, candidates and kernels, so the same results bit for
    bit; anything else returns None and the general path decides (and raises its typed errors).
    """

    __slots__ = ("_base", "_breadth", "_cache", "_dim", "_doc_ids", "_index", "_inner", "_n_removed", "_runs")

    def __init__(
        self, index, inner, doc_ids: np.ndarray, base: np.ndarray, n_removed: int, cache: SearchCache
    ):
        self._index, self._inner, self._doc_ids, self._base = index, inner, doc_ids, base
        self._n_removed, self._cache = n_removed, cache
        self._dim = int(index.d)
        self._breadth = breadth_reader(inner)
        self._runs: dict[tuple, tuple] = {}

    def __call__(self, q, k, alpha, default_alpha: float, factor: int, ann: str, n_tail, max_depth):
        """``(scores, ids)`` ``(1, k)``, or None: not the latency case."""
        one = _one_query(q, k, alpha, self._dim, default_alpha)
        if one is None or k > self._doc_ids.size or ann == "overfetch":
            return None
        unit_q, a = one
        params = self._breadth()
        if a == 0:  # FAISS's own answer, without the id round trip, unless removed documents may take places
            if self._n_removed:
                return None
            cos, cand = _ann._search(self._index, unit_q, k, params)
            return None if cand[0, -1] < 0 else (cos, cand)
        key = (a, k, factor, ann, n_tail, max_depth, tuple(params.items()))
        run = self._runs.get(key)
        if run is None:
            if len(self._runs) >= WEIGHT_CACHE_ENTRIES:  # as many as the plans they hold
                self._runs.pop(next(iter(self._runs)))
            run = self._runs[key] = self._run(key, unit_q.shape[1], params)
        depth, wider, lookup, scan, plan = run
        cos, cand = search_raw(self._index, unit_q, depth, wider)
        got = None if scan is None else scan(unit_q[0], cos[0], lookup(cand[0]))
        if got is None:  # pads, tombstones, no compiled scan: the general path's rerank
            s, pos = _ann.rerank(cos, cand, unit_q, k, plan["weights"], lookup, depth=depth,
                                 order=plan["order"], band_start=plan["band_start"],
                                 trust_depth=plan["trust_depth"])  # fmt: skip
            return s, self._cache.fenced_ids(self._doc_ids)[pos]
        return got[0][None].copy(), self._cache.fenced_ids(self._doc_ids).take(got[1])[None]

    def _run(self, key: tuple, d: int, params: dict[str, int]) -> tuple:
        a, k, factor, ann, n_tail, max_depth, _ = key
        plan = _ann_plan(self._index, self._inner, self._doc_ids, self._base, self._n_removed,
                         self._cache, k, a, factor, ann, n_tail, max_depth, params)  # fmt: skip
        depth, order = plan["depth"], plan["order"]
        ef = params.get("efSearch")
        wider = faiss.SearchParametersHNSW(efSearch=depth) if ef is not None and depth > ef else None
        scan = None
        fused = quantized_scan.fused_scan(d) if order.quantized is not False else None
        if fused is not None and depth >= k:
            trust = min(depth, max(k, plan["trust_depth"] or depth))
            scan = quantized_scan.FusedScan(fused, order, plan["weights"], k, trust, plan["band_start"])
        return depth, wider, plan["lookup"], scan, plan


def _ann_plan(
    index, inner, doc_ids, base, n_removed, cache: SearchCache, k, alpha, factor, ann, n_tail, max_depth,
    params=None,
):  # fmt: skip
    """The keyword arguments of :func:`normrank.search.ann.adaptive_search` for one alpha: kept in the
    cache per (alpha, k, over-fetch, index breadth, options), since they are the same for every
    query of an index state (rebuilding them costs about as much as a small index search).
    ``params``: :func:`ann_params` of ``inner``, read by the caller for this call."""
    if params is None:
        params = ann_params(inner)  # read every call: FAISS's breadth can change under us
    key = (alpha, k, factor, ann, n_tail, max_depth, tuple(params.items()))
    plan = cache.plans.get(key)
    if plan is not None:
        return plan
    weights = cache.power(base, alpha)
    lookup = cache.id_lookup(doc_ids)
    n_all = doc_ids.size + n_removed
    if ann == "overfetch":
        ones = np.ones(doc_ids.size, dtype=np.float32) if weights is None else weights
        plan = {"weights": ones, "depth": min(n_all, k * factor), "lookup": lookup}
    else:
        depth = min(n_all, _ann.default_start(k, factor, params, n_all))
        if max_depth is not None:
            depth = min(depth, max(k, max_depth))
        order = cache.order(base, alpha, lambda pos: index.reconstruct_batch(doc_ids[pos]))
        plan = {
            "weights": weights, "depth": depth, "order": order, "params": params, "lookup": lookup,
            "band_start": _ann.default_band_start(doc_ids.size, params) if n_tail is None else n_tail,
            "trust_depth": _ann.default_trust_depth(depth, params, k),
        }  # fmt: skip
    cache.remember_plan(key, plan)
    return plan


def _search_flat(flat, weights, unit_q, k, alpha, cache: SearchCache, device: str | None):
    storage = flat_storage(flat)
    if device is not None:
        from normrank.search import torch_flat

        if cache.device is None:
            cache.device = torch_flat.TorchFlatStore(storage, device)
        w = cache.device.weights_on_device(alpha, weights)
        return torch_flat.weighted_flat_search(cache.device.vectors, w, unit_q, k)
    return weighted_flat_search(storage, weights, unit_q, k)
