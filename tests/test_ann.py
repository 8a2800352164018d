"""ANN search with query-time alpha (normrank.search.ann) against numpy brute force.

Clustered unit directions with log-normal norms: the hard case, where a low-cosine document
with an extreme norm belongs in the norm-weighted top-10.
"""

from __future__ import annotations

import faiss
import numpy as np
import pytest
from conftest import assert_same_topk

from normrank import NormIndex
from normrank.errors import InvalidParameterError
from normrank.search import ann as ann_module
from normrank.search.ann import adaptive_search
from normrank.search.bound import unseen_can_beat, weight_limit
from normrank.search.id_lookup import IdLookup
from normrank.search.plan import ANY_WEIGHTED_ALPHA, SearchOptions, SearchPlan, SearchStats, plan_search
from normrank.search.rows import row_source
from normrank.search.weight_order import WeightOrder, scan_needed

ALPHAS = [-1.5, -0.75, 0.0, 0.5, 1.0]
K = 10


def clustered(n: int, nq: int, d: int = 32, clusters: int = 20, seed: int = 0):
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(clusters, d))
    centers /= np.linalg.norm(centers, axis=1, keepdims=True)
    lab = rng.integers(clusters, size=n)
    u = centers[lab] + 0.35 * rng.normal(size=(n, d)) / np.sqrt(d) * 3
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    x = u * rng.lognormal(0.0, 0.45, size=(n, 1))
    ql = rng.integers(clusters, size=nq)
    q = centers[ql] + 0.5 * rng.normal(size=(nq, d)) / np.sqrt(d) * 3
    return x.astype(np.float32), q.astype(np.float32)


def brute_scores(x: np.ndarray, q: np.ndarray, alpha: float) -> np.ndarray:
    """Every score, float64 numpy."""
    norms = np.linalg.norm(x.astype(np.float64), axis=1)
    qs = q / np.linalg.norm(q, axis=1, keepdims=True)
    return (qs @ (x / norms[:, None]).T) * norms**alpha


def brute(x: np.ndarray, q: np.ndarray, alpha: float, k: int = K) -> np.ndarray:
    return np.argsort(-brute_scores(x, q, alpha), axis=1)[:, :k]


def recall(got: np.ndarray, ref: np.ndarray) -> float:
    return float(np.mean([len(set(g) & set(r)) / len(r) for g, r in zip(got, ref, strict=True)]))


@pytest.fixture(scope="module")
def data():
    return clustered(6000, 60)


@pytest.fixture(scope="module")
def indexes(data):
    x, _ = data
    out = {}
    for factory in ("HNSW32", "IVF32,Flat"):
        idx = NormIndex(x.shape[1], factory=factory)
        if factory.startswith("IVF"):
            idx.train(x)
            faiss.extract_index_ivf(idx.faiss_index).nprobe = 32  # all lists: isolates our method
        else:
            faiss.downcast_index(idx.faiss_index.index).hnsw.efSearch = 64
        idx.add(x)
        out[factory] = idx
    return out


@pytest.mark.parametrize("factory", ["HNSW32", "IVF32,Flat"])
@pytest.mark.parametrize("alpha", ALPHAS)
def test_adaptive_recall(indexes, data, factory, alpha):
    x, q = data
    _, ids = indexes[factory].search(q, K, alpha=alpha)
    assert recall(ids, brute(x, q, alpha)) >= 0.99


@pytest.mark.parametrize("segment", [16, 512])
@pytest.mark.parametrize("alpha", [-1.5, -0.75, 0.5, 1.0, 2.0])
def test_bound_is_exact_when_the_index_is(data, alpha, segment, monkeypatch):
    """IVF probing every list returns the true cosine ranking, so the stopping bound is a proof:
    the result must equal brute force exactly, however deep the winners sit by cosine. In a
    batch each query stops at the end of the segment its bound needs (``ann._SEGMENT`` rows:
    16 makes most queries stop mid-chunk, each in its own BLAS call)."""
    monkeypatch.setattr(ann_module, "_SEGMENT", segment)
    x, q = data
    ref = brute_scores(x, q, alpha)
    # max_depth = K: a shallow cosine cut, so the weight-order scan does most of the work.
    for max_depth in (None, K):
        idx = NormIndex(x.shape[1], factory="IVF16,Flat", max_depth=max_depth)
        idx.train(x)
        faiss.extract_index_ivf(idx.faiss_index).nprobe = 16
        idx.add(x)
        # Exact up to float32 rounding: brute force's ranking, ties (within 1e-5) in any order.
        scores, ids = idx.search(q, K, alpha=alpha)  # a batch grows its scan by doubling
        assert_same_topk(ref, np.arange(x.shape[0]), scores, ids, K)
        singles = [idx.search(q[i], K, alpha=alpha) for i in range(q.shape[0])]  # each to its bound
        assert_same_topk(ref, np.arange(x.shape[0]), *(np.vstack(v) for v in zip(*singles, strict=True)), K)


