"""Top-k selection kernels: exact norm-weighted search over unit vectors.

The flat kernel streams the documents in blocks: one BLAS matmul for the cosines, one in-place
multiply by the per-document weight, and FAISS's own C++ heap (``float_minheap_array_t``) for
the selection. So it reads the same bytes as ``IndexFlatIP`` plus one float per document.
"""

from __future__ import annotations

import faiss
import numpy as np
from scipy.linalg.blas import sgemm as _sgemm

from normrank.errors import InvalidParameterError

__all__ = ["reweighted_topk", "topk", "weighted_flat_search"]

# The score block (queries x documents) is kept near this many floats: large enough for BLAS
# to run at full speed, small enough that a big batch never needs unbounded memory.
_BLOCK_ELEMENTS = 1 << 22
_QUERY_BLOCK = 1024
# Below this many queries a per-query SIMD scan beats BLAS (see inner_products_small).
SMALL_NQ = 8
# Up to this many queries the product is taken as docs . q^T in blocks of _MID_DOC_BLOCK
# documents; beyond it (nq = 1000) q . docs^T measured as fast.
_MID_NQ = 192
_MID_DOC_BLOCK = 2048


def _new_heap(nq: int, k: int) -> tuple[faiss.float_minheap_array_t, np.ndarray, np.ndarray]:
    scores = np.empty((nq, k), dtype=np.float32)
    labels = np.empty((nq, k), dtype=np.int64)
    heap = faiss.float_minheap_array_t()  # a min-heap keeps the k largest scores
    heap.k = k
    heap.nh = nq
    heap.val = faiss.swig_ptr(scores)
    heap.ids = faiss.swig_ptr(labels)
    heap.heapify()  # fills with -FLT_MAX / -1
    return heap, scores, labels


def _finish(heap: faiss.float_minheap_array_t, scores: np.ndarray, labels: np.ndarray) -> None:
    """Sort each heap best first; empty slots get score -inf (FAISS leaves -FLT_MAX)."""
    heap.reorder()
    scores[labels < 0] = -np.inf


