"""Top-k selection kernels: exact norm-weighted search over unit vectors.

The flat kernel streams the documents in blocks through the same product as FAISS's own flat
search (its BLAS ``sgemm_``, its block sizes, its query-major layout; :func:`inner_products`),
the weights multiplied in numpy (into the scores, or into the documents when there are more
queries than dimensions: whichever is fewer multiplies), and FAISS's own heaps select
(``float_minheap_array_t.addn``). So it reads the same bytes and runs the same BLAS kernel as
``IndexFlatIP.search`` plus one float per document and one multiply per score, whichever BLAS
libraries numpy, scipy and FAISS happen to bundle on a machine (numpy's and FAISS's differ by up
to ~10% on the same product: the ratio to FAISS would measure that, not the weighting). No
compiled kernel of normrank's own: a search loads nothing FAISS and numpy have not loaded.
"""

from __future__ import annotations

import ctypes
import numbers
import sys
import types

import faiss
import numpy as np

from normrank.errors import InvalidInputError, InvalidParameterError
from normrank.validation import as_numbers

__all__ = [
    "PRODUCT_BLAS",
    "inner_products",
    "reweighted_topk",
    "topk",
    "weighted_flat_search",
    "weighted_lists_search",
]

# Below this many queries a per-query SIMD scan beats BLAS (see inner_products_small); it is
# also the path FAISS's own search takes for few queries.
SMALL_NQ = 8
# A score block's product is at least this many multiply-adds (~1 ms on one core), so that
# Python's fixed cost per block (~10 us: slicing, the BLAS call, the heap call) stays ~1%.
_BLOCK_WORK = 1 << 26


def _faiss_sgemm():
    """FAISS's ``sgemm_`` (the BLAS its flat search calls), reached through the loaded SWIG
    extension's dynamic symbols; None where that symbol is not visible (e.g. Windows)."""
    swig = sys.modules.get(faiss.IndexFlatIP.__module__)  # faiss.swigfaiss or an _avx2 variant
    # SWIG's convention: module ``pkg.X`` wraps the C extension ``pkg._X``.
    ext = getattr(swig, "_" + swig.__name__.rsplit(".", 1)[-1], None) if swig is not None else None
    if not isinstance(ext, types.ModuleType) or not getattr(ext, "__file__", None):
        return None
    if sys.byteorder != "little":  # see _FaissProduct: the integer trick needs little-endian
        return None
    try:
        fn = ctypes.CDLL(ext.__file__).sgemm_
    except (OSError, AttributeError):
        return None
    fn.restype = None
    fn.argtypes = [ctypes.c_char_p, ctypes.c_char_p] + [ctypes.c_void_p] * 11
    return fn


class _FaissProduct:
    """``out = q . docs^T`` by FAISS's BLAS, called as its flat search calls it:
    ``sgemm_("T", "N", m, nq, d, 1, docs, d, q, d, 0, out, m)``, the query-major result.

    Integers are passed as 64-bit values: on a little-endian machine a BLAS with 32-bit integers
    (LP64) reads their low half, one with 64-bit integers (ILP64) the whole, so either ABI
    gets the right numbers. The first product is checked against numpy before any is trusted.
    """

    def __init__(self, fn) -> None:
        self._fn = fn
        self._one, self._zero = ctypes.c_float(1.0), ctypes.c_float(0.0)  # read only: shareable

    def __call__(self, q: np.ndarray, docs: np.ndarray, out: np.ndarray) -> np.ndarray:
        # The sizes live in a buffer of this call's own: ctypes releases the GIL during the
        # call, so a buffer shared between calls could change under another thread's product.
        sizes = (ctypes.c_int64 * 3)(docs.shape[0], q.shape[0], q.shape[1])  # m, nq, d
        pm = ctypes.addressof(sizes)
        pn, pd = pm + 8, pm + 16
        self._fn(
            b"T", b"N", pm, pn, pd, ctypes.addressof(self._one), docs.ctypes.data, pd,
            q.ctypes.data, pd, ctypes.addressof(self._zero), out.ctypes.data, pm,
        )  # fmt: skip
        return out

    def works(self) -> bool:
        rng = np.random.default_rng(0)
        q = rng.standard_normal((3, 37)).astype(np.float32)
        docs = rng.standard_normal((70, 37)).astype(np.float32)
        got = self(q, docs, np.empty((3, 70), dtype=np.float32))
        return bool(np.allclose(got, q @ docs.T, rtol=1e-4, atol=1e-4))