def test_weight_order_scan_runs_to_the_end_when_needed():
    """With a cosine depth of k the bound can only hold late: a batch's rounds grow the
    weight-order scan (x ``ann._GROWTH`` = 2, capped at what its deepest open query needs) and
    the answer is still exact; rows are read from FAISS's storage, none copied to keep."""
    x, q = clustered(3000, 8, seed=5)
    idx = NormIndex(x.shape[1], factory="IVF8,Flat", max_depth=K, n_tail=16)
    idx.train(x)
    faiss.extract_index_ivf(idx.faiss_index).nprobe = 8
    idx.add(x)
    stats = SearchStats()
    unit_q = q / np.linalg.norm(q, axis=1, keepdims=True)
    ascending = np.argsort(idx.norms, kind="stable").astype(np.int32)
    order = WeightOrder(ascending, 1, row_source(idx.faiss_index, idx._inner, idx.ids, 0))
    w = idx._weight_for(1.0)
    scores, pos = adaptive_search(
        idx.faiss_index, unit_q.astype(np.float32), SearchPlan(K, K, K, 16), weights=w,
        lookup=IdLookup(idx.ids), order=order, stats=stats,
    )  # fmt: skip
    assert_same_topk(brute_scores(x, q, 1.0), idx.ids, scores, idx.ids[pos], K)
    assert stats.rounds > 1 and stats.scanned > 16
    assert order.vectors(1).shape == (1, x.shape[1]) and order.nbytes < 3000 * 4


@pytest.mark.parametrize("alpha", [-1.5, 1.0])
def test_fixed_overfetch_is_worse_on_the_hard_case(data, alpha):
    """The reason the adaptive method exists: a fixed k_factor misses norm-lifted documents."""
    x, q = data
    idx = NormIndex(x.shape[1], factory="IVF32,Flat", ann="overfetch", k_factor=2)
    idx.train(x)
    faiss.extract_index_ivf(idx.faiss_index).nprobe = 32
    idx.add(x)
    _, ids = idx.search(q, K, alpha=alpha)
    assert recall(ids, brute(x, q, alpha)) < 0.9


def test_per_query_alpha_and_scores(indexes, data):
    x, q = data
    alphas = np.linspace(-1.5, 1.0, q.shape[0])
    s, ids = indexes["IVF32,Flat"].search(q, K, alpha=alphas)
    norms = np.linalg.norm(x.astype(np.float64), axis=1)
    qs = q / np.linalg.norm(q, axis=1, keepdims=True)
    for i in range(q.shape[0]):
        ref = (x[ids[i]] / norms[ids[i], None]) @ qs[i] * norms[ids[i]] ** alphas[i]
        np.testing.assert_allclose(s[i], ref, rtol=1e-4, atol=1e-5)
        assert recall(ids[i : i + 1], brute(x, q[i : i + 1], alphas[i])) >= 0.9


def test_remove_and_custom_ids(data):
    x, q = data
    x, q = x[:2000], q[:20]
    ids = np.arange(2000, dtype=np.int64) * 1_000_003  # sparse ids: binary-search lookup
    idx = NormIndex(x.shape[1], factory="HNSW32")
    faiss.downcast_index(idx.faiss_index.index).hnsw.efSearch = 64
    idx.add(x, ids)
    gone = ids[::7]
    idx.remove(gone)  # HNSW: tombstones
    keep = ~np.isin(ids, gone)
    _, got = idx.search(q, K, alpha=-1.5)
    assert not np.isin(got, gone).any()
    ref = ids[keep][brute(x[keep], q, -1.5)]
    assert recall(got, ref) >= 0.99
    # Cosine too: removed documents never show, the k places are refilled, best first.
    s, got = idx.search(q, K, alpha=0.0)
    assert not np.isin(got, gone).any() and (got >= 0).all()
    assert np.all(np.diff(s, axis=1) <= 0)
    assert recall(got, ids[keep][brute(x[keep], q, 0.0)]) >= 0.99


