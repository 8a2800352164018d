"""Rank every α exactly: ``cos(q, d) * w**alpha`` with the cosines computed once per query block.

Each α re-weights the same cosine block by ``w**alpha`` (``normrank.scoring.norm_weight``) and takes
the exact top-k over all documents (``normrank.search.flat.reweighted_topk``: each α bounded by its
neighbour's top-k; equal scores ranked by document order).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import faiss
import numpy as np

from normrank.errors import InvalidInputError
from normrank.scoring import norm_weight
from normrank.search.flat import inner_products, reweighted_topk
from normrank.settings import SWEEP_BLOCK_FLOATS

__all__ = ["KEEP_COSINES_FLOATS", "WeightGrid", "rank_all_alphas", "rank_grids", "unit_rows"]

_NORM_ROWS = 256  # rows per block of unit_rows' norms
KEEP_COSINES_FLOATS = 1 << 26  # keep the whole cosine matrix up to 256 MB (the null reads columns of it)


def unit_rows(x: np.ndarray, what: str) -> tuple[np.ndarray, np.ndarray]:
    """``(x / ||x||, ||x||)`` row-wise in float32; rows must be finite and non-zero."""
    x = np.asarray(x, dtype=np.float32)
    if x.ndim != 2:
        raise InvalidInputError(f"{what} must be 2-D, got shape {x.shape}")
    # A block of rows at a time: the same values as one np.linalg.norm(x, axis=1) (each row is
    # reduced alone) without its whole-matrix temporary of squares (fresh pages, a cold cache).
    norms = np.empty(x.shape[0], dtype=np.float32)
    for s in range(0, x.shape[0], _NORM_ROWS):
        norms[s : s + _NORM_ROWS] = np.linalg.norm(x[s : s + _NORM_ROWS], axis=1)
    if not np.all(np.isfinite(norms)) or np.any(norms <= 0):
        raise InvalidInputError(f"{what}: every vector must be finite and non-zero")
    return (x / norms[:, None]).astype(np.float32, copy=False), norms.astype(np.float32, copy=False)


# Multiply-adds per BLAS thread (~8 ms on one core) below which the cosine product runs on fewer
# threads: a second thread saves at most half of a product this small, while on a machine whose
# cores are busy it waits for one (measured on scifact, 300 x 5183 x 384 with the other core busy:
# two threads 4-86 ms, median 12; one thread 6.3 ms every time). The thread count is not
# bit-neutral: some kernels block the sums per thread (OpenBLAS 0.3.15's Zen kernel: 858 of 5,760
# scores differ in their last bits between one and two threads), within float32's bound for a
# d-term dot product; rankings agree up to such near-ties (tests/test_sweep.py checks the bound).
_THREAD_WORK = 8 << 26


@contextmanager
def _product_threads(work: int) -> Iterator[None]:
    """FAISS's OpenMP threads (the calling thread's setting) limited to one per
    :data:`_THREAD_WORK` multiply-adds of ``work`` while the block runs, then restored."""
    have = faiss.omp_get_max_threads()
    want = max(1, min(have, work // _THREAD_WORK))
    if want >= have:
        yield
        return
    faiss.omp_set_num_threads(want)
    try:
        yield
    finally:
        faiss.omp_set_num_threads(have)


@dataclass(frozen=True)
class WeightGrid:
    """One family of scores ``cos * weights**e`` for every exponent ``e`` of ``exponents``, kept to depth ``k``."""

    name: str
    weights: np.ndarray | None  # (n,) finite, > 0; None: the document norms
    exponents: Sequence[float]
    k: int


def rank_grids(
    queries: np.ndarray,
    docs: np.ndarray,
    grids: Sequence[WeightGrid],
    keep_cosines: bool = False,
    units: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
) -> tuple[dict[str, tuple[np.ndarray, np.ndarray]], dict[str, float], np.ndarray | None]:
    """Exact top-k of every grid from ONE cosine matrix, computed block by block.

    Returns ``({name: (scores, positions)}, timing, cosines)``; scores float32 and positions
    int64, both ``(n_exponents, nq, k)`` (positions index ``docs``; -1 pads when n < k).
    ``timing`` has ``cosine_matmul`` and ``rank_<name>`` seconds. ``cosines``: the whole (nq, n)
    float32 matrix when ``keep_cosines`` and it fits in :data:`KEEP_COSINES_FLOATS`, else None.
    ``units``: ``(unit queries, unit documents, document norms)`` as :func:`unit_rows` gives them,
    when the caller has them already (``queries`` and ``docs`` are then not read).

    The cosines are float32 BLAS products: their last bits depend on the BLAS kernel and thread
    count (each within ``gamma_d = d u / (1 - d u)``, ``u = 2**-24``, of the exact cosine of the
    unit rows), so the rankings are exact for the scores computed and agree between machines up
    to scores that close. One machine, one thread setting: the same bits every run.
    """
    if units is None:
        qn, _ = unit_rows(queries, "queries")
        dn, dnorm = unit_rows(docs, "documents")
    else:
        qn, dn, dnorm = units
    nq, n = qn.shape[0], dn.shape[0]
    plans = []
    for g in grids:
        ex = np.asarray(g.exponents, dtype=np.float64)
        # Sorted so that neighbours rank alike; the chain starts from the exponent nearest 0 (cosine).
        order = np.argsort(ex, kind="stable")
        first = int(np.argmin(np.abs(ex[order])))
        w = dnorm if g.weights is None else np.asarray(g.weights, dtype=np.float32)
        rows = np.stack([norm_weight(w, float(ex[i])) for i in order])  # w**e once per e
        plans.append([g, order, first, rows, None])
    timing = {"cosine_matmul": 0.0, **{f"rank_{g.name}": 0.0 for g in grids}}
    block = max(1, min(nq, SWEEP_BLOCK_FLOATS // max(n, 1)))
    for plan in plans:
        g, order = plan[0], plan[1]
        if block < nq or nq == 0 or not np.array_equal(order, np.arange(order.size)):
            plan[4] = (np.empty((order.size, nq, g.k), np.float32), np.empty((order.size, nq, g.k), np.int64))
        # else: one block with the exponents in order; the kernel's own arrays are the result
    kept = np.empty((nq, n), np.float32) if keep_cosines and nq * n <= KEEP_COSINES_FLOATS else None
    for q0 in range(0, nq, block):
        t = time.perf_counter()
        # FAISS's BLAS (OpenMP threads that stop spinning soon after the call), not numpy's:
        # numpy's OpenBLAS threads keep spinning after it and, on a machine with more runnable
        # threads than cores, took the core the ranking below runs on (it ran 2x slower).
        qb = qn[q0 : q0 + block]
        with _product_threads(qb.shape[0] * n * qn.shape[1]):
            cos = inner_products(qb, dn, None if kept is None else kept[q0 : q0 + qb.shape[0]])
        timing["cosine_matmul"] += time.perf_counter() - t
        for plan in plans:
            g, order, first, rows, out = plan
            t = time.perf_counter()
            v, p = reweighted_topk(cos, rows, g.k, first)
            if out is None:
                plan[4] = (v, p)
            else:
                out[0][order, q0 : q0 + cos.shape[0]] = v
                out[1][order, q0 : q0 + cos.shape[0]] = p
            timing[f"rank_{g.name}"] += time.perf_counter() - t
    return {g.name: out for g, _, _, _, out in plans}, timing, kept


def rank_all_alphas(
    queries: np.ndarray, docs: np.ndarray, weights: np.ndarray | None, alphas: Sequence[float], k: int
) -> tuple[np.ndarray, np.ndarray, dict[str, float]]:
    """Exact top-k of ``cos(q, d) * w**alpha`` for every α, the cosines computed once per block.

    Args:
        queries: (nq, d) raw query vectors. docs: (n, d) raw document vectors.
        weights: (n,) positive per-document weights; None -> the document norms.
        alphas: the grid. k: depth kept per query.

    Returns:
        ``(scores, positions, timing)`` with scores float32 and positions int64, both
        ``(n_alphas, nq, k)`` (positions index ``docs``; -1 pads when n < k).
    """
    ranked, timing, _ = rank_grids(queries, docs, [WeightGrid("w", weights, list(alphas), k)])
    scores, pos = ranked["w"]
    return scores, pos, {"cosine_matmul": timing["cosine_matmul"], "reweight_topk": timing["rank_w"]}
