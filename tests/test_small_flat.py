"""A batch on a small HNSW over float32 storage, or on an IVF-Flat probing a large share of its
lists, is answered by the exact flat product over FAISS's own storage (``plan_search``'s
``"flat"`` choice, issue 48; an IVF-Flat's lists read one by one in place): exact over the whole
collection, so equal to numpy brute force; never for single queries, alpha = 0, the over-fetch
method, SQ / PQ codes, or an HNSW holding removed documents (those keep the scan, and removed
ids stay out; an IVF deletes removed documents from its lists, so it keeps the product)."""

from __future__ import annotations

import faiss
import numpy as np
import pytest

from normrank import NormIndex, settings
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
    ivf = SearchOptions(K, 1.0, breadth={"nprobe": 32, "nlist": 64})
    assert plan_search(ivf, 8_400, **{**flat, "flat_rows": False}).method == "scan"  # SQ / PQ codes


def test_the_ivf_rule(monkeypatch):
    flat = dict(nq=100, dim=384, flat_rows=True)

    def method(nprobe, n=8_400, nlist=64, **kw):
        opts = SearchOptions(K, kw.pop("alpha", 1.0), breadth={"nprobe": nprobe, "nlist": nlist})
        return plan_search(opts, n, **{**flat, **kw}).method

    assert method(10) == method(32) == method(64) == "flat"  # 0.15 of the lists or more
    assert method(9) == method(8) == "scan"  # an eighth: measured mixed (settings.py)
    assert method(10, nq=19) == "scan"
    assert method(10, flat_rows=False) == "scan"
    assert method(64, n=1_000_000) == "flat"  # no size cap for an IVF (the HNSW's is 50k x 384)
    assert method(10, alpha=0.0) == "cosine"
    for off in (0, 0.0, 1.5):
        monkeypatch.setattr(settings, "FLAT_BATCH_MIN_PROBED", off)
        assert method(64) == "scan"
    monkeypatch.setattr(settings, "FLAT_BATCH_MIN_PROBED", 1)
    assert (method(63), method(64)) == ("scan", "flat")


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


IVF_LISTS = 32


def _brute_live(x, ids, q, alpha):
    """float64 numpy over the live documents ``x`` with ids ``ids``: ``(scores, ids)`` top-K."""
    scores, at = _brute(x, q, alpha)
    return scores, ids[at]


def _assert_same_topk(got_scores, got_ids, want_scores, want_ids):
    """Scores equal within float32 rounding; ids equal as sets wherever no tie could swap them."""
    np.testing.assert_allclose(got_scores, want_scores, rtol=1e-5, atol=1e-6)
    for gs, gi, ws, wi in zip(got_scores, got_ids, want_scores, want_ids, strict=True):
        sure = ws > ws[-1] + 1e-5  # strictly above the k-th score: no tie can swap it out
        assert set(wi[sure]) <= set(gi)
        assert len(set(gi)) == K and np.all(np.diff(gs) <= 1e-7)


def _ivf(x, kind="own", factory=f"IVF{IVF_LISTS},Flat", nprobe=IVF_LISTS // 2, rng=None):
    """``(NormIndex, ids)``: its own IVF (ids 0..n-1), its own with ids given to ``add``, or
    a FAISS id map over an IVF-Flat filled by ``add_with_ids`` and wrapped."""
    ids = np.arange(N, dtype=np.int64)
    if kind != "own":
        ids = np.random.default_rng(3).permutation(10**6)[:N].astype(np.int64)
    if kind == "idmap":
        ivf = faiss.IndexIVFFlat(faiss.IndexFlatL2(D), D, IVF_LISTS)
        ivf.train(x)
        src = faiss.IndexIDMap2(ivf)
        src.add_with_ids(x, ids)
        idx = NormIndex.from_faiss(src)
    else:
        idx = NormIndex(D, factory=factory)
        idx.train(x)
        idx.add(x, ids if kind == "ids" else None)
    faiss.extract_index_ivf(idx.faiss_index).nprobe = nprobe
    return idx, ids


@pytest.mark.parametrize("kind", ["own", "ids", "idmap"])
@pytest.mark.parametrize("alpha", [-1.0, -0.5, 0.5, 1.0])
def test_a_batch_on_an_ivf_flat_is_exact_over_the_collection(data, kind, alpha):
    x, q = data
    idx, ids = _ivf(x, kind, nprobe=IVF_LISTS // 4)  # a quarter of the lists: the product reads them all
    scores, got, stats = idx.search(q[:50], K, alpha=alpha, return_stats=True)
    assert stats.path == "flat" and stats.depth == stats.scanned == N and stats.certified.all()
    _assert_same_topk(scores, got, *_brute_live(x, ids, q[:50], alpha))


@pytest.mark.parametrize("kind", ["own", "ids", "idmap"])
@pytest.mark.parametrize("alpha", [-1.0, 1.0])
def test_an_ivf_flat_after_removals_returns_only_live_documents(data, kind, alpha):
    x, q = data
    idx, ids = _ivf(x, kind)
    gone = np.zeros(N, dtype=bool)
    gone[::3] = True
    gone[np.argsort(np.linalg.norm(x, axis=1))[-50:]] = True  # the heaviest: they would win at alpha = 1
    idx.remove(ids[gone])
    scores, got, stats = idx.search(q[:20], K, alpha=alpha, return_stats=True)
    assert stats.path == "flat" and stats.depth == N - gone.sum() and stats.certified.all()
    assert not np.isin(got, ids[gone]).any()
    _assert_same_topk(scores, got, *_brute_live(x[~gone], ids[~gone], q[:20], alpha))


def test_an_ivf_flat_below_the_rule_keeps_the_scan(data):
    x, q = data
    idx, _ = _ivf(x)
    assert idx.search(q[:19], K, alpha=1.0, return_stats=True)[2].path == "scan"  # too few queries
    assert idx.search(q[0], K, alpha=1.0, return_stats=True)[2].path == "scan"
    assert idx.search(q, K, alpha=0.0, return_stats=True)[2].path == "cosine"
    faiss.extract_index_ivf(idx.faiss_index).nprobe = IVF_LISTS // 8  # under 0.15 of the lists
    assert idx.search(q, K, alpha=1.0, return_stats=True)[2].path == "scan"


@pytest.mark.parametrize("factory", [f"IVF{IVF_LISTS},SQ8", f"IVF{IVF_LISTS},PQ8"])
def test_ivf_codes_keep_the_scan(data, factory):
    x, q = data
    idx, _ = _ivf(x, factory=factory)
    assert idx.search(q, K, alpha=1.0, return_stats=True)[2].path == "scan"
