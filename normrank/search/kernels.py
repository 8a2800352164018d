"""Small compiled kernels that neither FAISS nor numpy has, compiled by numba on first use.

The flat search's selection step, ``heap_add_weighted``: FAISS's heap insertion (the loop of its
``HeapArray::addn``, the same sift-down, so the heaps hold the same entries bit for bit) with the
per-document weight multiplied in as each score is read. Done in numpy and FAISS, the weighting
is one more pass over every score block and the selection FAISS's public ``addn``, which costs
more per score than the result handler inside FAISS's own flat search (issue 17: together ~10%
over ``IndexFlatIP.search`` at 100 queries). Fused, the weighting costs one multiply per score
in registers, which is the floor the method allows.

numba is imported only when a kernel is first needed. Where it cannot be imported (a platform
without its wheels), :data:`HEAP_KERNEL` says ``"faiss"`` and callers use FAISS's ``addn`` after
a numpy multiply: the same results, a few percent slower.
"""

from __future__ import annotations

import warnings

import numpy as np

__all__ = ["heap_add_scanned", "heap_add_weighted", "heap_kernel"]

# Scores tested against the heap top per vectorised step of the selection (measured on a
# 100 x 2048 block: 16-32 compile to scalar code, 64-256 vectorise, ~20 us against ~80 us).
_CHUNK = 64

# Each kernel is loaded (or compiled) on its first use only: a fresh process that runs flat
# searches does not pay for the ANN batch kernel, and the other way round (~0.3-0.5 s each).
_DEFINED: dict[str, object] | None = None
_KERNELS: dict[str, object] = {}
_FAILED: dict[str, str] = {}


def _define() -> dict[str, object]:
    """The kernels as numba dispatchers (cheap: nothing is compiled or loaded until a call)."""
    import numba

    # cache=True keeps the machine code next to this module (or in numba's user cache where
    # that is read-only), so later processes load it instead of compiling (~1 s).
    @numba.njit(cache=True, nogil=True, boundscheck=False)
    def replace_top(hv, hi, i, k, v, idv):  # pragma: no cover - compiled
        # FAISS's heap_replace_top<CMin> on heap i: sift down from the root (1-based), ties
        # broken by id
        p = 1
        while True:
            c1 = p << 1
            if c1 > k:
                break
            c2 = c1 + 1
            a1 = hv[i, c1 - 1]
            if c2 == k + 1 or a1 < hv[i, c2 - 1] or (a1 == hv[i, c2 - 1] and hi[i, c1 - 1] < hi[i, c2 - 1]):
                c = c1
            else:
                c = c2
            b = hv[i, c - 1]
            if v < b or (v == b and idv < hi[i, c - 1]):
                break
            hv[i, p - 1] = b
            hi[i, p - 1] = hi[i, c - 1]
            p = c
        hv[i, p - 1] = v
        hi[i, p - 1] = idv

    @numba.njit(cache=True, nogil=True, boundscheck=False, inline="always")
    def count_above(scores, r, weights, j, top):  # pragma: no cover - compiled
        # How many of row r's scores j .. j + _CHUNK, weighted, beat the heap top: a
        # branch-free loop that compiles to SIMD (~0.1 ns a score; plain 2-D indexing, which
        # row views defeat). Almost every chunk has none, so the scalar insertion rarely
        # runs. NaN compares false here and in the insertion, so they agree.
        above = 0
        for t in range(_CHUNK):
            above += np.int32(scores[r, j + t] * weights[j + t] > top)
        return above

    @numba.njit(cache=True, nogil=True, boundscheck=False)
    def insert_span(vals, ids, scores, weights, j0, i, start, stop):  # pragma: no cover
        k = vals.shape[1]
        for t in range(start, stop):
            v = scores[i, t] * weights[t]
            if vals[i, 0] < v:  # FAISS's CMin::cmp(heap top, score): strictly better only
                replace_top(vals, ids, i, k, v, j0 + t)

    @numba.njit(cache=True, nogil=True, boundscheck=False)
    def heap_add_weighted_rows(vals, ids, scores, weights, j0, r0, r1):  # pragma: no cover
        m = scores.shape[1]
        full = m - m % _CHUNK
        for i in range(r0, r1):
            for j in range(0, full, _CHUNK):
                if count_above(scores, i, weights, j, vals[i, 0]):
                    insert_span(vals, ids, scores, weights, j0, i, j, j + _CHUNK)
            insert_span(vals, ids, scores, weights, j0, i, full, m)

    @numba.njit(cache=True, nogil=True, boundscheck=False)
    def insert_scanned(
        vals, ids, i, r, scores, weights, doc_pos, j0, cand_rank, start, stop
    ):  # pragma: no cover
        k = vals.shape[1]
        for t in range(start, stop):
            v = scores[r, t] * weights[t]
            if vals[i, 0] < v:
                # A document the index returned is in the heap already, scored from its own
                # cosine: skip it here (rare: only scores that would enter the heap get here).
                fresh = True
                for c in range(cand_rank.shape[1]):
                    if cand_rank[i, c] == j0 + t:
                        fresh = False
                        break
                if fresh:
                    replace_top(vals, ids, i, k, v, doc_pos[t])

    @numba.njit(cache=True, nogil=True, boundscheck=False)
    def heap_add_scanned_rows(vals, ids, rows, scores, weights, doc_pos, j0, cand_rank):  # pragma: no cover
        m = scores.shape[1]
        full = m - m % _CHUNK
        for r in range(scores.shape[0]):
            i = rows[r]
            for j in range(0, full, _CHUNK):
                if count_above(scores, r, weights, j, vals[i, 0]):
                    insert_scanned(vals, ids, i, r, scores, weights, doc_pos, j0, cand_rank, j, j + _CHUNK)
            insert_scanned(vals, ids, i, r, scores, weights, doc_pos, j0, cand_rank, full, m)

    return {"rows": heap_add_weighted_rows, "scanned": heap_add_scanned_rows}