def test_scan_needed_is_where_the_bound_first_holds():
    """The binary search stops where walking the weight order would: the one bound
    (:func:`normrank.search.bound.unseen_can_beat`) says no at ``need`` and yes just before it,
    k-th scores placed exactly on the bare bound ``c * w`` and on the margin's limit included
    (there the search divides where the bound multiplies: compared a float64 ulp or two off)."""
    rng = np.random.default_rng(3)
    dim = 384
    w = np.sort(rng.lognormal(0, 0.6, 300).astype(np.float32))[::-1]
    w[100:110] = w[100]  # equal weights
    kth = rng.normal(0, 1.5, 400)
    trusted_cosine = np.concatenate([rng.uniform(-1, 1, 396), [0.0, 1.0, -1e-5, -1e-3]])
    at = rng.integers(0, 300, 100)
    kth[:50] = trusted_cosine[:50] * w[at[:50]]  # kth exactly on the bare bound
    kth[50:100] = w[at[50:]] / weight_limit(1.0, trusted_cosine[50:100], dim)  # on the margin's limit
    need = scan_needed(kth, trusted_cosine, -w.astype(np.float64), dim)

    def beats(i: int, t: int, nudge: float) -> bool:
        k_th = kth[i] + nudge * abs(kth[i])
        return bool(unseen_can_beat(k_th, trusted_cosine[i], float(w[t]), float(w.min()), dim))

    for i in range(kth.size):
        if need[i] < w.size:
            assert not beats(i, need[i], 1e-14), i
        if need[i] > 0:
            assert beats(i, need[i] - 1, -1e-14), i
    assert (need == 0).any() and (need == w.size).any() and ((need > 0) & (need < w.size)).any()


def test_id_lookup_dense_and_sparse():
    for ids in (np.array([5, 0, 3]), np.array([10**12, 7, 10**9])):
        lk = IdLookup(ids)
        np.testing.assert_array_equal(lk(np.array([[ids[2], -1, 424242, ids[0]]])), [[2, -1, -1, 0]])


def test_id_lookup_against_a_dict():
    """Every id, absent ones (below, between, above the stored ones, FAISS's -1 pads, other
    negatives) included, maps as a plain dict lookup would, for dense and sparse id sets."""
    rng = np.random.default_rng(9)
    for ids in (
        np.array([], dtype=np.int64),
        rng.permutation(3000)[:2000],
        rng.choice(10**15, 50, replace=False),
    ):
        lk = IdLookup(ids)
        where = {int(i): p for p, i in enumerate(ids)}
        probe = np.r_[ids, -1, -2, -(2**62), 0, 1, 2999, 3000, 3001, ids.max(initial=0) + 1, 2**62]
        probe = np.r_[probe, rng.integers(-5, 4000, 500)].astype(np.int64)
        want = np.array([where.get(int(c), -1) for c in probe])
        np.testing.assert_array_equal(lk(probe), want)
        np.testing.assert_array_equal(lk(probe.reshape(-1, 1)), want.reshape(-1, 1))


def test_bad_ann_option():
    with pytest.raises(InvalidParameterError):
        NormIndex(8, factory="HNSW32", ann="magic")


