"""normrank.search.flat's kernels against numpy brute force (float64 scores, independent of FAISS).

Every path of the flat kernel is driven: the per-query row kernel (nq < SMALL_NQ), the BLAS
blocks with weights on the scores (nq <= d) and on the documents (nq > d), several query
blocks, a last block shorter than the others, k > n, and the numpy fallback of the product.
"""

from __future__ import annotations

import importlib

import faiss
import numpy as np
import pytest
from conftest import assert_same_topk

from normrank.errors import InvalidParameterError
from normrank.search.flat import (
    SMALL_NQ,
    inner_products,
    reweighted_topk,
    topk,
    weighted_flat_search,
)

topk_module = importlib.import_module("normrank.search.flat")  # `normrank.search.flat` is also the function


def unit_data(n: int, nq: int, d: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(8, d))
    x = centers[rng.integers(8, size=n)] + rng.normal(size=(n, d))
    q = centers[rng.integers(8, size=nq)] + rng.normal(size=(nq, d))
    u = (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)
    qu = (q / np.linalg.norm(q, axis=1, keepdims=True)).astype(np.float32)
    w = rng.lognormal(0.0, 0.5, size=n).astype(np.float32)
    return u, qu, w


def reference(u, qu, w):
    s = qu.astype(np.float64) @ u.astype(np.float64).T
    return s if w is None else s * w.astype(np.float64)


@pytest.fixture
def small_faiss_blocks(monkeypatch):
    """FAISS's block sizes shrunk so that small data spans several query and document blocks."""
    old = faiss.cvar.distance_compute_blas_query_bs, faiss.cvar.distance_compute_blas_database_bs
    faiss.cvar.distance_compute_blas_query_bs, faiss.cvar.distance_compute_blas_database_bs = 48, 64
    monkeypatch.setattr(topk_module, "_BLOCK_WORK", 1)  # no widening: FAISS's blocks as they are
    yield
    faiss.cvar.distance_compute_blas_query_bs, faiss.cvar.distance_compute_blas_database_bs = old


@pytest.mark.parametrize("nq", [1, SMALL_NQ - 1, SMALL_NQ, 30, 120])
@pytest.mark.parametrize("weighted", [True, False])
def test_flat_search_matches_brute_force(nq, weighted):
    u, qu, w = unit_data(2500, nq, 40)  # nq 120 > d 40: the weights go on the documents
    w = w if weighted else None
    s, p = weighted_flat_search(u, w, qu, 10)
    assert s.dtype == np.float32 and p.dtype == np.int64 and s.shape == p.shape == (nq, 10)
    assert_same_topk(reference(u, qu, w), np.arange(u.shape[0]), s, p, 10)


@pytest.mark.parametrize("nq", [3, 20, 100])
def test_flat_search_across_query_and_document_blocks(small_faiss_blocks, nq):
    u, qu, w = unit_data(1000, nq, 24, seed=1)  # 1000 = 15 blocks of 64 and one of 40
    s, p = weighted_flat_search(u, w, qu, 7)
    assert_same_topk(reference(u, qu, w), np.arange(u.shape[0]), s, p, 7)


def test_flat_search_pads_when_k_exceeds_n():
    u, qu, w = unit_data(6, 10, 16, seed=2)
    s, p = weighted_flat_search(u, w, qu, 9)
    assert_same_topk(reference(u, qu, w), np.arange(6), s, p, 9)  # checks the -inf / -1 pads


def test_flat_search_reads_non_contiguous_documents():
    u, qu, w = unit_data(900, 12, 20, seed=3)
    fortran = np.asfortranarray(u)
    s, p = weighted_flat_search(fortran, w, qu, 5)
    assert_same_topk(reference(u, qu, w), np.arange(900), s, p, 5)


def test_flat_search_with_numpy_product_fallback(monkeypatch):
    monkeypatch.setattr(topk_module, "_PRODUCT", None)
    u, qu, w = unit_data(1500, 50, 32, seed=4)
    s, p = weighted_flat_search(u, w, qu, 10)
    assert_same_topk(reference(u, qu, w), np.arange(1500), s, p, 10)


