"""How a NormIndex search runs, in one place: queries grouped by alpha, then the flat kernel
(:mod:`normrank.search.flat`, or :mod:`normrank.search.torch_flat` on a device) for flat storage, or
the ANN method (:mod:`normrank.search.ann`) for IVF / HNSW, at the depths of one plan
(:func:`normrank.search.plan.plan_search`); positions mapped back to ids."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import partial

import faiss
import numpy as np

from normrank.search import ann as _ann
from normrank.search.cache import SearchCache
from normrank.search.doc_ids import DocIds
from normrank.search.faiss_info import ann_params, breadth_reader, flat_storage, lossy_codes
from normrank.search.flat import weighted_flat_search, weighted_lists_search
from normrank.search.plan import SearchOptions, SearchPlan, SearchStats, plan_search
from normrank.search.rows import FloatLists, readable_lists, row_source
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

__all__ = ["OneQuery", "SearchTarget", "search_args", "search_into"]

# ANN searches run this many queries at a time, so candidate arrays stay bounded.
_ANN_QUERY_BLOCK = 256


@dataclass(frozen=True, slots=True)
class SearchTarget:
    """What a search reads of one index state: ``index`` holds the unit vectors (``inner``:
    the index beneath its id map), ``doc_ids`` and ``base`` (the values alpha exponentiates)
    are by storage position, ``n_removed`` counts tombstoned vectors still in ``index``, and
    ``cache`` is the state's search cache."""

    index: faiss.Index
    inner: faiss.Index
    doc_ids: DocIds
    base: np.ndarray
    n_removed: int
    cache: SearchCache

    @property
    def n_stored(self) -> int:
        """Vectors in the FAISS index, removed ones still in it included."""
        return self.doc_ids.size + self.n_removed


def search_args(q, options: SearchOptions, dim: int) -> tuple[np.ndarray, np.ndarray, SearchOptions]:
    """A search call's arguments checked: ``(unit queries, one alpha per query, options)``,
    the options' ``k`` and ``k_factor`` checked (``options.alpha``: the call's, or the index's
    default, as given)."""
    one = _one_query_args(q, options, dim)
    if one is not None:
        return one
    queries = as_vectors(q, dim, what="queries", allow_1d=True)
    nq = queries.shape[0]
    k = as_k(options.k, nq)
    alphas = as_alpha(options.alpha, nq)
    unit_q = split_norms(queries, what="queries")[0] if nq else queries
    return unit_q, alphas, replace(options, k=k, k_factor=as_k_factor(options.k_factor))


def _one_query_args(q, options: SearchOptions, dim: int):
    """:func:`search_args` for the latency case (one float32 query of the index's dimension, a
    plain int ``k`` and number ``alpha``) in a few numpy calls; None for anything else, and for
    anything the full checks would refuse, so that those raise their own typed errors."""
    one = _one_query(q, options.k, options.alpha, dim)
    if one is None:
        return None
    return one[0], np.array([one[1]]), replace(options, k_factor=as_k_factor(options.k_factor))


def _one_query(q, k, alpha, dim: int) -> tuple[np.ndarray, float] | None:
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
    if type(alpha) not in (float, int) or not -MAX_ABS_ALPHA <= alpha <= MAX_ABS_ALPHA:  # NaN fails too
        return None
    x64 = q.reshape(1, dim).astype(np.float64)
    norm = math.sqrt(np.einsum("ij,ij->i", x64, x64)[0])  # IEEE sqrt: numpy's, bit for bit
    if not storable_norm(norm):  # zero, NaN or inf: the full checks say which
        return None
    # (dividing by the float is the same IEEE division as by split_norms' broadcast column)
    return (x64 / norm).astype(np.float32), float(alpha)


