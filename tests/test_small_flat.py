"""A batch on a small HNSW over float32 storage is answered by the exact flat product over FAISS's
own storage (``plan_search``'s ``"flat"`` choice, issue 48): exact over the whole collection, so
equal to numpy brute force; never for single queries, alpha = 0, the over-fetch method, SQ
codes, or an index holding removed documents (those keep the scan, and removed ids stay out)."""

from __future__ import annotations

import faiss
import numpy as np
import pytest

from normrank import NormIndex
from normrank.search.plan import SearchOptions, plan_search

D, N, K = 32, 2500, 10


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(8)
    x = (rng.normal(size=(N, D)) * rng.lognormal(0.0, 0.5, size=(N, 1))).astype(np.float32)
    return x, rng.normal(size=(60, D)).astype(np.float32)


def _brute(x, q, alpha):
    """float64 numpy: every document scored."""
    norms = np.linalg.norm(x.astype(np.float64), axis=1)
    qs = q.astype(np.float64) / np.linalg.norm(q.astype(np.float64), axis=1, keepdims=True)
    scores = (qs @ (x / norms[:, None]).T) * norms**alpha
    ids = np.argsort(-scores, axis=1, kind="stable")[:, :K]
    return np.take_along_axis(scores, ids, axis=1), ids


def _hnsw(x, factory="HNSW32") -> NormIndex:
    idx = NormIndex(D, factory=factory)
    if "SQ" in factory:
        idx.train(x)
    idx.add(x)
    return idx


def test_the_rule():
    hnsw = {"efSearch": 64}
    opts = SearchOptions(K, 1.0, breadth=hnsw)
    flat = dict(nq=100, dim=384, flat_rows=True)
    assert plan_search(opts, 8_400, **flat).method == "flat"
    assert plan_search(opts, 20_000, **flat).method == "flat"
    assert plan_search(opts, 25_000, **flat).method == "scan"  # past 320 x efSearch
    assert plan_search(opts, 20_000, **{**flat, "dim": 1024}).method == "scan"  # past 50k x 384 per query
    assert plan_search(SearchOptions(K, 1.0, breadth={"efSearch": 256}), 50_000, **flat).method == "flat"
    assert plan_search(opts, 8_400, **{**flat, "nq": 19}).method == "scan"
    assert plan_search(opts, 8_400, **{**flat, "flat_rows": False}).method == "scan"
    assert plan_search(SearchOptions(K, 0.0, breadth=hnsw), 8_400, **flat).method == "cosine"
    assert (
        plan_search(SearchOptions(K, 1.0, method="overfetch", breadth=hnsw), 8_400, **flat).method
        == "overfetch"
    )
    ivf = SearchOptions(K, 1.0, breadth={"nprobe": 8, "nlist": 64})
    assert plan_search(ivf, 8_400, **flat).method == "scan"  # measured, not chosen (docs/guarantees.md)


@pytest.mark.parametrize("alpha", [-1.0, -0.5, 0.5, 1.0])
def test_a_batch_on_a_small_hnsw_is_exact_over_the_collection(data, alpha):
    x, q = data
    idx = _hnsw(x)
    faiss.downcast_index(idx.faiss_index.index).hnsw.efSearch = 16  # a narrow beam: flat is exact anyway
    scores, ids, stats = idx.search(q, K, alpha=alpha, return_stats=True)
    assert stats.path == "flat" and stats.depth == N and stats.certified.all()
    want_scores, want_ids = _brute(x, q, alpha)
    np.testing.assert_array_equal(ids, want_ids)
    np.testing.assert_allclose(scores, want_scores, rtol=1e-5)
    _, _, one = idx.search(q[0], K, alpha=alpha, return_stats=True)
    assert one.path == "scan"  # a single query keeps the scan


def test_mixed_alphas_choose_per_group(data):
    x, q = data
    idx = _hnsw(x)
    alphas = np.array([1.0] * 40 + [-1.0] * 10 + [0.0] * 10)
    _, ids, stats = idx.search(q, K, alpha=alphas, return_stats=True)
    assert stats.path == "mixed"
    assert (stats.groups[1.0].path, stats.groups[-1.0].path, stats.groups[0.0].path) == (
        "flat",
        "scan",
        "cosine",
    )
    np.testing.assert_array_equal(ids[:40], _brute(x, q[:40], 1.0)[1])


def test_removed_documents_keep_the_scan_and_stay_out(data):
    x, q = data
    idx = _hnsw(x)
    removed = np.arange(0, N, 5)
    idx.remove(removed)
    _, ids, stats = idx.search(q, K, alpha=1.0, return_stats=True)
    assert stats.path == "scan"
    assert not np.isin(ids, removed).any()


def test_sq_codes_keep_the_scan(data):
    x, q = data
    idx = _hnsw(x, "HNSW32,SQ8")
    assert idx.search(q, K, alpha=1.0, return_stats=True)[2].path == "scan"
