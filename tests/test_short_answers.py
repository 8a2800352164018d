"""No silent short answers from an IVF: at a small ``nprobe`` an IVF whose probed lists hold fewer
than the ``k`` (or the depth) asked for returns those and pads the rest with ids -1, as FAISS
does. A NormIndex search then still answers ``k`` results wherever ``k`` live documents exist,
exact over the whole collection (numpy brute force over the live documents), for every alpha,
both ``ann`` methods, single queries and batches, and with removed documents (IVF: removed from
the lists; IVF under a refine stage: tombstones, still in the index); ``k`` above the live count
still pads. Such queries are counted in ``SearchStats.filled`` and never certified.
"""

from __future__ import annotations

import faiss
import numpy as np
import pytest
from conftest import assert_same_topk, brute_force
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from normrank import NormIndex
from normrank.errors import InvalidParameterError
from normrank.search.ann import adaptive_search
from normrank.search.id_lookup import IdLookup
from normrank.search.plan import SearchPlan

ALPHAS = [-1.0, -0.5, 0.0, 0.5, 1.0]
D, N, NLIST, K = 16, 400, 64, 10
# Flat rows (and a refine stage's flat copy) score exactly; SQ / PQ codes score their decoded rows.
FACTORIES = ["IVF64,Flat", "IVF64,SQ8", "IVF64,PQ4x4", "IVF64,SQ8,RFlat"]
EXACT_ROWS = {"IVF64,Flat", "IVF64,SQ8,RFlat"}


def _data(n: int, nq: int, seed: int):
    """Gaussian directions (even IVF lists), log-normal norms, and enough training points that
    FAISS's k-means does not warn (39 per list)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, D)) * rng.lognormal(0.0, 0.5, (n, 1))
    train = rng.standard_normal((39 * NLIST + 40, D))
    q = rng.standard_normal((nq, D))
    return x.astype(np.float32), train.astype(np.float32), q.astype(np.float32)


def _index(factory: str, x, train, *, nprobe: int = 1, removed=None, ann: str = "adaptive"):
    index = NormIndex(D, factory=factory, nprobe=nprobe, ann=ann)
    index.train(train)
    index.add(x)
    if removed is not None and removed.size:
        index.remove(removed)
    return index


def _reference(index: NormIndex, x, q, alpha, exact_rows: bool):
    """``(scores (nq, live), live ids)`` by numpy: cos(q, row) * norm**alpha over the live
    documents, rows as given (exact storage) or as the codes decode them (SQ / PQ)."""
    live = np.sort(index.ids)
    if exact_rows:
        return brute_force(x[live], q, alpha)[0], live
    rows = np.stack([index.reconstruct(int(i)) for i in live]).astype(np.float64)
    norms = index.norm_of(live).astype(np.float64)
    unit_q = q / np.linalg.norm(q, axis=1, keepdims=True)
    return (unit_q @ (rows / norms[:, None]).T) * norms[None, :] ** alpha, live


def _check(ref, live, scores, ids, k: int, short: np.ndarray) -> None:
    """Every query: ``min(k, live)`` distinct live documents, each with its reference score,
    best first, then pads. The queries FAISS answered short: the exact top-k (brute force). (The
    others are exact only w.r.t. what the index returns at nprobe 1: not checked here.)"""
    scores, ids = np.atleast_2d(scores), np.atleast_2d(ids)
    m = min(k, live.size)
    assert (ids[:, m:] == -1).all() and np.isneginf(scores[:, m:]).all()
    assert np.isin(ids[:, :m], live).all() and (np.diff(scores[:, :m], axis=1) <= 0).all()
    at = np.searchsorted(live, ids[:, :m])
    mine = np.take_along_axis(ref, at, axis=1)
    np.testing.assert_allclose(scores[:, :m], mine, rtol=1e-4, atol=1e-4)
    assert all(len(set(row.tolist())) == m for row in ids[:, :m])
    if short.any():
        assert_same_topk(ref[short], live, scores[short], ids[short], k, tol=1e-4)


def _short_in_faiss(index: NormIndex, q, k: int) -> np.ndarray:
    """Per query, whether FAISS itself (at the index's nprobe) pads its top-``k``: the premise."""
    unit_q = (q / np.linalg.norm(q, axis=1, keepdims=True)).astype(np.float32)
    return (index.faiss_index.search(unit_q, k)[1] < 0).any(axis=1)


@pytest.mark.parametrize("ann", ["adaptive", "overfetch"])
@pytest.mark.parametrize("alpha", ALPHAS)
@pytest.mark.parametrize("factory", FACTORIES)
def test_a_short_ivf_answer_is_the_exact_top_k_of_the_live_documents(factory, alpha, ann):
    x, train, q = _data(N, 6, seed=7)
    index = _index(factory, x, train, removed=np.arange(0, N, 3), ann=ann)
    short = _short_in_faiss(index, q, K)
    assert short.any()  # the premise: FAISS pads some answers at nprobe 1
    ref, live = _reference(index, x, q, alpha, factory in EXACT_ROWS)

    scores, ids, stats = index.search(q, K, alpha=alpha, return_stats=True)  # a batch
    _check(ref, live, scores, ids, K, short)  # no -1: k results, none removed; short ones exact
    assert stats.filled >= short.sum() and not stats.certified[short].any()
    for i in range(q.shape[0]):  # one float32 query each: the latency path
        s, got, one = index.search(q[i], K, alpha=alpha, return_stats=True)
        _check(ref[i : i + 1], live, s, got, K, short[i : i + 1])
        assert one.filled == 1 or not short[i]


@pytest.mark.parametrize("ann", ["adaptive", "overfetch"])
@pytest.mark.parametrize("alpha", [-1.0, 0.0, 1.0])
def test_k_above_the_live_count_still_pads(ann, alpha):
    x, train, q = _data(60, 3, seed=3)
    index = _index("IVF64,Flat,RFlat", x, train, removed=np.arange(0, 60, 2), ann=ann)  # tombstones
    live, k = np.sort(index.ids), 40
    for batch in (q, q[0]):
        scores, ids = index.search(batch, k, alpha=alpha)
        scores, ids = np.atleast_2d(scores), np.atleast_2d(ids)
        assert (np.sort(ids[:, : live.size], axis=1) == live).all()  # every live document, once
        assert (ids[:, live.size :] == -1).all() and np.isneginf(scores[:, live.size :]).all()
        assert_same_topk(brute_force(x[live], np.atleast_2d(batch), alpha)[0], live, scores, ids, k, tol=1e-4)


@pytest.mark.parametrize("alpha", [-1.0, 0.0, 1.0])
def test_an_answer_that_is_not_short_fills_nothing(alpha):
    x, train, q = _data(N, 6, seed=11)
    index = _index("IVF64,Flat", x, train, nprobe=NLIST)  # every list: nothing short
    assert not _short_in_faiss(index, q, K * index.k_factor).any()
    scores, ids, stats = index.search(q, K, alpha=alpha, return_stats=True)
    assert stats.filled == 0
    assert_same_topk(brute_force(x, q, alpha)[0], np.arange(N), scores, ids, K)


def test_a_short_cosine_answer_without_a_way_to_complete_it_raises():
    """:func:`adaptive_search` called without ``fill_order`` (the searcher always passes one)
    refuses a short answer rather than return it padded."""
    x, train, q = _data(N, 2, seed=5)
    index = _index("IVF64,Flat", x, train)
    assert _short_in_faiss(index, q, K).any()
    unit_q = (q / np.linalg.norm(q, axis=1, keepdims=True)).astype(np.float32)
    plan = SearchPlan(K, K, K, 0, method="cosine")
    with pytest.raises(InvalidParameterError, match="fewer than k"):
        adaptive_search(index.faiss_index, unit_q, plan, weights=None, lookup=IdLookup(index.ids))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n=st.integers(20, 300),
    k=st.integers(1, 40),
    alpha=st.sampled_from([*ALPHAS, -2.0, 0.25, 2.0]),
    ann=st.sampled_from(["adaptive", "overfetch"]),
    factory=st.sampled_from(["IVF64,Flat", "IVF64,Flat,RFlat"]),
    nq=st.sampled_from([1, 4]),
    drop=st.floats(0.0, 0.6),
    seed=st.integers(0, 2**16),
)
def test_any_ivf_answer_is_exact_or_pads_only_past_the_live_count(n, k, alpha, ann, factory, nq, drop, seed):
    x, train, q = _data(n, nq, seed)
    removed = np.flatnonzero(np.random.default_rng(seed).random(n) < drop)
    if removed.size == n:
        removed = removed[1:]
    index = _index(factory, x, train, removed=removed, ann=ann)
    live = np.sort(index.ids)
    scores, ids = index.search(q[0] if nq == 1 else q, k, alpha=alpha)
    assert faiss.extract_index_ivf(index.faiss_index).nprobe == 1
    _check(brute_force(x[live], q, alpha)[0], live, scores, ids, k, _short_in_faiss(index, q, k))


