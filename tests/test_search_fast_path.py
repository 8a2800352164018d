"""The single-query fast path of NormIndex.search (normrank.search.searcher): the same arguments, the
same refusals and the same results as the full checks and numpy brute force."""

from __future__ import annotations

import faiss
import numpy as np
import pytest
from conftest import assert_same_topk

from normrank import NormIndex
from normrank.errors import (
    DimensionMismatchError,
    InvalidParameterError,
    NonFiniteError,
    ZeroNormError,
)
from normrank.search.plan import SearchOptions
from normrank.search.searcher import _one_query_args, search_args
from normrank.validation import as_alpha, as_vectors, split_norms

D = 24


def full_checks(q, k, alpha, dim=D, default_alpha=0.25, factor=10):
    """What search_args returned before the fast path: the general checks alone."""
    unit_q = split_norms(as_vectors(q, dim, what="queries", allow_1d=True))[0]
    a = default_alpha if alpha is None else alpha
    return unit_q, as_alpha(a, unit_q.shape[0]), SearchOptions(int(k), a, factor)


def options(k, alpha, default_alpha=0.0):
    """The options NormIndex.search builds: the call's alpha, else the index's default."""
    return SearchOptions(k, default_alpha if alpha is None else alpha)


@pytest.mark.parametrize("shape", [(D,), (1, D)])
@pytest.mark.parametrize("alpha", [None, -1.5, 0, 0.5, 16.0])
def test_fast_args_equal_the_full_checks_bit_for_bit(shape, alpha):
    rng = np.random.default_rng(0)
    for scale in (1e-20, 1e-3, 1.0, 1e3, 1e18):
        for _ in range(50):
            q = (scale * rng.standard_normal(shape)).astype(np.float32)
            got = _one_query_args(q, options(7, alpha, 0.25), D)
            assert got is not None  # the fast path was taken
            want = full_checks(q, 7, alpha)
            assert got[0].dtype == np.float32 and got[0].shape == (1, D)
            np.testing.assert_array_equal(got[0].view(np.int32), want[0].view(np.int32))
            assert (got[2].k, got[2].k_factor) == (want[2].k, want[2].k_factor)
            np.testing.assert_array_equal(got[1], want[1])
            assert got[1].dtype == want[1].dtype


@pytest.mark.parametrize(
    ("q", "k", "alpha", "error"),
    [
        (np.full(D, np.nan, dtype=np.float32), 5, 0.5, NonFiniteError),
        (np.r_[np.inf, np.ones(D - 1)].astype(np.float32), 5, 0.5, NonFiniteError),
        (np.zeros(D, dtype=np.float32), 5, 0.5, ZeroNormError),
        (np.ones(D + 1, dtype=np.float32), 5, 0.5, DimensionMismatchError),
        (np.ones((1, 1, D), dtype=np.float32), 5, 0.5, DimensionMismatchError),
        (np.ones(D, dtype=np.float32), True, 0.5, InvalidParameterError),
        (np.ones(D, dtype=np.float32), 0, 0.5, InvalidParameterError),
        (np.ones(D, dtype=np.float32), 1 << 25, 0.5, InvalidParameterError),
        (np.ones(D, dtype=np.float32), 5, float("nan"), InvalidParameterError),
        (np.ones(D, dtype=np.float32), 5, 16.5, InvalidParameterError),
        (np.ones(D, dtype=np.float32), 5, -17, InvalidParameterError),
    ],
)
def test_fast_path_leaves_refusals_to_the_full_checks(q, k, alpha, error):
    assert _one_query_args(q, options(k, alpha), D) is None
    with pytest.raises(error):
        search_args(q, options(k, alpha), D)
    idx = NormIndex(D, factory="HNSW16")
    idx.add(np.random.default_rng(1).standard_normal((50, D)).astype(np.float32))
    with pytest.raises(error):
        idx.search(q, k, alpha=alpha)


def test_other_inputs_take_the_full_path_and_agree():
    """float64, lists, numpy scalars for alpha and k: not the fast path, the same answer."""
    rng = np.random.default_rng(2)
    q32 = rng.standard_normal(D).astype(np.float32)
    fast = _one_query_args(q32, options(3, 0.5), D)
    for q, k, alpha in [
        (q32.astype(np.float64), 3, 0.5),
        (q32.tolist(), 3, 0.5),
        (q32, np.int64(3), 0.5),
        (q32, 3, np.float64(0.5)),
    ]:
        assert _one_query_args(q, options(k, alpha), D) is None
        got = search_args(q, options(k, alpha), D)
        np.testing.assert_array_equal(got[0], fast[0])
        np.testing.assert_array_equal(got[1], fast[1])