@pytest.mark.parametrize("ef", [4, 16, 64, 100, 512])
@pytest.mark.parametrize("k", [1, 10, 40])
def test_hnsw_depth_never_widens_the_beam(ef, k):
    """The cosine fetch stays inside the efSearch beam (at least k): a deeper fetch would make
    FAISS widen the beam, the costliest thing a query could add."""
    plan = plan_search(SearchOptions(k, ANY_WEIGHTED_ALPHA, 10, breadth={"efSearch": ef}), 10**6)
    assert k <= plan.depth <= max(ef, k)
    assert plan.depth == (min(max(10 * k, ef // 8), max(ef, k)))
    assert plan.trust == min(plan.depth, max(2 * k, ef // 8))


@pytest.mark.parametrize("nprobe", [1, 8, 64])
def test_ivf_trusts_all_it_fetches(nprobe):
    params = {"nprobe": nprobe, "nlist": 64}
    for n in (1_000, 100_000, 10_000_000):
        plan = plan_search(SearchOptions(10, ANY_WEIGHTED_ALPHA, 10, breadth=params), n)
        assert plan.depth == min(n, max(100, n * nprobe // 64 // 256))
        assert plan.trust == plan.depth


def test_small_ef_search_is_exact_without_widening(data, monkeypatch):
    """efSearch 16 on an index where the beam finds the true cosine neighbours: every FAISS call
    of a norm-weighted search asks for at most 16 results with no wider beam, and the top-10
    equals numpy's at every alpha."""
    x, q = data
    ni = NormIndex(x.shape[1], factory="HNSW32")
    ni.add(x)
    faiss.downcast_index(ni._inner).hnsw.efSearch = 16
    asked = []
    real = ann_module._search

    def spy(index, qs, depth, ef=None):
        asked.append(depth)
        return real(index, qs, depth, ef)

    monkeypatch.setattr(ann_module, "_search", spy)
    for alpha in ALPHAS:
        got = np.concatenate([ni.search(q[i : i + 1], K, alpha=alpha)[1] for i in range(5)])
        ref = brute(x, q[:5], alpha)
        # the beam of 16 may miss a cosine neighbour; the weight-order scan is still exact
        # relative to what the index returned, so compare against numpy with a small margin
        assert recall(got, ref) >= 0.9, alpha
    assert asked and max(asked) <= 16


def test_single_query_scan_stops_where_its_raised_bound_holds():
    """A single query's scan re-reads its bound after every block: once the k-th score it has
    found makes the bound hold, it stops there, not at the depth its first k-th score needed
    (30k documents, a shallow cosine depth: ~13k rows a query before, one block now), and the
    answer stays exact."""
    rng = np.random.default_rng(3)
    n, d = 30_000, 16
    x = rng.standard_normal((n, d)).astype(np.float32) * rng.lognormal(0, 0.5, (n, 1)).astype(np.float32)
    idx = NormIndex(d, factory="HNSW16", max_depth=K, n_tail=16)
    idx.add(x)
    faiss.downcast_index(idx._inner).hnsw.efSearch = 256
    q = rng.standard_normal((20, d)).astype(np.float32)
    ref = brute_scores(x, q, 1.0)
    for j, qq in enumerate(q):
        s, ids, stats = idx.search(qq, K, alpha=1.0, return_stats=True)
        assert_same_topk(ref[j : j + 1], idx.ids, s.reshape(1, -1), ids.reshape(1, -1), K)
        assert stats.path == "scan" and stats.scanned <= 16 + 2 * ann_module._ONE_BLOCK


def test_batch_heaps_keep_the_k_best_of_everything_offered_once_each():
    """The batch scan's heaps (offered only the scores above their k-th) against numpy: each
    query's top-k over its candidates and every document of the blocks it was in, a candidate
    met again counted once, blocks over a subset of the queries, NaN never kept."""
    from normrank.search.batch_heaps import BatchHeaps

    rng = np.random.default_rng(5)
    n = 60
    for trial in range(60):
        nq, k, depth = int(rng.integers(1, 9)), int(rng.integers(1, 6)), int(rng.integers(1, 12))
        cand_pos = np.stack([rng.permutation(n)[:depth] for _ in range(nq)])
        cand_pos[rng.random(cand_pos.shape) < 0.1] = -1  # pads
        w = rng.lognormal(0, 0.5, n).astype(np.float32)
        cos = rng.uniform(-1, 1, (nq, n)).astype(np.float32)
        exact = cos * w  # float32, as the heaps compute it
        nan_doc = int(rng.integers(n)) if trial % 3 == 0 else -1
        offered = [{int(p) for p in cand_pos[i] if p >= 0} for i in range(nq)]
        cand_s = np.where(cand_pos >= 0, np.take_along_axis(exact, np.maximum(cand_pos, 0), 1), -np.inf)
        top = np.argsort(-cand_s, axis=1)[:, :k]
        top_s = np.full((nq, k), -np.inf, dtype=np.float32)
        top_p = np.full((nq, k), -1, dtype=np.int64)
        top_s[:, : top.shape[1]] = np.take_along_axis(cand_s, top, 1)
        top_p[:, : top.shape[1]] = np.where(
            np.isfinite(top_s[:, : top.shape[1]]), np.take_along_axis(cand_pos, top, 1), -1
        )
        heaps = BatchHeaps(top_s, top_p, cand_pos)
        for lo in range(0, n, 16):  # every candidate is met again in its block
            rows = np.sort(rng.choice(nq, int(rng.integers(1, nq + 1)), replace=False))
            docs = np.arange(lo, min(n, lo + 16))
            block = cos[rows][:, docs]
            block[:, docs == nan_doc] = np.nan
            heaps.add(rows, block, w[docs], docs)
            for i in rows:
                offered[i].update(int(j) for j in docs if j != nan_doc)
        got_s, got_p = heaps.result()
        for i in range(nq):
            want = sorted(offered[i], key=lambda j: -exact[i, j])[:k]
            assert got_p[i][: len(want)].tolist() == want
            np.testing.assert_array_equal(got_s[i][: len(want)], exact[i, want])
            assert (got_p[i][len(want) :] == -1).all() and np.isneginf(got_s[i][len(want) :]).all()
