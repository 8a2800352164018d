"""Top-k selection kernels: exact norm-weighted search over unit vectors.

The flat kernel streams the documents in blocks: one BLAS matmul for the cosines, one in-place
multiply by the per-document weight, and FAISS's own C++ heap (``float_minheap_array_t``) for
the selection. So it reads the same bytes as ``IndexFlatIP`` plus one float per document.
"""

from __future__ import annotations

import faiss
import numpy as np

from normrank.errors import InvalidParameterError

__all__ = ["topk", "weighted_flat_search"]

# The score block (queries x documents) is kept near this many floats: large enough for BLAS
# to run at full speed, small enough that a big batch never needs unbounded memory.
_BLOCK_ELEMENTS = 1 << 22
_QUERY_BLOCK = 1024
# Below this many queries a per-query SIMD scan beats BLAS (see _inner_products_small).
_SMALL_NQ = 8


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


def _inner_products_small(q: np.ndarray, docs: np.ndarray) -> np.ndarray:
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
        small = q.shape[0] < _SMALL_NQ and unit_vectors.flags.c_contiguous
        for j0 in range(0, n, block):
            if small:
                s = _inner_products_small(q, unit_vectors[j0 : j0 + block])
            else:
                s = q @ unit_vectors[j0 : j0 + block].T
            if weights is not None:
                s *= weights[j0 : j0 + block]
            s = np.ascontiguousarray(s, dtype=np.float32)
            heap.addn(s.shape[1], faiss.swig_ptr(s), j0, 0, s.shape[0])
        _finish(heap, values, positions)
        out_scores[q0 : q0 + q.shape[0]] = values
        out_pos[q0 : q0 + q.shape[0]] = positions
    return out_scores, out_pos