def _resolve_product() -> tuple[_FaissProduct | None, str]:
    fn = _faiss_sgemm()
    product = _FaissProduct(fn) if fn is not None else None
    if product is not None and product.works():
        return product, "faiss"
    return None, "numpy"


_PRODUCT, PRODUCT_BLAS = _resolve_product()
"""Whose BLAS :func:`inner_products` uses: ``"faiss"`` (the library FAISS's own flat search
calls) or ``"numpy"`` (fallback where FAISS's ``sgemm_`` is not reachable)."""


def inner_products(q: np.ndarray, docs: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``q @ docs.T`` (float32, ``(nq, m)``, C-contiguous) through FAISS's own BLAS when reachable
    (:data:`PRODUCT_BLAS`), so a ratio to FAISS's flat search compares like with like.

    Args:
        q: ``(nq, d)`` queries (converted to C-contiguous float32 if they are not).
        docs: ``(m, d)`` documents (likewise).
        out: optional C-contiguous ``(nq, m)`` float32 buffer to write into.

    Raises:
        InvalidParameterError: shapes that do not match, or an ``out`` BLAS cannot write as is.
    """
    q = np.ascontiguousarray(q, dtype=np.float32)
    docs = np.ascontiguousarray(docs, dtype=np.float32)
    if q.ndim != 2 or docs.ndim != 2 or q.shape[1] != docs.shape[1]:
        raise InvalidParameterError(f"need (nq, d) and (m, d) arrays, got {q.shape} and {docs.shape}")
    if out is None:
        out = np.empty((q.shape[0], docs.shape[0]), dtype=np.float32)
    elif out.shape != (q.shape[0], docs.shape[0]) or out.dtype != np.float32 or not out.flags.c_contiguous:
        raise InvalidParameterError(
            f"out must be a C-contiguous float32 array of shape {(q.shape[0], docs.shape[0])}, "
            f"got {out.dtype} {out.shape}"
        )
    if _PRODUCT is None or not docs.shape[0] or not q.shape[0]:
        np.matmul(q, docs.T, out=out)
        return out
    return _PRODUCT(q, docs, out)


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
    if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 1:
        raise InvalidParameterError(f"k must be an integer >= 1, got {k!r}")
    s = np.ascontiguousarray(as_numbers(scores, "scores", "numbers"), dtype=np.float32)
    if s.ndim != 2:
        raise InvalidParameterError(f"scores must be 2-D (nq, n), got shape {s.shape}")
    if np.isnan(s).any():  # a NaN is neither kept nor ranked by the heap: it would vanish silently
        rows = np.flatnonzero(np.isnan(s).any(axis=1))[:5].tolist()
        raise InvalidInputError(f"scores contain NaN (rows {rows}): a NaN cannot be ranked; replace it first")
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


_KEY_BITS = 63  # (row, score, position) keys of _select_hits: int64 without its sign bit


def _select_hits(weighted: np.ndarray, hits: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-k of each row of ``weighted`` (nq, n) in the total order (score descending, position
    ascending) among the flat indices ``hits`` (ascending, at least k per row).

    One sort of (row, score, position) keys packed in 64 bits, then each row's first k; rows
    and positions too many for 64 bits fall back to :func:`_topk_small` on padded rows.
    """
    nq, n = weighted.shape
    rows = hits // n
    pos = hits - rows * n
    pos_bits = max(1, int(n - 1).bit_length())
    row_bits = max(1, int(nq - 1).bit_length())
    counts = np.bincount(rows, minlength=nq)
    starts = np.cumsum(counts) - counts
    if row_bits + 32 + pos_bits > _KEY_BITS:
        slot = np.arange(hits.size) - starts[rows]
        # Pads (-inf, -1) are never selected: every row has at least k real candidates.
        cand_values = np.full((nq, int(counts.max())), -np.inf, dtype=np.float32)
        cand_positions = np.full(cand_values.shape, -1, dtype=np.int64)
        cand_values[rows, slot] = weighted.ravel()[hits]
        cand_positions[rows, slot] = pos
        return _topk_small(cand_values, cand_positions, k)
    # 0xFFFFFFFF - (order + 2**31): ascending keys are scores descending, within a row
    desc = 0x7FFFFFFF - _orderable(weighted.ravel()[hits])
    key = (rows << (32 + pos_bits)) | (desc << pos_bits) | pos
    key.sort()
    best = key[(starts[:, None] + np.arange(k)).ravel()].reshape(nq, k) & ((1 << pos_bits) - 1)
    return np.take_along_axis(weighted, best, axis=1), best


def reweighted_topk(
    scores: np.ndarray, weight_rows: np.ndarray, k: int, first: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-k of ``scores * weight_rows[i]`` for every row ``i`` of weights (the α-sweep).

    Neighbouring weightings (α and α ± 0.25) rank almost alike, so each is bounded by its
    neighbour's top-k: those k documents re-weighted give a k-th best score no larger than the
    true one, and only scores at or above it (a few more than k per row) are selected from.
    ``first`` is bounded by its exact k-th score (``np.partition``: single-threaded, where
    FAISS's heap pays OpenMP start-up against the BLAS threads, ~10x more on a busy machine).
    Results follow a total order, score descending then position ascending, so the documents
    kept among equal scores never depend on the kernel or on ``first``.

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
    weighted = np.empty_like(s)  # one buffer each, reused: no allocation per weighting
    above = np.empty(s.shape, dtype=bool)
    if n <= 4 * k:  # small corpora: every document is a candidate, no bound needed
        every = np.broadcast_to(np.arange(n, dtype=np.int64), (nq, n))
        for i in range(w.shape[0]):
            np.multiply(s, w[i], out=weighted)
            kk = min(k, n)
            values[i, :, :kk], positions[i, :, :kk] = _topk_small(weighted, every, kk)
        return values, positions
    for i, seed in _chain_from(first, w.shape[0]):
        np.multiply(s, w[i], out=weighted)
        if seed is None:
            bound = np.partition(weighted, n - k, axis=1)[:, n - k]  # the k-th best score
        else:
            bound = np.take_along_axis(weighted, positions[seed], axis=1).min(axis=1)
        hits = np.flatnonzero(np.greater_equal(weighted, bound[:, None], out=above))  # >= k per row
        values[i], positions[i] = _select_hits(weighted, hits, k)
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

    Blocks are FAISS's own (``faiss.cvar.distance_compute_blas_query_bs`` queries by
    ``distance_compute_blas_database_bs`` documents), the product its BLAS (:func:`inner_products`).

    Args:
        unit_vectors: ``(n, d)`` float32, C-contiguous (may be a view of FAISS's storage).
        weights: ``(n,)`` float32 per-document weights (``||d||**alpha``), or None for cosine.
        queries: ``(nq, d)`` float32 unit queries.
        k: results per query.

    Returns:
        ``(scores, positions)`` as :func:`topk`; positions index ``unit_vectors``.
        Memory is bounded by one score block (at most FAISS's own: 16 MB by default).
    """
    n = unit_vectors.shape[0]
    nq = queries.shape[0]
    out_scores = np.empty((nq, k), dtype=np.float32)
    out_pos = np.empty((nq, k), dtype=np.int64)
    query_block = max(1, int(faiss.cvar.distance_compute_blas_query_bs))
    doc_block = max(1, int(faiss.cvar.distance_compute_blas_database_bs))
    d = max(1, queries.shape[1])
    for q0 in range(0, nq, query_block):
        q = np.ascontiguousarray(queries[q0 : q0 + query_block], dtype=np.float32)
        nqb = q.shape[0]
        heap, values, positions = _new_heap(nqb, k)
        if nqb < SMALL_NQ:  # row kernel: long blocks, as few calls as the memory bound allows
            block, buffer = max(doc_block, query_block * doc_block // nqb), None
        else:
            # FAISS's block, widened in whole blocks to _BLOCK_WORK, never past FAISS's own
            # bound on one score block (query_bs x database_bs floats).
            widen = min(-(-_BLOCK_WORK // (nqb * d * doc_block)), query_block // nqb)
            block = doc_block * max(1, widen)
            buffer = np.empty(nqb * min(block, n), dtype=np.float32)  # reused by every block
        # Weights go where they cost fewer multiplies: on the (m, d) documents when there are
        # more queries than dimensions, else on the (nq, m) scores.
        scale_docs = weights is not None and buffer is not None and nqb > d
        doc_buffer = np.empty((min(block, n), d), dtype=np.float32) if scale_docs else None
        for j0 in range(0, n, block):
            docs = np.ascontiguousarray(unit_vectors[j0 : j0 + block], dtype=np.float32)
            m = docs.shape[0]
            if scale_docs:
                docs = np.multiply(docs, weights[j0 : j0 + m, None], out=doc_buffer[:m])
            if buffer is None:
                s = inner_products_small(q, docs)
            else:
                s = inner_products(q, docs, buffer[: nqb * m].reshape(nqb, m))
            if weights is not None and not scale_docs:
                s *= weights[j0 : j0 + m]
            heap.addn(m, faiss.swig_ptr(s), j0, 0, nqb)
        _finish(heap, values, positions)
        out_scores[q0 : q0 + nqb] = values
        out_pos[q0 : q0 + nqb] = positions
    return out_scores, out_pos


def weighted_lists_search(
    lists,
    weights: np.ndarray | None,
    queries: np.ndarray,
    k: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-k of ``(q . u_j) * weights[p_j]`` over rows held in pieces (an IVF-Flat's
    inverted lists, :class:`normrank.search.rows.FloatLists`).

    Consecutive pieces are copied into one block of rows of FAISS's size (widened as
    :func:`weighted_flat_search` widens it) and scored by one BLAS product
    (:func:`inner_products`): a list is often a few dozen rows, and a product per list ran ~1.5x
    slower than one over the whole block (8.4k x 384 in 366 lists, 100 queries: 41 ms against
    27 ms; the copies cost ~1 ms). Per block the ids are mapped to positions, the weights
    multiplied (into the rows or the scores, whichever is fewer), and FAISS's heaps select.

    Args:
        lists: a :class:`~normrank.search.rows.FloatLists`: its ``pieces``, ``(rows, ids)``
            each (``(m, d)`` float32 unit rows and their ``(m,)`` int64 ids, views in place,
            ``m`` at most FAISS's database block), their ``sizes`` (int64 ``m`` each), and
            ``position_of`` (ids -> document positions; ``-1``: not a document, never returned).
        weights: ``(n,)`` float32 weights by document position, or None for cosine.
        queries: ``(nq, d)`` float32 unit queries.
        k: results per query.

    Returns:
        ``(scores, positions)`` as :func:`topk`. Memory: one block of rows and one score block
        (at most FAISS's query x database blocks), their ids and weights; nothing per document.
    """
    nq, d = queries.shape[0], max(1, queries.shape[1])
    out_scores = np.empty((nq, k), dtype=np.float32)
    out_pos = np.empty((nq, k), dtype=np.int64)
    query_block = max(1, int(faiss.cvar.distance_compute_blas_query_bs))
    doc_block = max(1, int(faiss.cvar.distance_compute_blas_database_bs))
    pieces, sizes, position_of = lists.pieces, lists.sizes, lists.position_of
    for q0 in range(0, nq, query_block):
        q = np.ascontiguousarray(queries[q0 : q0 + query_block], dtype=np.float32)
        nqb = q.shape[0]
        heap, values, positions = _new_heap(nqb, k)
        block = doc_block * max(1, min(-(-_BLOCK_WORK // (nqb * d * doc_block)), query_block // nqb))
        block = max(block, int(sizes.max(initial=0)))
        rows = np.empty((block, queries.shape[1]), dtype=np.float32)
        ids = np.empty(block, dtype=np.int64)
        buffer = np.empty(nqb * block, dtype=np.float32)
        for a, b in _runs(sizes, block):  # consecutive pieces that fill one block
            m = 0
            for part, part_ids in pieces[a:b]:
                rows[m : m + part_ids.size] = part
                ids[m : m + part_ids.size] = part_ids
                m += part_ids.size
            pos = position_of(ids[:m])
            w = None if weights is None else weights.take(pos, mode="clip")
            if w is not None and nqb > d:  # fewer multiplies on the rows
                rows[:m] *= w[:, None]
            s = inner_products(q, rows[:m], buffer[: nqb * m].reshape(nqb, m))
            if w is not None and nqb <= d:
                s *= w
            gone = pos < 0
            if gone.any():  # (not a document: never returned)
                s[:, gone] = -np.inf
            heap.addn_with_ids(m, faiss.swig_ptr(s), faiss.swig_ptr(pos), 0, 0, nqb)
        _finish(heap, values, positions)
        out_scores[q0 : q0 + nqb] = values
        out_pos[q0 : q0 + nqb] = positions
    return out_scores, out_pos


def _runs(sizes: np.ndarray, block: int) -> list[tuple[int, int]]:
    """``(start, stop)`` of consecutive pieces whose sizes sum to at most ``block`` each."""
    runs, start, filled = [], 0, 0
    for i, m in enumerate(sizes.tolist()):
        if filled + m > block:
            runs.append((start, i))
            start, filled = i, 0
        filled += m
    if filled:
        runs.append((start, sizes.size))
    return runs