def topk(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-k of each row, descending.

    Args:
        scores: ``(nq, n)`` float32 scores.
        k: results per row, >= 1.

    Returns:
        ``(values, positions)``: float32 and int64, both ``(nq, k)``; when ``n < k`` the rows
        are padded with ``-inf`` and ``-1`` as FAISS does. Equal scores may come in any order.
    """
    if int(k) != k or k < 1:
        raise InvalidParameterError(f"k must be an integer >= 1, got {k!r}")
    s = np.ascontiguousarray(scores, dtype=np.float32)
    if s.ndim != 2:
        raise InvalidParameterError(f"scores must be 2-D (nq, n), got shape {s.shape}")
    nq, n = s.shape
    heap, values, positions = _new_heap(nq, int(k))
    if n and nq:
        heap.addn(n, faiss.swig_ptr(s), 0, 0, nq)
    _finish(heap, values, positions)
    return values, positions


def _orderable(values: np.ndarray) -> np.ndarray:
    """float32 -> int64 with the same order (sign-magnitude bits to two's complement)."""
    bits = (values + np.float32(0)).view(np.int32).astype(np.int64)  # + 0 turns -0.0 into 0.0
    return np.where(bits < 0, bits ^ 0x7FFFFFFF, bits)


def _topk_small(values: np.ndarray, positions: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-k of small candidate rows in the total order (score descending, position ascending).

    numpy rather than FAISS's heap here: its OpenMP start-up, contending with BLAS threads still
    spinning after the matmul, costs more than selecting from a few hundred candidates. The
    order is total, so which of several equal scores are kept never depends on the kernel.
    """
    key = (_orderable(values) << 32) + (0xFFFFFFFF - positions)  # positions < 2**32
    keep = np.argpartition(key, values.shape[1] - k, axis=1)[:, -k:]
    order = np.argsort(np.take_along_axis(key, keep, axis=1), axis=1)[:, ::-1]
    keep = np.take_along_axis(keep, order, axis=1)
    return np.take_along_axis(values, keep, axis=1), np.take_along_axis(positions, keep, axis=1)


def _chain_from(first: int, count: int) -> list[tuple[int, int | None]]:
    """``(row, seed_row)`` visiting ``first`` then its neighbours outward, each seeded by the
    neighbour nearer ``first`` (``None`` for ``first`` itself)."""
    chain: list[tuple[int, int | None]] = [(first, None)]
    chain += [(i, i + 1) for i in range(first - 1, -1, -1)]
    chain += [(i, i - 1) for i in range(first + 1, count)]
    return chain


def reweighted_topk(
    scores: np.ndarray, weight_rows: np.ndarray, k: int, first: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-k of ``scores * weight_rows[i]`` for every row ``i`` of weights (the α-sweep).

    A full heap pass per weighting costs ~3 ns per score. Neighbouring weightings (α and
    α ± 0.25) rank almost alike, so each is bounded by its neighbour's top-k instead: those k
    documents re-weighted give a k-th best score no larger than the true one, and only scores at
    or above it (a few more than k per row) are selected from. ``first`` is bounded by a full heap
    pass. Results follow a total order, score descending then position ascending, so the
    documents kept among equal scores never depend on the kernel or on ``first``.

    Args:
        scores: ``(nq, n)`` float32 (cosines).
        weight_rows: ``(n_weights, n)`` float32, finite and > 0, ordered so that neighbours are
            alike (α ascending).
        k: results per row.
        first: the row the chain starts from (α = 0).

    Returns:
        ``(values, positions)``, float32 and int64, both ``(n_weights, nq, k)``; when ``n < k``
        rows are padded with ``-inf`` and ``-1`` as :func:`topk`.
    """
    s = np.ascontiguousarray(scores, dtype=np.float32)
    w = np.asarray(weight_rows, dtype=np.float32)
    nq, n = s.shape
    values = np.full((w.shape[0], nq, k), -np.inf, dtype=np.float32)
    positions = np.full((w.shape[0], nq, k), -1, dtype=np.int64)
    weighted = np.empty_like(s)  # one buffer, reused: no allocation per weighting
    if n <= 4 * k:  # small corpora: every document is a candidate, no bound needed
        every = np.broadcast_to(np.arange(n, dtype=np.int64), (nq, n))
        for i in range(w.shape[0]):
            np.multiply(s, w[i], out=weighted)
            kk = min(k, n)
            values[i, :, :kk], positions[i, :, :kk] = _topk_small(weighted, every, kk)
        return values, positions
    row_start = np.arange(nq, dtype=np.int64) * n
    for i, seed in _chain_from(first, w.shape[0]):
        np.multiply(s, w[i], out=weighted)
        seed_positions = topk(weighted, k)[1] if seed is None else positions[seed]
        bound = np.take_along_axis(weighted, seed_positions, axis=1).min(axis=1)
        hits = np.flatnonzero(weighted >= bound[:, None])  # >= k per row: the seed documents
        rows = hits // n
        counts = np.bincount(rows, minlength=nq)
        slot = np.arange(hits.size) - (np.cumsum(counts) - counts)[rows]
        # Pads (-inf, -1) are never selected: every row has at least k real candidates.
        cand_values = np.full((nq, int(counts.max())), -np.inf, dtype=np.float32)
        cand_positions = np.full(cand_values.shape, -1, dtype=np.int64)
        cand_values[rows, slot] = weighted.ravel()[hits]
        cand_positions[rows, slot] = hits - row_start[rows]
        values[i], positions[i] = _topk_small(cand_values, cand_positions, k)
    return values, positions


def inner_products_small(q: np.ndarray, docs: np.ndarray) -> np.ndarray:
    """``q @ docs.T`` for a few queries with FAISS's SIMD row kernel: BLAS gemv on a (1, d) x (d, n)
    product runs at about half its speed (measured 15 ms vs 41 ms on 100k x 384, one thread)."""
    q = np.ascontiguousarray(q, dtype=np.float32)
    out = np.empty((q.shape[0], docs.shape[0]), dtype=np.float32)
    for i in range(q.shape[0]):
        faiss.fvec_inner_products_ny(
            faiss.swig_ptr(out[i]), faiss.swig_ptr(q[i]), faiss.swig_ptr(docs), docs.shape[1], docs.shape[0]
        )
    return out


def weighted_flat_search(
    unit_vectors: np.ndarray,
    weights: np.ndarray | None,
    queries: np.ndarray,
    k: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-k of ``(q . u_j) * weights[j]`` over all rows ``u_j`` of ``unit_vectors``.

    Args:
        unit_vectors: ``(n, d)`` float32, C-contiguous (may be a view of FAISS's storage).
        weights: ``(n,)`` float32 per-document weights (``||d||**alpha``), or None for cosine.
        queries: ``(nq, d)`` float32 unit queries.
        k: results per query.

    Returns:
        ``(scores, positions)`` as :func:`topk`; positions index ``unit_vectors``.
        Memory is bounded: at most ~16 MB of scores exist at a time, whatever nq, n and k.
    """
    n = unit_vectors.shape[0]
    nq = queries.shape[0]
    out_scores = np.empty((nq, k), dtype=np.float32)
    out_pos = np.empty((nq, k), dtype=np.int64)
    for q0 in range(0, nq, _QUERY_BLOCK):
        q = queries[q0 : q0 + _QUERY_BLOCK]
        heap, values, positions = _new_heap(q.shape[0], k)
        block = max(1024, _BLOCK_ELEMENTS // q.shape[0])
        small = q.shape[0] < SMALL_NQ and unit_vectors.flags.c_contiguous
        mid = not small and q.shape[0] <= _MID_NQ
        if mid:
            block = _MID_DOC_BLOCK
            q = np.ascontiguousarray(q)  # q.T then is the column-major operand BLAS takes as is
        for j0 in range(0, n, block):
            docs = unit_vectors[j0 : j0 + block]
            if small:
                s = inner_products_small(q, docs)
            elif mid:
                # OpenBLAS runs docs . q^T (documents as the long side) ~10% faster than
                # q . docs^T (100k x 384, nq = 100). numpy would return it document-major and
                # need a transpose pass (~12% of the search); asked for column-major, BLAS
                # writes it query-major, as the heap reads it.
                s = _sgemm(1.0, docs.T, q.T, trans_a=True).T
            else:
                s = q @ docs.T
            if weights is not None:
                s *= weights[j0 : j0 + block]
            s = np.ascontiguousarray(s, dtype=np.float32)
            heap.addn(s.shape[1], faiss.swig_ptr(s), j0, 0, s.shape[0])
        _finish(heap, values, positions)
        out_scores[q0 : q0 + q.shape[0]] = values
        out_pos[q0 : q0 + q.shape[0]] = positions
    return out_scores, out_pos