@pytest.mark.parametrize("shape", [(1, 1, 1), (3, 70, 37), (129, 1025, 8)])
def test_inner_products_match_numpy(shape):
    nq, m, d = shape
    rng = np.random.default_rng(5)
    q = rng.standard_normal((nq, d)).astype(np.float32)
    docs = rng.standard_normal((m, d)).astype(np.float32)
    got = inner_products(q, docs)
    np.testing.assert_allclose(got, q.astype(np.float64) @ docs.T.astype(np.float64), rtol=1e-4, atol=1e-4)
    out = np.full((nq, m), np.nan, dtype=np.float32)
    assert inner_products(q, docs, out) is out
    np.testing.assert_array_equal(out, got)  # the same BLAS call on the same operands: the same bits


def test_product_is_faiss_blas_where_reachable():
    """Where FAISS's sgemm_ is visible (Linux and macOS wheels) the kernel must use it: numpy's
    BLAS would make the ratio to FAISS's flat search measure two libraries."""
    fn = topk_module._faiss_sgemm()
    if fn is None:
        pytest.skip("FAISS's sgemm_ is not reachable in this build")
    assert topk_module._FaissProduct(fn).works()
    assert topk_module.PRODUCT_BLAS == "faiss"


def test_topk_matches_numpy_and_pads():
    rng = np.random.default_rng(6)
    scores = rng.standard_normal((7, 300)).astype(np.float32)
    v, p = topk(scores, 12)  # selection only, on the same float32 scores: exact
    order = np.argsort(-scores, axis=1, kind="stable")[:, :12]
    np.testing.assert_array_equal(p, order)
    np.testing.assert_array_equal(v, np.take_along_axis(scores, order, axis=1))
    v, p = topk(scores[:, :4], 6)
    assert (p[:, 4:] == -1).all() and np.isneginf(v[:, 4:]).all()
    np.testing.assert_array_equal(p[:, :4], np.argsort(-scores[:, :4], axis=1, kind="stable"))


@pytest.mark.parametrize("k", [0, -1, 2.5])
def test_topk_refuses_bad_k(k):
    with pytest.raises(InvalidParameterError):
        topk(np.zeros((2, 3), np.float32), k)


def test_topk_refuses_non_matrix():
    with pytest.raises(InvalidParameterError):
        topk(np.zeros(5, np.float32), 2)


@pytest.mark.parametrize("key_bits", [63, 0])  # 0: rows and positions "too many" for packed keys
@pytest.mark.parametrize("n", [30, 2000])  # n <= 4k takes every document as a candidate
def test_reweighted_topk_matches_brute_force_in_total_order(n, key_bits, monkeypatch):
    """Every weighting row against numpy's ranking by (score desc, position asc); the scores are
    rounded to a coarse grid so that ties occur and the tie order is checked too. Both ways of
    selecting among the candidates: one sort of packed (row, score, position) keys, and padded
    rows where those keys would not fit in 64 bits."""
    monkeypatch.setattr(topk_module, "_KEY_BITS", key_bits)
    rng = np.random.default_rng(7)
    scores = np.round(rng.uniform(0, 1, size=(9, n)) * 64).astype(np.float32) / 64
    weight_rows = np.stack(
        [np.full(n, 1.0, np.float32)] + [rng.choice([0.5, 1.0, 2.0], n).astype(np.float32) for _ in range(3)]
    )
    k = 10
    values, positions = reweighted_topk(scores, weight_rows, k, first=1)
    # Exact: one correctly rounded float32 multiply per score on both sides, then selection.
    for i, w in enumerate(weight_rows):
        weighted = scores * w
        kk = min(k, n)
        for row in range(scores.shape[0]):
            order = np.lexsort((np.arange(n), -weighted[row]))[:kk]
            np.testing.assert_array_equal(positions[i, row, :kk], order)
            np.testing.assert_array_equal(values[i, row, :kk], weighted[row, order])


def test_inner_products_converts_inputs_and_refuses_bad_out():
    rng = np.random.default_rng(8)
    q = rng.standard_normal((4, 12))  # float64, converted
    docs = np.asfortranarray(rng.standard_normal((30, 12)).astype(np.float32))  # not C-contiguous
    np.testing.assert_allclose(inner_products(q, docs), q @ docs.T, rtol=1e-4, atol=1e-4)
    for bad in (
        np.empty((4, 30), np.float64),
        np.empty((30, 4), np.float32).T,
        np.empty((4, 29), np.float32),
    ):
        with pytest.raises(InvalidParameterError):
            inner_products(q, docs, bad)
    with pytest.raises(InvalidParameterError):
        inner_products(q, docs[:, :5])