def search_into(
    scores: np.ndarray,
    ids: np.ndarray,
    unit_q: np.ndarray,
    alphas: np.ndarray,
    options: SearchOptions,
    *,
    target: SearchTarget,
    device: str | None,
    stats: SearchStats | None = None,
) -> None:
    """Fill ``scores`` / ``ids`` ``(nq, k)`` with the top-``k`` of ``cos * base**alpha``, one
    plan (:func:`normrank.search.plan.plan_search`) per alpha of ``alphas`` (one per query);
    ``stats`` is filled when given (its ``cache_bytes`` by the caller, who owns the cache)."""
    stats = stats if stats is not None else SearchStats()
    nq = unit_q.shape[0]
    doc_ids, cache = target.doc_ids, target.cache
    # The work is bounded by what exists: a huge k on a few documents costs what k = ntotal does,
    # and the rest of each row stays the -inf / -1 padding the caller allocated.
    k = min(options.k, doc_ids.size)
    scores, ids = scores[:, :k], ids[:, :k]
    flat = target.inner if isinstance(target.inner, faiss.IndexFlat) else None
    breadth = {} if flat is not None else ann_params(target.inner)  # FAISS's, now
    # An HNSW's float32 storage, or an IVF-Flat's lists, all of it live: the exact flat product
    # can read it in place (the lists are viewed at the state's first flat product over them).
    rows_flat, lists = None, False
    if flat is None and device is None:
        rows_flat = _hnsw_flat_storage(target)
        lists = rows_flat is None and "nprobe" in breadth
        lists = lists and readable_lists(target.index, target.inner, doc_ids.size, target.n_removed)
    uniform = (alphas == alphas[0]).all()  # the usual case: skip grouping by alpha
    certified = np.zeros(nq, dtype=bool)  # in the caller's order, whatever the groups
    for a in alphas[:1] if uniform else np.unique(alphas):
        rows = np.arange(nq) if uniform else np.flatnonzero(alphas == a)
        alpha = float(a)
        plan = plan_search(replace(options, k=k, alpha=alpha, breadth=breadth), target.n_stored,
                           flat=flat is not None, nq=rows.size, dim=unit_q.shape[1],
                           flat_rows=rows_flat is not None or lists,
                           lossy_boost=None if flat is not None else _lossy_boost(target, alpha))  # fmt: skip
        group = SearchStats()
        if plan.method == "flat":  # the flat kernel blocks queries and documents itself
            weights = cache.power(target.base, alpha)
            if lists:  # an IVF-Flat's lists, one by one
                if cache.lists is None:
                    cache.lists = FloatLists(target.index, target.inner, cache.id_lookup(doc_ids))
                s, pos = weighted_lists_search(cache.lists, weights, unit_q[rows], plan.k)
            else:
                s, pos = _search_flat(flat if flat is not None else rows_flat, unit_q[rows], plan, weights=weights, alpha=alpha, cache=cache,
                                      device=device)  # fmt: skip
            group.path, group.scanned, group.depth, group.rounds = plan.method, plan.depth, plan.depth, 1
            group.certified = np.ones(rows.size, dtype=bool)  # exact over the whole collection
        else:
            weights, lookup, order = _ann_inputs(target, plan, alpha)
            # (the over-fetch's certificate needs the weights' range; a scan reads its order's)
            over = cache.weight_range(target.base, alpha) if plan.method == "overfetch" else None
            parts = []
            for r0 in range(0, rows.size, _ANN_QUERY_BLOCK):  # bounded candidate arrays
                block = SearchStats()
                q = unit_q[rows[r0 : r0 + _ANN_QUERY_BLOCK]]
                parts.append(_ann.adaptive_search(target.index, q, plan, weights=weights, lookup=lookup,
                                                  order=order, stats=block, weight_range=over,
                                                  fill_order=partial(_weight_order, target, alpha)))  # fmt: skip
                group.include(block)
            s, pos = np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
        scores[rows] = s
        ids[rows] = doc_ids.at(pos)
        certified[rows] = group.certified
        stats.include(group)
        if not uniform:
            stats.groups[alpha] = group
    stats.certified = certified


def _lossy_boost(target: SearchTarget, alpha: float) -> float | None:
    """How far ``alpha``'s weights lift a document over the median one where the index ranks by
    lossy codes (:func:`~normrank.search.faiss_info.lossy_codes`), else None: what the plan reads
    to over-fetch on them instead of scanning."""
    cache = target.cache
    if cache.lossy is None:
        cache.lossy = lossy_codes(target.inner)
    return cache.weight_boost(target.base, alpha) if cache.lossy else None


