"""``SearchStats.certified``: per query, whether the result is provably the exact top-k given the
candidates the index returned (the bound held before any scan row was read), checked against an
independent reference: FAISS's own ``index.search`` at the plan's depth, re-scored in numpy.

* a query reported certified has the top-k of its re-scored candidates (nothing scanned changed
  it);
* a query whose bound, computed here from its candidates' cosine at the trusted rank, the
  weights' range over the documents it did not fetch and the k-th re-scored score, does not
  hold is never reported certified;
* ``"flat"`` certifies every query and equals numpy brute force; ``"cosine"`` every query.
"""

from __future__ import annotations

import faiss
import numpy as np
import pytest

from normrank import NormIndex
from normrank.search.bound import unseen_can_beat
from normrank.search.faiss_info import ann_params
from normrank.search.plan import SearchOptions, SearchStats, plan_search

D, N, NQ, K = 32, 3000, 40, 10


@pytest.fixture(scope="module")
def data():
    """Clustered directions with log-normal norms; half the queries have a dozen near-duplicates
    among the documents (their top-k stands far above the trusted cosine: the bound holds on
    the candidates), half do not (the scan must run)."""
    rng = np.random.default_rng(5)
    centers = rng.normal(size=(16, D))
    u = centers[rng.integers(16, size=N)] + rng.normal(size=(N, D)) * 1.5
    q = centers[rng.integers(16, size=NQ)] + rng.normal(size=(NQ, D)) * 1.5
    near = NQ // 2 * 12
    u[:near] = np.repeat(q[: NQ // 2], 12, axis=0) + rng.normal(size=(near, D)) * 0.02
    x = (u / np.linalg.norm(u, axis=1, keepdims=True)) * rng.lognormal(0.0, 0.1, size=(N, 1))
    return x.astype(np.float32), q.astype(np.float32)


def _index(x, factory: str, **options) -> NormIndex:
    idx = NormIndex(D, factory=factory, **options)
    if "IVF" in factory:
        idx.train(x)
        faiss.extract_index_ivf(idx.faiss_index).nprobe = 4
    elif "HNSW" in factory:
        _inner(idx).hnsw.efSearch = 64
    idx.add(x)
    return idx


def _inner(idx: NormIndex) -> faiss.Index:
    outer = faiss.downcast_index(idx.faiss_index)
    return faiss.downcast_index(outer.index) if isinstance(outer, faiss.IndexIDMap) else outer


def _reference(idx: NormIndex, x, q, alpha: float, removed=()):
    """Per query: the weighted top-k ids over FAISS's own candidates at the plan's depth, and
    whether the bound holds on them (trusted cosine, weights' range over the unfetched live
    documents, k-th re-scored score)."""
    inner = _inner(idx)
    options = SearchOptions(
        K, alpha, idx.k_factor, method=idx.ann, max_depth=idx.max_depth, breadth=ann_params(inner)
    )
    plan = plan_search(options, idx.ntotal + len(removed))
    ef = options.breadth.get("efSearch")
    params = faiss.SearchParametersHNSW(efSearch=plan.depth) if ef is not None and plan.depth > ef else None
    unit_q = q / np.linalg.norm(q, axis=1, keepdims=True)
    cos, cand = idx.faiss_index.search(unit_q, plan.depth, params=params)
    w = (np.linalg.norm(x.astype(np.float64), axis=1) ** alpha).astype(np.float32)
    live = np.ones(N, dtype=bool)
    live[list(removed)] = False
    top_ids, holds = [], []
    trust = min(plan.depth, max(K, plan.trust))
    for c, ids in zip(cos, cand, strict=True):
        ok = (ids >= 0) & live[np.maximum(ids, 0)]
        s = c[ok] * w[ids[ok]]
        best = np.argsort(-s, kind="stable")[:K]
        top_ids.append(ids[ok][best])
        unseen = live.copy()
        unseen[ids[ids >= 0]] = False
        kth = s[best[-1]] if best.size == K else -np.inf
        if not unseen.any():
            holds.append(bool(best.size == K))
            continue
        beat = unseen_can_beat(kth, float(c[trust - 1]), w[unseen].max(), w[unseen].min(), D)
        holds.append(not beat and ids[trust - 1] >= 0)
    return top_ids, np.array(holds)


def _check(idx, x, q, alpha, removed=()):
    top_ids, holds = _reference(idx, x, q, alpha, removed)
    # Single (the latency path) and batches of 10: below the batch size that a small HNSW
    # answers by the flat product instead (tests/test_small_flat.py), so the scan runs.
    for rows in ([0], *np.split(np.arange(NQ), NQ // 10)):
        queries = q[rows[0]] if len(rows) == 1 else q[rows]
        _, ids, stats = idx.search(queries, K, alpha=alpha, return_stats=True)
        assert stats.certified.dtype == bool and stats.certified.shape == (len(rows),)
        assert stats.n_certified == int(stats.certified.sum())
        for j, r in enumerate(rows):
            if stats.certified[j]:
                assert set(ids[j].tolist()) == set(top_ids[r].tolist()), (alpha, r)
            if not holds[r]:
                assert not stats.certified[j], (alpha, r)
    return holds


@pytest.mark.parametrize("factory", ["HNSW32", "IVF16,Flat"])
@pytest.mark.parametrize("alpha", [-1.0, -0.5, 0.5, 1.0])
def test_a_certified_query_has_the_exact_top_k_of_its_candidates(data, factory, alpha):
    x, q = data
    idx = _index(x, factory)
    holds = _check(idx, x, q, alpha)
    _, _, stats = idx.search(q[:10], K, alpha=alpha, return_stats=True)
    assert stats.path == "scan"
    holds = holds[:10]
    # Certified exactly where the bound held on the candidates (the reference's range is over
    # the unfetched documents only: never wider than the search's, so at most as many hold).
    assert 0 < stats.n_certified <= int(holds.sum())


def test_certificates_with_removed_documents(data):
    x, q = data
    idx = _index(x, "HNSW32")
    removed = list(range(0, N, 7))
    idx.remove(removed)
    for alpha in (-1.0, 1.0):
        _check(idx, x, q, alpha, removed)


@pytest.mark.parametrize("factory", ["HNSW32", "IVF16,Flat"])
def test_overfetch_reports_the_bound_and_scans_nothing(data, factory):
    x, q = data
    idx = _index(x, factory, ann="overfetch")
    for alpha in (-1.0, 1.0):
        top_ids, holds = _reference(idx, x, q, alpha)
        _, ids, stats = idx.search(q, K, alpha=alpha, return_stats=True)
        assert stats.path == "overfetch" and stats.scanned == 0
        for r in range(NQ):  # every over-fetch result is its candidates' top-k
            assert set(ids[r].tolist()) == set(top_ids[r].tolist())
        assert not (stats.certified & ~holds).any()
        assert stats.n_certified < NQ  # the bound does not hold for every query at depth 100
        for r in range(4):  # single queries (the latency path) alike
            _, _, one = idx.search(q[r], K, alpha=alpha, return_stats=True)
            assert one.certified.tolist() == [stats.certified[r]]


@pytest.mark.parametrize("factory", ["HNSW32", "IVF16,Flat"])
def test_cosine_certifies_every_query(data, factory):
    x, q = data
    idx = _index(x, factory)
    for queries in (q[0], q):
        _, _, stats = idx.search(queries, K, alpha=0.0, return_stats=True)
        assert stats.path == "cosine" and stats.certified.all()
        assert stats.certified.size == (1 if queries.ndim == 1 else NQ)


def test_flat_certifies_every_query_and_is_exact(data):
    x, q = data
    idx = _index(x, "Flat")
    for alpha in (-1.0, 0.5):
        _, ids, stats = idx.search(q, K, alpha=alpha, return_stats=True)
        assert stats.path == "flat" and stats.certified.all() and stats.certified.size == NQ
        norms = np.linalg.norm(x.astype(np.float64), axis=1)
        ref = (q / np.linalg.norm(q, axis=1, keepdims=True)) @ (x / norms[:, None]).T * norms**alpha
        want = np.argsort(-ref, axis=1)[:, :K]
        np.testing.assert_array_equal(ids, want)


@pytest.mark.parametrize("factory", ["HNSW32", "IVF16,Flat", "Flat"])
def test_certificates_follow_the_callers_query_order_across_alpha_groups(data, factory):
    x, q = data
    idx = _index(x, factory)
    alphas = np.array([1.0, -1.0, 0.0, 0.5] * (NQ // 4))
    _, _, stats = idx.search(q, K, alpha=alphas, return_stats=True)
    assert stats.certified.shape == (NQ,) and set(stats.groups) == {1.0, -1.0, 0.0, 0.5}
    for a in (1.0, -1.0, 0.0, 0.5):
        rows = np.flatnonzero(alphas == a)
        _, _, alone = idx.search(q[rows], K, alpha=a, return_stats=True)
        np.testing.assert_array_equal(stats.certified[rows], alone.certified)
        np.testing.assert_array_equal(stats.groups[a].certified, alone.certified)


def test_a_part_without_certificates_leaves_the_call_without_any():
    """A backend part that does not certify (PostgreSQL's) makes the call's ``certified`` empty,
    never a wrong all-False; parts that do are concatenated in query order."""
    both = SearchStats()
    both.include(SearchStats(path="scan", certified=np.array([True, False])))
    both.include(SearchStats(path="scan", certified=np.array([False])))
    assert both.certified.tolist() == [True, False, False] and both.n_certified == 1
    mixed = SearchStats()
    mixed.include(SearchStats(path="cosine", certified=np.ones(2, dtype=bool)))
    mixed.include(SearchStats(path="sql_band"))
    assert mixed.certified.size == 0 and mixed.n_certified == 0