@pytest.mark.parametrize("alpha", [-1.0, 0.5, 1.0])
def test_an_answer_short_of_the_depth_but_not_of_k_scans_by_its_last_cosine(alpha):
    """Probed lists holding at least ``k`` but fewer than the depth asked (FAISS's default
    nprobe 1 at nlist ~ 4 sqrt(n)): not a short answer. The last cosine returned bounds the
    unseen, as a full trusted rank does (a document in an unprobed list is missing at any
    depth), so the scan stops by the bound instead of reading every row; nothing is counted as
    filled, and the answer is at least the exact weighted top-k of what the probed lists hold."""
    rng = np.random.default_rng(11)
    n = 2000
    x = (rng.standard_normal((n, D)) * rng.lognormal(0.0, 0.5, (n, 1))).astype(np.float32)
    q = rng.standard_normal((6, D)).astype(np.float32)
    index = NormIndex(D, factory="IVF32,Flat", nprobe=1)
    index.train(x)
    index.add(x)
    ivf = faiss.extract_index_ivf(index.faiss_index)
    unit_q = q / np.linalg.norm(q, axis=1, keepdims=True)
    _, lists = ivf.quantizer.search(unit_q, 1)
    sizes = np.array([ivf.invlists.list_size(int(lst)) for lst in lists[:, 0]])
    assert (sizes >= K).all() and (sizes < K * 10).all()  # short of the depth (k * k_factor), not of k
    scores, ids, stats = index.search(q, K, alpha=alpha, return_stats=True)
    assert stats.filled == 0 and (ids >= 0).all()
    assert stats.scanned < n // 2  # the bound stopped the scan (a bound of 1.25 read 1,271-1,980 rows)
    truth, _ = brute_force(x, q, alpha)
    for i in range(q.shape[0]):
        np.testing.assert_allclose(scores[i], truth[i, ids[i]], rtol=2e-5, atol=2e-6)
        probed = faiss.rev_swig_ptr(ivf.invlists.get_ids(int(lists[i, 0])), int(sizes[i]))
        best_probed = np.sort(truth[i, np.asarray(probed)])[::-1][:K]
        assert scores[i][-1] >= best_probed[-1] - 1e-5
