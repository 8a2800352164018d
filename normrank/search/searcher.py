"""How a NormIndex search runs, in one place: queries grouped by alpha, then the flat kernel
(:mod:`normrank.search.flat`, or :mod:`normrank.search.torch_flat` on a device) for flat storage, or
the ANN method (:mod:`normrank.search.ann`) for IVF / HNSW; positions mapped back to ids."""

from __future__ import annotations

import faiss
import numpy as np

from normrank.search import ann as _ann
from normrank.search.cache import SearchCache
from normrank.search.faiss_info import ann_params, flat_storage
from normrank.search.flat import weighted_flat_search
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

__all__ = ["search_args", "search_into"]

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
    anything the full checks would refuse, so that those raise their own typed errors. The unit
    query is computed by the same operations as :func:`split_norms`: bit for bit the same."""
    if (
        type(q) is not np.ndarray
        or q.dtype != np.float32
        or q.size != dim
        or q.shape[-1] != dim
        or q.ndim not in (1, 2)
        or type(k) is not int
        or not 1 <= k <= MAX_RESULT_ENTRIES
        or k_factor is not None
    ):
        return None
    a = default_alpha if alpha is None else alpha
    if type(a) not in (float, int) or not -MAX_ABS_ALPHA <= a <= MAX_ABS_ALPHA:  # NaN fails too
        return None
    x64 = q.reshape(1, dim).astype(np.float64)
    norm = float(np.sqrt(np.einsum("ij,ij->i", x64, x64))[0])
    if not storable_norm(norm):  # zero, NaN or inf: the full checks say which
        return None
    # (dividing by the float is the same IEEE division as by split_norms' broadcast column)
    return (x64 / norm).astype(np.float32), k, np.array([float(a)]), default_factor


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
        if (
            alphas[0] == 0
            and not n_removed
            and ann != "overfetch"
            and _cosine_one(index, inner, unit_q, k, scores, ids)
        ):
            return
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


def _cosine_one(
    index: faiss.Index, inner: faiss.Index, unit_q: np.ndarray, k: int, scores: np.ndarray, ids: np.ndarray
) -> bool:
    """One cosine query with no removed documents in ``index``: FAISS's own top-``k`` (HNSW's beam
    widened to ``k`` as the general path widens it), written into ``scores`` / ``ids`` (its ids
    are the documents' ids), as :func:`normrank.search.ann.adaptive_search` returns it without the
    id round trip. False (nothing written) where FAISS had fewer than ``k`` to give: the general
    path pads."""
    cos, cand = _ann._search(index, unit_q, k, ann_params(inner))
    if cand[0, -1] < 0:
        return False
    scores[0] = cos[0]
    ids[0] = cand[0]
    return True


def _ann_plan(
    index, inner, doc_ids, base, n_removed, cache: SearchCache, k, alpha, factor, ann, n_tail, max_depth
):
    """The keyword arguments of :func:`normrank.search.ann.adaptive_search` for one alpha: kept in the
    cache per (alpha, k, over-fetch, index breadth, options), since they are the same for every
    query of an index state (rebuilding them costs about as much as a small index search)."""
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
