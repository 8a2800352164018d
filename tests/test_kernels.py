"""normrank.kernels: the fused weighted heap insertion against FAISS's own ``addn`` (the same
heaps, entry for entry, ties included), and the flat search with and without numba."""

from __future__ import annotations

import importlib
import sys

import faiss
import numpy as np
import pytest
from conftest import assert_same_topk

from normrank import kernels
from normrank.topk import weighted_flat_search

topk_module = importlib.import_module("normrank.topk")

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
    """normrank.kernels as on a machine where numba cannot be imported."""
    monkeypatch.setitem(sys.modules, "numba", None)  # `import numba` raises ImportError
    monkeypatch.setattr(kernels, "_KERNELS", None)
    monkeypatch.setattr(kernels, "_FAILED", None)
    yield
    monkeypatch.undo()


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
    kernels._KERNELS, kernels._FAILED = None, None
    sys.modules["numba"] = NUMBA  # numba importable again
    assert kernels.heap_kernel() == "numba"
    s, p = weighted_flat_search(u, w, qu, 10)
    np.testing.assert_array_equal(p, p_fallback)
    np.testing.assert_allclose(s, s_fallback, rtol=1e-6)
    assert_same_topk(ref, np.arange(3000), s, p, 10)
