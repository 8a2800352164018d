"""How a NormIndex search runs, in one place: queries grouped by alpha, then the flat kernel
(:mod:`normrank.search.flat`, or :mod:`normrank.search.torch_flat` on a device) for flat storage, or
the ANN method (:mod:`normrank.search.ann`) for IVF / HNSW, at the depths of one plan
(:func:`normrank.search.plan.plan_search`); positions mapped back to ids."""

from __future__ import annotations

import math

import faiss
import numpy as np

from normrank.search import ann as _ann
from normrank.search.cache import SearchCache
from normrank.search.doc_ids import DocIds
from normrank.search.faiss_info import ann_params, breadth_reader, flat_storage
from normrank.search.flat import weighted_flat_search
from normrank.search.plan import SearchStats, plan_search
from normrank.search.rows import row_source
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
    doc_ids: DocIds,
    base: np.ndarray,
    n_removed: int,
    cache: SearchCache,
    factor: int,
    ann: str,
    n_tail: int | None,
    max_depth: int | None,
    device: str | None,
    stats: SearchStats | None = None,
) -> None:
    """Fill ``scores`` / ``ids`` ``(nq, k)`` with the top-``k`` of ``cos * base**alpha``.

    ``index`` holds the unit vectors (``inner``: the index beneath its id map), ``doc_ids`` and
    ``base`` (weights) are by storage position, ``n_removed`` counts tombstoned vectors still in
    ``index``; the options are those of ``NormIndex``; ``stats`` is filled when given (its
    ``cache_bytes`` by the caller, who owns the cache)."""
    stats = stats if stats is not None else SearchStats()
    nq = unit_q.shape[0]
    # The work is bounded by what exists: a huge k on a few documents costs what k = ntotal does,
    # and the rest of each row stays the -inf / -1 padding the caller allocated.
    if k > doc_ids.size:
        k = doc_ids.size
        scores, ids = scores[:, :k], ids[:, :k]
    flat = inner if isinstance(inner, faiss.IndexFlat) else None
    uniform = (alphas == alphas[0]).all()  # the usual case: skip grouping by alpha
    for a in alphas[:1] if uniform else np.unique(alphas):
        rows = np.arange(nq) if uniform else np.flatnonzero(alphas == a)
        alpha = float(a)
        group = SearchStats()
        if flat is not None:  # the flat kernel blocks queries and documents itself
            weights = cache.power(base, alpha)
            s, pos = _search_flat(flat, weights, unit_q[rows], k, alpha, cache, device)
            group.path, group.scanned, group.depth, group.rounds = "flat", doc_ids.size, doc_ids.size, 1
        else:
            args = _ann_args(index, inner, doc_ids, base, n_removed, cache, k, alpha, factor, ann,
                             n_tail, max_depth, ann_params(inner))  # fmt: skip
            parts = []
            for r0 in range(0, rows.size, _ANN_QUERY_BLOCK):  # bounded candidate arrays
                block = SearchStats()
                parts.append(_ann.adaptive_search(index, unit_q[rows[r0 : r0 + _ANN_QUERY_BLOCK]], k, *args,
                                                  stats=block))  # fmt: skip
                group.include(block)
            s, pos = np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
        scores[rows] = s
        ids[rows] = doc_ids.at(pos)
        stats.include(group)
        if not uniform:
            stats.groups[alpha] = group


def _ann_args(index, inner, doc_ids, base, n_removed, cache: SearchCache, k, alpha, factor, ann,
              n_tail, max_depth, params):  # fmt: skip
    """``(weights, lookup, plan, order)`` of :func:`normrank.search.ann.adaptive_search` for one
    alpha at the breadth ``params`` (read by the caller: FAISS's breadth can change under us)."""
    n_all = doc_ids.size + n_removed
    overfetch = ann == "overfetch"
    plan = plan_search(k, factor, n_all, params, n_tail=n_tail, max_depth=max_depth, overfetch=overfetch)
    weights = cache.power(base, alpha)
    if overfetch and weights is None:  # cosine through the re-scoring path: weights 1
        weights = np.ones(doc_ids.size, dtype=np.float32)
    order = None
    if not overfetch and weights is not None:
        if cache.rows is None:
            cache.rows = row_source(index, inner, doc_ids, n_removed)
        order = cache.order(base, alpha, cache.rows)
    return weights, cache.id_lookup(doc_ids), plan, order


class OneQuery:
    """The latency case, bound to one index state: one float32 query through an IVF / HNSW index
    at FAISS's own breadth, with what :func:`search_into` would look up again on every call
    (the breadth reader) kept. The same plans, candidates and scan, so the same results bit for
    bit; anything else returns None and the general path decides (and raises its typed errors).
    """

    __slots__ = ("_base", "_breadth", "_cache", "_dim", "_doc_ids", "_index", "_inner", "_n_removed")

    def __init__(self, index, inner, doc_ids: DocIds, base: np.ndarray, n_removed: int, cache: SearchCache):
        self._index, self._inner, self._doc_ids, self._base = index, inner, doc_ids, base
        self._n_removed, self._cache = n_removed, cache
        self._dim = int(index.d)
        self._breadth = breadth_reader(inner)

    def __call__(self, q, k, alpha, default_alpha: float, factor: int, ann: str, n_tail, max_depth,
                 stats: SearchStats | None = None):  # fmt: skip
        """``(scores, ids)`` ``(1, k)``, or None: not the latency case."""
        one = _one_query(q, k, alpha, self._dim, default_alpha)
        if one is None or k > self._doc_ids.size:
            return None
        unit_q, a = one
        stats = stats if stats is not None else SearchStats()
        if a == 0 and not self._n_removed and ann != "overfetch":
            # Cosine: FAISS's own answer, its ids as they are (no id round trip).
            cos, cand = _ann._search(self._index, unit_q, k, self._breadth().get("efSearch"))
            if cand[0, -1] >= 0:
                stats.path, stats.depth, stats.rounds = "cosine", k, 1
                return cos, cand
        args = _ann_args(self._index, self._inner, self._doc_ids, self._base, self._n_removed, self._cache,
                         k, a, factor, ann, n_tail, max_depth, self._breadth())  # fmt: skip
        s, pos = _ann.adaptive_search(self._index, unit_q, k, *args, stats=stats)
        return s, self._doc_ids.at(pos)


def _search_flat(flat, weights, unit_q, k, alpha, cache: SearchCache, device: str | None):
    storage = flat_storage(flat)
    if device is not None:
        from normrank.search import torch_flat

        if cache.device is None:
            cache.device = torch_flat.TorchFlatStore(storage, device)
        w = cache.device.weights_on_device(alpha, weights)
        return torch_flat.weighted_flat_search(cache.device.vectors, w, unit_q, k)
    return weighted_flat_search(storage, weights, unit_q, k)
