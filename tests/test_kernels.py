"""normrank.search.kernels: the fused weighted heap insertion against FAISS's own ``addn`` (the same
heaps, entry for entry, ties included), and the flat search with and without numba."""

from __future__ import annotations

import importlib
import sys

import faiss
import numpy as np
import pytest
from conftest import assert_same_topk

from normrank.search import kernels
from normrank.search.flat import weighted_flat_search

topk_module = importlib.import_module("normrank.search.flat")

NUMBA = pytest.importorskip("numba")


def _heap(nq: int, k: int):
    vals = np.empty((nq, k), dtype=np.float32)
    ids = np.empty((nq, k), dtype=np.int64)
    heap = faiss.float_minheap_array_t()
    heap.k, heap.nh, heap.val, heap.ids = k, nq, faiss.swig_ptr(vals), faiss.swig_ptr(ids)
    heap.heapify()
    return heap, vals, ids


@pytest.fixture
def without_numba(monkeypatch):
    """normrank.search.kernels as on a machine where numba cannot be imported."""
    monkeypatch.setitem(sys.modules, "numba", None)  # `import numba` raises ImportError
    kernels._reset()
    yield
    monkeypatch.undo()
    kernels._reset()


@pytest.mark.parametrize("seed", range(6))
def test_fused_heap_equals_faiss_addn_of_the_multiplied_scores(seed):
    """Scores on a coarse grid and weights in {0.5, 1, 2}: most insertions meet equal scores, so
    the sift-down's tie rule (by id) is exercised at every level of the heap."""
    rng = np.random.default_rng(seed)
    for _ in range(40):
        nq, m, k = int(rng.integers(1, 6)), int(rng.integers(1, 300)), int(rng.integers(1, 40))
        scores = (rng.integers(-3, 4, (nq, m)) / 4).astype(np.float32)
        weights = rng.choice(np.array([0.5, 1.0, 2.0], dtype=np.float32), m)
        ref, ref_vals, ref_ids = _heap(nq, k)
        fused, vals, ids = _heap(nq, k)
        for j0 in range(0, m, 37):  # several blocks: ids offset by j0
            block = np.ascontiguousarray(scores[:, j0 : j0 + 37])
            assert kernels.heap_add_weighted(vals, ids, block, weights[j0 : j0 + 37], j0)
            multiplied = np.ascontiguousarray(block * weights[j0 : j0 + 37])
            ref.addn(multiplied.shape[1], faiss.swig_ptr(multiplied), j0, 0, nq)
            np.testing.assert_array_equal(vals, ref_vals)  # the heap arrays themselves
            np.testing.assert_array_equal(ids, ref_ids)
        ref.reorder()
        fused.reorder()
        np.testing.assert_array_equal(vals, ref_vals)
        np.testing.assert_array_equal(ids, ref_ids)


def test_fused_heap_skips_nan_and_keeps_the_first_of_equal_scores():
    vals, ids = _heap(1, 2)[1:]
    scores = np.array([[np.nan, 1.0, 1.0, 1.0, 0.5]], dtype=np.float32)
    kernels.heap_add_weighted(vals, ids, scores, np.ones(5, dtype=np.float32), 10)
    assert sorted(ids[0].tolist()) == [11, 12]  # NaN never enters; later equal scores do not evict


def test_kernel_in_use_is_numba():
    assert kernels.heap_kernel() == "numba"


@pytest.mark.parametrize("nq", [1, 30, 120])  # row kernel; weights on scores; (nq > d) on docs
def test_flat_search_same_without_numba(without_numba, nq):
    rng = np.random.default_rng(nq)
    u = rng.standard_normal((3000, 40)).astype(np.float32)
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    qu = rng.standard_normal((nq, 40)).astype(np.float32)
    qu /= np.linalg.norm(qu, axis=1, keepdims=True)
    w = rng.lognormal(0.0, 0.5, 3000).astype(np.float32)
    assert kernels.heap_kernel() == "faiss"
    assert not kernels.heap_add_weighted(*_heap(1, 1)[1:], np.ones((1, 1), np.float32), w[:1], 0)
    s_fallback, p_fallback = weighted_flat_search(u, w, qu, 10)
    ref = (qu.astype(np.float64) @ u.astype(np.float64).T) * w
    assert_same_topk(ref, np.arange(3000), s_fallback, p_fallback, 10)
    kernels._reset()
    sys.modules["numba"] = NUMBA  # numba importable again
    assert kernels.heap_kernel() == "numba"
    s, p = weighted_flat_search(u, w, qu, 10)
    if nq <= u.shape[1]:
        # Both paths: the same product calls on the same blocks, then one float32 multiply by
        # the weight (in the kernel, or numpy's in place): the same bits, the same heap ties.
        np.testing.assert_array_equal(p, p_fallback)
        np.testing.assert_array_equal(s, s_fallback)
    else:
        # More queries than dimensions: without numba the weights scale the documents before
        # the product (fewer multiplies), another rounding: equal up to float32 rounding and ties.
        np.testing.assert_allclose(s, s_fallback, rtol=1e-5)
        assert_same_topk(ref, np.arange(3000), s_fallback, p_fallback, 10)
    assert_same_topk(ref, np.arange(3000), s, p, 10)


