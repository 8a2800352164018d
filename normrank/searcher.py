"""How a NormIndex search runs, in one place: queries grouped by alpha, then the flat kernel
(:mod:`normrank.topk`, or :mod:`normrank.backends.torch_flat` on a device) for flat storage, or
the ANN method (:mod:`normrank.ann`) for IVF / HNSW; positions mapped back to ids."""

from __future__ import annotations

import faiss
import numpy as np

from normrank import ann as _ann
from normrank.faiss_info import ann_params, flat_storage
from normrank.search_cache import SearchCache
from normrank.topk import weighted_flat_search
from normrank.validation import as_alpha, as_k, as_k_factor, as_vectors, split_norms

__all__ = ["search_args", "search_into"]

# ANN searches run this many queries at a time, so candidate arrays stay bounded.
_ANN_QUERY_BLOCK = 256


def search_args(q, k, alpha, k_factor, dim: int, default_alpha: float, default_factor: int):
    """A search call's arguments checked: ``(unit queries, k, one alpha per query, k_factor)``."""
    queries = as_vectors(q, dim, what="queries", allow_1d=True)
    nq = queries.shape[0]
    k = as_k(k, nq)
    alphas = as_alpha(default_alpha if alpha is None else alpha, nq)
    factor = default_factor if k_factor is None else as_k_factor(k_factor)
    unit_q = split_norms(queries, what="queries")[0] if nq else queries
    return unit_q, k, alphas, factor


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
    uniform = (alphas == alphas[0]).all()  # the usual case: skip grouping by alpha
    for a in alphas[:1] if uniform else np.unique(alphas):
        rows = np.arange(nq) if uniform else np.flatnonzero(alphas == a)
        alpha = float(a)
        weights = cache.power(base, alpha)
        if flat is not None:  # the flat kernel blocks queries and documents itself
            s, pos = _search_flat(flat, weights, unit_q[rows], k, alpha, cache, device)
            scores[rows] = s
            ids[rows] = np.where(pos >= 0, doc_ids[np.maximum(pos, 0)], -1)
            continue
        lookup = cache.id_lookup(doc_ids)
        n_all = doc_ids.size + n_removed
        if ann == "overfetch":
            ones = np.ones(doc_ids.size, dtype=np.float32) if weights is None else weights
            plan = {"weights": ones, "depth": min(n_all, k * factor)}
        else:
            params = ann_params(inner)
            depth = min(n_all, _ann.default_start(k, factor, params, n_all))
            if max_depth is not None:
                depth = min(depth, max(k, max_depth))
            order = cache.order(base, alpha, lambda pos: index.reconstruct_batch(doc_ids[pos]))
            plan = {
                "weights": weights, "depth": depth, "order": order, "params": params,
                "band_start": _ann.default_band_start(doc_ids.size, params) if n_tail is None else n_tail,
                "trust_depth": _ann.default_trust_depth(depth, params),
            }  # fmt: skip
        for r0 in range(0, rows.size, _ANN_QUERY_BLOCK):  # bounded candidate arrays
            sub = rows[r0 : r0 + _ANN_QUERY_BLOCK]
            s, pos = _ann.adaptive_search(index, unit_q[sub], k, lookup=lookup, **plan)
            scores[sub] = s
            ids[sub] = np.where(pos >= 0, doc_ids[np.maximum(pos, 0)], -1)


def _search_flat(flat, weights, unit_q, k, alpha, cache: SearchCache, device: str | None):
    storage = flat_storage(flat)
    if device is not None:
        from normrank.backends import torch_flat

        if cache.device is None:
            cache.device = torch_flat.TorchFlatStore(storage, device)
        w = cache.device.weights_on_device(alpha, weights)
        return torch_flat.weighted_flat_search(cache.device.vectors, w, unit_q, k)
    return weighted_flat_search(storage, weights, unit_q, k)