def brute_scores(x: np.ndarray, q: np.ndarray, alpha: float) -> np.ndarray:
    norms = np.linalg.norm(x.astype(np.float64), axis=1)
    qs = q / np.linalg.norm(q, axis=1, keepdims=True)
    return (qs @ (x / norms[:, None]).T) * norms**alpha


@pytest.mark.parametrize("alpha", [-1.5, 0.0, 0.5, 1.0])
def test_single_queries_are_exact_when_the_index_is(alpha):
    """IVF probing every list ranks cosines exactly, so one query at a time (the fast path,
    its cached plan reused across queries) must equal brute force and the batch path."""
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((1500, D)) * rng.lognormal(0, 0.5, (1500, 1))).astype(np.float32)
    q = rng.standard_normal((40, D)).astype(np.float32)
    idx = NormIndex(D, factory="IVF8,Flat")
    idx.train(x)
    faiss.extract_index_ivf(idx.faiss_index).nprobe = 8
    idx.add(x, ids=np.arange(1500) * 3 + 7)
    # Exact up to float32 rounding (the single path's FAISS row kernel and the batch's BLAS
    # round differently): brute force's ranking, ties within 1e-5 in any order.
    ref, ids = brute_scores(x, q, alpha), np.arange(1500) * 3 + 7
    singles = [idx.search(q[i], 10, alpha=alpha) for i in range(q.shape[0])]
    assert_same_topk(ref, ids, *(np.vstack(v) for v in zip(*singles, strict=True)), 10)
    assert_same_topk(ref, ids, *idx.search(q, 10, alpha=alpha), 10)


def test_plan_follows_the_index_breadth_and_its_state(monkeypatch):
    """The plan follows FAISS's current breadth (changed on the index directly, or per call)
    and the derived state is dropped by any change of the index: every FAISS search runs at
    the breadth set at that moment (or wider, never narrower), single or batched."""
    from normrank.search import ann
    from normrank.search.plan import ANY_WEIGHTED_ALPHA, SearchOptions, plan_search

    used = []
    rng = np.random.default_rng(4)
    x = rng.standard_normal((400, D)).astype(np.float32)
    idx = NormIndex(D, factory="HNSW16")
    idx.add(x)
    hnsw = faiss.downcast_index(idx.faiss_index.index).hnsw
    real = ann.search_raw

    def recording(index, q, depth, params=None):
        used.append((hnsw.efSearch if params is None else max(params.efSearch, hnsw.efSearch), depth))
        return real(index, q, depth, params)

    monkeypatch.setattr(ann, "search_raw", recording)
    q = x[0]
    for ef in (16, 64, 16, 200):
        hnsw.efSearch = ef
        for query in (q, x[:3]):  # the latency case and a batch
            idx.search(query, 5, alpha=0.5)
            # FAISS at this breadth, the depth planned for it (a stale plan would fetch another)
            options = SearchOptions(5, ANY_WEIGHTED_ALPHA, 10, breadth={"efSearch": ef})
            assert used[-1] == (ef, plan_search(options, 400).depth)
    hnsw.efSearch = 200
    idx.search(q, 5, alpha=0.5, ef_search=16)
    assert used[-1] == (16, 16)
    assert hnsw.efSearch == 200  # the per-call breadth was put back
    idx.search(q, 5, alpha=0.5)
    assert used[-1] == (200, 50)  # and the plan at 200 is used again, not the call's
    idx.add(rng.standard_normal((5, D)).astype(np.float32))
    assert not idx._cache.powers and idx._cache.one is None  # a new state derives everything again
    _, ids = idx.search(q, 5, alpha=0.5)
    assert ids[0, 0] == 0 and len(idx._cache.powers) == 1