@pytest.mark.parametrize("seed", range(4))
def test_scan_heap_equals_faiss_addn_with_the_candidates_masked(seed):
    """The ANN batch scan's kernel: FAISS's ``addn_with_ids`` of the multiplied scores, with the
    documents already in a heap (their weight ranks in ``cand_rank``) set to -inf, on heaps
    picked by ``rows``; coarse scores so that ties meet the sift-down everywhere."""
    rng = np.random.default_rng(seed)
    for _ in range(30):
        nq, m, k = int(rng.integers(2, 8)), int(rng.integers(1, 300)), int(rng.integers(1, 30))
        j0 = int(rng.integers(0, 50))
        rows = rng.permutation(nq)[: int(rng.integers(1, nq + 1))].astype(np.int64)
        scores = (rng.integers(-3, 4, (rows.size, m)) / 4).astype(np.float32)
        weights = rng.choice(np.array([0.5, 1.0, 2.0], dtype=np.float32), m)
        doc_pos = rng.permutation(10 * m + 100)[:m].astype(np.int64)  # storage positions
        cand_rank = rng.integers(j0, j0 + m + 5, (nq, int(rng.integers(1, 20)))).astype(np.int64)
        ref, ref_vals, ref_ids = _heap(nq, k)
        nj = int(rng.integers(0, k + 1))  # heaps part-filled (or full) before the scan
        first = (rng.integers(-3, 4, (nq, nj)) / 4).astype(np.float32)
        ref.addn(nj, faiss.swig_ptr(first), 10**6, 0, nq)
        vals, ids = ref_vals.copy(), ref_ids.copy()
        assert kernels.heap_add_scanned(vals, ids, rows, scores, weights, doc_pos, j0, cand_rank)
        for r, i in enumerate(rows):
            block = (scores[r] * weights)[None].copy()
            block[0, np.isin(np.arange(j0, j0 + m), cand_rank[i])] = -np.inf
            one, one_vals, one_ids = _heap(1, k)
            one_vals[:], one_ids[:] = ref_vals[i], ref_ids[i]
            one.addn_with_ids(m, faiss.swig_ptr(block), faiss.swig_ptr(doc_pos), 0, 0, 1)
            ref_vals[i], ref_ids[i] = one_vals[0], one_ids[0]
        np.testing.assert_array_equal(vals, ref_vals)  # heaps not in rows stay as they were
        np.testing.assert_array_equal(ids, ref_ids)


@pytest.mark.parametrize("alpha", [-1.5, 1.0])
def test_ann_batch_same_without_numba(without_numba, alpha):
    """The ANN batch scan without numba (numpy multiply, -inf masks, FAISS's addn) returns what
    the kernel does, and both equal brute force on an index that returns the true cosine order."""
    from normrank import NormIndex

    rng = np.random.default_rng(3)
    x = (rng.standard_normal((4000, 24)) * rng.lognormal(0, 0.4, (4000, 1))).astype(np.float32)
    q = rng.standard_normal((40, 24)).astype(np.float32)
    idx = NormIndex(24, factory="IVF8,Flat", max_depth=10, n_tail=64)  # the scan does the work
    idx.train(x)
    faiss.extract_index_ivf(idx.faiss_index).nprobe = 8
    idx.add(x)
    norms = np.linalg.norm(x.astype(np.float64), axis=1)
    ref = ((q / np.linalg.norm(q, axis=1, keepdims=True)) @ (x / norms[:, None]).T) * norms**alpha
    assert kernels.heap_kernel() == "faiss"
    s_fallback, p_fallback = idx.search(q, 10, alpha=alpha)
    assert_same_topk(ref, np.arange(4000), s_fallback, p_fallback, 10)
    kernels._reset()
    sys.modules["numba"] = NUMBA
    assert kernels.heap_kernel() == "numba"
    s, p = idx.search(q, 10, alpha=alpha)  # the kernel is chosen per search
    # Exact: the same candidate search and the same product calls on the same chunks (each
    # chunk's extent follows from the heaps, equal by induction), then one float32 multiply.
    np.testing.assert_array_equal(p, p_fallback)
    np.testing.assert_array_equal(s, s_fallback)


def test_each_kernel_loads_on_its_own_first_use():
    """A process that only runs flat searches never loads the ANN batch kernel (each costs
    ~0.3-0.5 s to load from numba's cache in a fresh process), and the other way round."""
    kernels._reset()
    rng = np.random.default_rng(0)
    u = rng.standard_normal((500, 16)).astype(np.float32)
    weighted_flat_search(u, np.ones(500, np.float32), u[:20], 5)
    assert set(kernels._KERNELS) == {"rows"}
    vals, ids = _heap(1, 2)[1:]
    three = np.arange(3, dtype=np.int64)
    one = np.ones(3, dtype=np.float32)
    assert kernels.heap_add_scanned(vals, ids, three[:1], one[None], one, three, 0, three[None])
    assert set(kernels._KERNELS) == {"rows", "scanned"}