def _warm_up(name: str, kernel) -> None:
    """One call on tiny arrays: compiles the kernel, or loads it from numba's cache."""
    vals, ids = np.full((1, 2), -np.inf, dtype=np.float32), np.full((1, 2), -1, dtype=np.int64)
    one = np.ones(3, dtype=np.float32)
    three = np.arange(3, dtype=np.int64)
    if name == "rows":
        kernel(vals, ids, one[None], one, np.int64(0), np.int64(0), np.int64(1))
    else:
        kernel(vals, ids, three[:1], one[None], one, three, np.int64(0), three[None])


def _kernel(name: str):
    """Kernel ``name``, loaded on first use; None where numba cannot be imported or cannot build
    it on this platform (then the callers' numpy / FAISS path runs, with the same results)."""
    global _DEFINED
    kernel = _KERNELS.get(name)
    if kernel is None and name not in _FAILED:
        try:
            with warnings.catch_warnings():  # numba's cache warnings on a read-only site-packages
                warnings.simplefilter("ignore")
                if _DEFINED is None:
                    _DEFINED = _define()
                kernel = _DEFINED[name]
                # Inside this try: a numba that cannot build the kernel falls back here, not
                # mid-search.
                _warm_up(name, kernel)
            _KERNELS[name] = kernel
        except Exception as exc:  # ImportError, or numba failing on this platform
            _FAILED[name] = f"{type(exc).__name__}: {exc}"
            kernel = None
    return kernel


def _reset() -> None:
    """Forget what was loaded or failed (tests: as a fresh process would start)."""
    global _DEFINED
    _DEFINED = None
    _KERNELS.clear()
    _FAILED.clear()


def heap_kernel() -> str:
    """Which selection the flat search runs: ``"numba"`` (the fused kernel) or ``"faiss"``
    (numpy multiply + FAISS's ``addn``, where numba is not available)."""
    return "numba" if _kernel("rows") is not None else "faiss"


def heap_add_weighted(
    vals: np.ndarray, ids: np.ndarray, scores: np.ndarray, weights: np.ndarray, j0: int
) -> bool:
    """Add ``scores[i, j] * weights[j]`` with id ``j0 + j`` to min-heap ``i`` (``vals`` / ``ids``,
    ``(nq, k)``, in FAISS's heap layout, e.g. after ``float_minheap_array_t.heapify``), exactly as
    FAISS's ``addn`` would add the multiplied block. Returns False, doing nothing, where numba is
    not available (the caller then multiplies and calls ``addn``)."""
    kernel = _kernel("rows")
    if kernel is None:
        return False
    # One thread: FAISS's heap runs on its OpenMP threads, and a second pool (numba's, or
    # Python threads) fights them while they spin after the product (measured 2.5-8x slower on
    # 2 cores); the selection is ~5% of the work, the product keeps FAISS's threads.
    kernel(vals, ids, scores, weights, np.int64(j0), np.int64(0), np.int64(vals.shape[0]))
    return True


def heap_add_scanned(
    vals: np.ndarray,
    ids: np.ndarray,
    rows: np.ndarray,
    scores: np.ndarray,
    weights: np.ndarray,
    doc_pos: np.ndarray,
    j0: int,
    cand_rank: np.ndarray,
) -> bool:
    """The ANN batch scan's selection (:func:`normrank.search.ann.adaptive_search`): add
    ``scores[r, t] * weights[t]`` with id ``doc_pos[t]`` to min-heap ``rows[r]``, as FAISS's
    ``addn_with_ids`` would, except for the documents already in that heap from the index: those
    whose weight rank ``j0 + t`` is in ``cand_rank[rows[r]]``. Returns False, doing nothing,
    where numba is not available."""
    kernel = _kernel("scanned")
    if kernel is None:
        return False
    kernel(vals, ids, rows, scores, weights, doc_pos, np.int64(j0), cand_rank)
    return True