def _hnsw_flat_storage(target: SearchTarget) -> faiss.IndexFlat | None:
    """The ``IndexFlat`` storage of an HNSW holding no removed vectors (its rows are then the
    documents by position), else None: SQ / PQ codes and tombstones keep to the scan."""
    if target.n_removed or not isinstance(target.inner, faiss.IndexHNSW):
        return None
    storage = faiss.downcast_index(target.inner.storage)
    return storage if isinstance(storage, faiss.IndexFlat) else None


def _ann_inputs(target: SearchTarget, plan: SearchPlan, alpha: float):
    """``(weights, lookup, order)`` that :func:`normrank.search.ann.adaptive_search` reads for
    ``plan`` at ``alpha``: the weights (ones for an over-fetch at alpha = 0: cosine re-scored),
    the id -> position lookup, and the weight order a ``"scan"`` reads (else None)."""
    cache = target.cache
    weights = cache.ann_weights(target.base, alpha)
    if plan.method == "overfetch" and weights is None:  # cosine through the re-scoring path: weights 1
        weights = np.ones(target.doc_ids.size, dtype=np.float32)
    order = _weight_order(target, alpha) if plan.method == "scan" else None
    return weights, cache.id_lookup(target.doc_ids), order


def _weight_order(target: SearchTarget, alpha: float):
    """The search cache's weight order for the sign of ``alpha`` (alpha = 0: either, its weights
    all 1), its row source made at the first use."""
    cache = target.cache
    if cache.rows is None:
        cache.rows = row_source(target.index, target.inner, target.doc_ids, target.n_removed)
    return cache.order(target.base, alpha or 1.0, cache.rows)


class OneQuery:
    """The latency case, bound to one index state: one float32 query through an IVF / HNSW index
    at FAISS's own breadth, with what :func:`search_into` would look up again on every call
    (the breadth reader) kept. The same plans, candidates and scan, so the same results bit for
    bit; anything else returns None and the general path decides (and raises its typed errors).
    """

    __slots__ = ("_breadth", "_dim", "_target")

    def __init__(self, target: SearchTarget):
        self._target = target
        self._dim = int(target.index.d)
        self._breadth = breadth_reader(target.inner)

    def __call__(self, q, options: SearchOptions, stats: SearchStats | None = None):
        """``(scores, ids)`` ``(1, k)``, or None: not the latency case."""
        target = self._target
        one = _one_query(q, options.k, options.alpha, self._dim)
        if one is None or options.k > target.doc_ids.size:
            return None
        unit_q, a = one
        stats = stats if stats is not None else SearchStats()
        o = options  # (built whole: dataclasses.replace costs twice as much, on a ~50 us path)
        options = SearchOptions(k=o.k, alpha=a, k_factor=o.k_factor, method=o.method, n_tail=o.n_tail,
                                max_depth=o.max_depth, breadth=self._breadth())  # fmt: skip
        plan = plan_search(options, target.n_stored, lossy_boost=_lossy_boost(target, a))
        if plan.method == "cosine" and not target.n_removed:
            # Cosine: FAISS's own answer, its ids as they are (no id round trip).
            cos, cand_ids = _ann._search(target.index, unit_q, plan.depth, plan.ef)
            if cand_ids[0, -1] >= 0:
                stats.path, stats.depth, stats.rounds = plan.method, plan.depth, 1
                stats.certified = np.ones(1, dtype=bool)  # the index's own ranking of its candidates
                return cos, cand_ids
        weights, lookup, order = _ann_inputs(target, plan, a)
        over = target.cache.weight_range(target.base, a) if plan.method == "overfetch" else None
        s, pos = _ann.adaptive_search(target.index, unit_q, plan, weights=weights, lookup=lookup,
                                      order=order, stats=stats, weight_range=over,
                                      fill_order=partial(_weight_order, target, a))  # fmt: skip
        return s, target.doc_ids.at(pos)


def _search_flat(
    flat, unit_q, plan: SearchPlan, *, weights, alpha: float, cache: SearchCache, device: str | None
):
    storage = flat_storage(flat)
    if device is not None:
        from normrank.search import torch_flat

        if cache.device is None:
            cache.device = torch_flat.TorchFlatStore(storage, device)
        w = cache.device.weights_on_device(alpha, weights)
        return torch_flat.weighted_flat_search(cache.device.vectors, w, unit_q, plan.k)
    return weighted_flat_search(storage, weights, unit_q, plan.k)