@pytest.mark.parametrize("alpha", [0.0, 0.5, -1.0])
def test_a_single_query_short_of_candidates_is_completed_as_the_batch(alpha):
    """An IVF probing one small list has fewer than k candidates (FAISS pads them with -1): one
    query is completed as the batch path completes it, k stored ids and no pad while 300
    documents exist, the exact top-k of the whole collection (tests/test_short_answers.py)."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((300, D)).astype(np.float32)
    idx = NormIndex(D, factory="IVF32,Flat")
    idx.train(np.vstack([x, rng.standard_normal((1000, D)).astype(np.float32)]))  # 39 a list: quiet
    idx.add(x, ids=np.arange(300) + 1000)
    faiss.extract_index_ivf(idx.faiss_index).nprobe = 1
    q = rng.standard_normal((5, D)).astype(np.float32)
    unit_q = q / np.linalg.norm(q, axis=1, keepdims=True)
    assert (idx.faiss_index.search(unit_q, 40)[1] == -1).any(axis=1).all()  # FAISS pads each one
    batch_s, batch_ids, stats = idx.search(q, 40, alpha=alpha, return_stats=True)
    assert stats.filled == q.shape[0] and not stats.certified.any()
    ref = brute_scores(x, q, alpha)
    assert_same_topk(ref, np.arange(300) + 1000, batch_s, batch_ids, 40)
    for i in range(q.shape[0]):
        s, ids = idx.search(q[i], 40, alpha=alpha)
        assert_same_topk(ref[i : i + 1], np.arange(300) + 1000, s, ids, 40)
        np.testing.assert_allclose(s[0], batch_s[i], rtol=1e-5, atol=1e-6)


def test_single_cosine_query_is_faiss_own_answer_and_skips_removed_documents():
    """alpha = 0, one query: FAISS's own top-k exactly (scores and ids) while nothing is removed;
    after removals from HNSW (which keeps them in its graph) never a removed id, k live ones
    with the batch path's ids and brute force's cosines."""
    rng = np.random.default_rng(6)
    x = rng.standard_normal((600, D)).astype(np.float32)
    idx = NormIndex(D, factory="HNSW16")
    idx.add(x, ids=np.arange(600) * 2 + 5)
    q = rng.standard_normal((20, D)).astype(np.float32)
    unit = split_norms(q)[0]  # the unit queries normrank searches with
    for i in range(q.shape[0]):
        want_s, want_i = idx.faiss_index.search(unit[i : i + 1], 10)
        got_s, got_i = idx.search(q[i], 10, alpha=0.0)
        np.testing.assert_array_equal(got_i, want_i)
        np.testing.assert_array_equal(got_s, want_s)
    # A beam narrower than k: widened to k, as the batch path widens it (FAISS alone fills k
    # results from a beam of 16, some of them worse).
    hnsw = faiss.downcast_index(idx.faiss_index.index).hnsw
    hnsw.efSearch = 16
    narrow = idx.search(q, 40, alpha=0.0)[1]
    for i in range(q.shape[0]):
        np.testing.assert_array_equal(idx.search(q[i], 40, alpha=0.0)[1][0], narrow[i])
    hnsw.efSearch = 64
    first = np.array([idx.search(q[i], 1, alpha=0.0)[1][0, 0] for i in range(q.shape[0])])
    idx.remove(np.unique(first))  # every query's best document goes
    _, batch_i = idx.search(q, 10, alpha=0.0)
    xu = x / np.linalg.norm(x, axis=1, keepdims=True)
    for i in range(q.shape[0]):
        s, got = idx.search(q[i], 10, alpha=0.0)
        assert not np.isin(got, first).any() and (got >= 0).all()
        np.testing.assert_array_equal(got[0], batch_i[i])
        np.testing.assert_allclose(s[0], xu[(got[0] - 5) // 2] @ unit[i], rtol=1e-5, atol=1e-6)


def _index_kinds(rng):
    x = (rng.standard_normal((900, D)) * rng.lognormal(0, 0.6, (900, 1))).astype(np.float32)
    hnsw = NormIndex(D, factory="HNSW16")
    hnsw.add(x, ids=np.arange(900) * 3 + 1)
    ivf = NormIndex(D, factory="IVF16,Flat", nprobe=4)
    ivf.train(x)
    ivf.add(x, ids=np.arange(900) * 3 + 1)
    return x, {"hnsw": hnsw, "ivf": ivf}


@pytest.mark.parametrize("kind", ["hnsw", "ivf"])
def test_latency_case_is_the_general_path_bit_for_bit(kind):
    """One float32 query (the bound latency case, normrank.search.searcher.OneQuery) against the
    same query through the general path (k_factor given: the same value, the full checks):
    scores and ids equal bit for bit at every alpha, with the index's options changed between
    calls (no state change: the bound case must follow them), removals (HNSW keeps them in its
    graph), padding (one probed list) and k past the documents."""
    rng = np.random.default_rng(7)
    _, kinds = _index_kinds(rng)
    idx = kinds[kind]
    q = rng.standard_normal((12, D)).astype(np.float32)

    def agree(k, alpha=None):
        for i in range(q.shape[0]):
            fast = idx.search(q[i], k, alpha=alpha)
            slow = idx.search(q[i], k, alpha=alpha, k_factor=idx.k_factor)
            np.testing.assert_array_equal(fast[1], slow[1])
            np.testing.assert_array_equal(fast[0].view(np.int32), slow[0].view(np.int32))

    for alpha in (-1.5, 0.0, 0.5, 1.0):
        agree(10, alpha)
    assert type(idx._cache.one).__name__ == "OneQuery" and idx._cache.powers  # it was taken
    idx.alpha = -0.75
    agree(10)  # the index's default alpha
    idx.n_tail, idx.max_depth = 3, 12
    agree(7, 1.0)
    idx.ann = "overfetch"
    agree(7, 1.0)
    idx.ann, idx.n_tail, idx.max_depth = "adaptive", None, None
    agree(5000, 0.5)  # more than there are: padded
    if kind == "ivf":
        faiss.extract_index_ivf(idx.faiss_index).nprobe = 1
        agree(60, 0.5)  # one list: fewer candidates than k
        agree(60, 0.0)
    else:
        idx.remove(np.unique(idx.search(q, 3, alpha=1.0)[1]))
        for alpha in (0.0, 1.0, -1.5):
            agree(10, alpha)


def test_latency_case_keeps_a_bounded_number_of_weightings():
    """One query at a time over many alphas: the cache keeps a bounded number of weightings,
    one order, and of the vectors only a prefix within its budget."""
    from normrank.settings import SCAN_PREFIX_BYTES, WEIGHT_CACHE_ENTRIES

    rng = np.random.default_rng(8)
    _, kinds = _index_kinds(rng)
    idx = kinds["hnsw"]
    q = rng.standard_normal(D).astype(np.float32)
    for alpha in np.linspace(-2, 2, 41):
        idx.search(q, 5, alpha=float(alpha))
    assert 0 < len(idx._cache.powers) <= WEIGHT_CACHE_ENTRIES
    n = idx.ntotal
    assert set(idx._cache.orders) == {-1, 1} and idx._cache.ascending.nbytes == 4 * n
    prefix = sum(o._prefix.nbytes for o in idx._cache.orders.values() if o._prefix is not None)
    assert prefix <= SCAN_PREFIX_BYTES
    # weights, the order, the id lookup (at most 12 bytes a document), the 1/64 samples and the
    # first 8192 weights in order (8 weightings a sign at most)
    heads = 2 * 8 * 4 * min(n, 8192)
    assert idx._cache.nbytes - prefix <= WEIGHT_CACHE_ENTRIES * 4 * n + 4 * n + 12 * n + 3 * n + heads


def test_scan_prefix_budget_is_read_at_run_time(monkeypatch):
    """``normrank.settings.SCAN_PREFIX_BYTES`` set at run time bounds the next index state's
    prefix copy (0: none, rows read in place), with the same results bit for bit."""
    from normrank import settings

    rng = np.random.default_rng(9)
    _, kinds = _index_kinds(rng)
    idx = kinds["hnsw"]
    q = rng.standard_normal((3, D)).astype(np.float32)
    want = [idx.search(q, 7, alpha=a) for a in (-1.0, 1.0)]
    assert idx._cache.orders[1]._prefix is not None
    for budget in (0, 4096):
        monkeypatch.setattr(settings, "SCAN_PREFIX_BYTES", budget)
        idx = NormIndex.from_state(idx.to_state())  # a new state: a new cache
        got = [idx.search(q, 7, alpha=a) for a in (-1.0, 1.0)]
        prefix = sum(o._prefix.nbytes for o in idx._cache.orders.values() if o._prefix is not None)
        assert prefix <= budget // 2 * 2
        for (s0, i0), (s1, i1) in zip(want, got, strict=True):
            np.testing.assert_array_equal(i0, i1)
            np.testing.assert_array_equal(s0, s1)
