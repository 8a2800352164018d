"""The weights cache under alternating alphas: searches that switch alpha call by call over an
index whose weights budget holds one ``w**alpha`` array keep that array, read the others lazily
(:class:`normrank.search.cache.LazyPower`: no pass over the n documents a call), and return the
same results, bit for bit, as an index whose budget holds every alpha (and numpy's brute force
where the beam is wide enough to be exact). Before, each call dropped the array the next one
needed and recomputed n powers (1M documents: 2-11 ms a call, up to 8x a single query)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_same_topk, brute_force, clustered

from normrank import NormIndex, settings
from normrank.scoring import norm_weight
from normrank.search import cache as cache_mod
from normrank.search.cache import _RECENT_CALLS, CacheBudget, LazyPower, SearchCache
from normrank.search.faiss_info import index_bytes

D, N = 24, 3000
ALPHAS = (-1.5, -1.0, -0.5, 0.5, 1.0, 2.0)


def test_lazy_power_reads_as_the_array_does():
    """Every read the search makes (positions 1-D and 2-D, one position, slices, ``take``, the
    extremes) gives the whole array's bits, saturation included."""
    rng = np.random.default_rng(3)
    base = np.concatenate([rng.lognormal(0.8, 0.6, 997), [1e-30, 1e30, 1.0]]).astype(np.float32)
    pos = rng.integers(0, base.size, 50)
    for alpha in (-16.0, -1.0, -0.25, 0.5, 1.0, 3.0):
        want, lazy = norm_weight(base, alpha), LazyPower(base, alpha)
        assert lazy.size == len(lazy) == base.size and lazy.shape == base.shape and lazy.nbytes == 0
        np.testing.assert_array_equal(lazy[pos], want[pos])
        np.testing.assert_array_equal(lazy[pos.reshape(5, 10)], want[pos.reshape(5, 10)])
        np.testing.assert_array_equal(lazy.take(pos), want.take(pos))
        np.testing.assert_array_equal(lazy[10:400], want[10:400])
        for i in (0, int(pos[0]), np.int64(base.size - 1)):
            assert lazy[i] == want[i] and lazy[i].dtype == np.float32
        assert lazy.min() == want.min() and lazy.max() == want.max()


def _one_array_cache(n: int) -> SearchCache:
    return SearchCache(lambda: CacheBudget(weights=4 * n + 100, prefix=0, codes=0))


def test_alternating_alphas_keep_the_first_array_and_read_the_others_lazily():
    base = np.random.default_rng(4).lognormal(0.8, 0.4, N).astype(np.float32)
    cache = _one_array_cache(N)
    first = cache.ann_weights(base, -1.0)
    assert isinstance(first, np.ndarray)
    lazies = {}
    for call in range(200):  # three alphas in turn: no call drops the array the next one needs
        alpha = (-1.0, 0.5, 1.0)[call % 3]
        w = cache.ann_weights(base, alpha)
        if alpha == -1.0:
            assert w is first
        else:
            assert isinstance(w, LazyPower) and lazies.setdefault(alpha, w) is w  # one per alpha
        assert list(cache.powers) == [-1.0]
    # A batch's flat product needs a whole array: computed for the call, not kept.
    w = cache.power(base, 2.0)
    np.testing.assert_array_equal(w, norm_weight(base, 2.0))
    assert list(cache.powers) == [-1.0]
    # A user who moves to another alpha for good gets it kept once the old one is stale.
    for _ in range(_RECENT_CALLS + 1):
        w = cache.ann_weights(base, 0.5)
    assert isinstance(w, np.ndarray) and list(cache.powers) == [0.5]
    np.testing.assert_array_equal(w, norm_weight(base, 0.5))
    assert sum(p.nbytes for p in cache.powers.values()) <= cache.budget.weights
    # A sweep over many alphas: what is remembered of them stays bounded.
    for a in np.linspace(-2, 2, 1001):
        cache.ann_weights(base, float(a))
    assert len(cache.used) <= 4 * settings.WEIGHT_CACHE_ENTRIES + _RECENT_CALLS + 1
    assert len(cache.lazies) <= settings.WEIGHT_CACHE_ENTRIES


def test_an_array_larger_than_the_budget_is_never_kept():
    base = np.random.default_rng(5).lognormal(0.8, 0.4, N).astype(np.float32)
    cache = SearchCache(lambda: CacheBudget(weights=4 * N - 1, prefix=0, codes=0))
    for _ in range(2 * _RECENT_CALLS):
        assert isinstance(cache.ann_weights(base, -1.0), LazyPower)
        np.testing.assert_array_equal(cache.power(base, 0.5), norm_weight(base, 0.5))
    assert not cache.powers and cache.nbytes == 0


def test_a_budget_that_holds_every_alpha_keeps_every_alpha():
    base = np.random.default_rng(5).lognormal(0.8, 0.4, N).astype(np.float32)
    cache = SearchCache(lambda: CacheBudget(weights=4 * N * len(ALPHAS), prefix=0, codes=0))
    for _ in range(3):
        for alpha in ALPHAS:
            assert isinstance(cache.ann_weights(base, alpha), np.ndarray)
    assert sorted(cache.powers) == sorted(ALPHAS)


def _index(kind: str, x: np.ndarray) -> NormIndex:
    idx = NormIndex(D, factory=kind)
    if not idx.is_trained:
        idx.train(x)
    idx.add(x)
    idx.set_search_params(**({"nprobe": 16} if "IVF" in kind else {"ef_search": N}))  # exact beams
    return idx


@pytest.mark.parametrize("arrays", [1, 0])
@pytest.mark.parametrize("kind", ["HNSW16", "IVF16,Flat", "HNSW16,SQ8"])
def test_alternating_alphas_give_the_results_of_a_roomy_cache(kind, arrays, monkeypatch):
    """Single queries and batches at alphas in a random order, on an index whose weights budget
    holds ``arrays`` whole arrays against the same index with every cache at its cap: the same
    ids and scores bit for bit, numpy's top-k on the float rows; and after the first rounds a
    single query computes a whole array of n powers only where it is then kept."""
    rng = np.random.default_rng(6)
    x, q = clustered(N, D, rng), clustered(12, D, rng)
    base = _index(kind, x)
    monkeypatch.setattr(settings, "CACHE_FRACTION", float("inf"))
    roomy = NormIndex.from_state(base.to_state())
    # weights: an eighth of the budget (CACHE_SPLIT), room for ``arrays`` arrays of N float32
    monkeypatch.setattr(settings, "CACHE_FRACTION", 8 * (arrays * 4 * N + 64) / index_bytes(base.faiss_index))
    monkeypatch.setattr(settings, "FLOAT_ROWS_MIN_CACHE_BYTES", 0)
    tight = NormIndex.from_state(base.to_state())
    for idx in (roomy, tight):
        idx.set_search_params(**({"nprobe": 16} if "IVF" in kind else {"ef_search": N}))
    whole, during = [], []  # which kind of call computed a whole array of n powers
    real = cache_mod.norm_weight
    monkeypatch.setattr(
        cache_mod,
        "norm_weight",
        lambda b, a: (whole.extend(during) if np.size(b) == N else None) or real(b, a),
    )
    warm = 4 * len(ALPHAS)
    calls = [
        (float(a), int(i))
        for a, i in zip(rng.choice(ALPHAS, 120), rng.integers(-1, q.shape[0], 120), strict=True)
    ]
    for round_, (alpha, i) in enumerate(calls):
        qs = q if i < 0 else q[i : i + 1]  # -1: the batch
        s0, i0 = roomy.search(qs, 10, alpha=alpha)
        during[:] = ["batch" if i < 0 else "single"] if round_ >= warm else []
        kept, n_whole = list(tight._cache.powers), len(whole)
        s1, i1 = tight.search(qs, 10, alpha=alpha)
        during.clear()
        if i >= 0 and len(whole) > n_whole:  # only where the array is then kept (alpha switched)
            assert whole[n_whole:] == ["single"] and list(tight._cache.powers) == [alpha] != kept
        np.testing.assert_array_equal(i0, i1)
        np.testing.assert_array_equal(s0, s1)
        if "SQ8" not in kind:
            assert_same_topk(*brute_force(x, qs, alpha), s1, i1, 10, tol=2e-5)
    assert len(tight._cache.powers) == arrays
    # Single queries read their weights lazily but where they take over the kept array (its alpha
    # unread for _RECENT_CALLS calls); a batch that takes the flat product computes its whole
    # array for the call (amortized over its queries).
    assert whole.count("single") <= sum(i >= 0 for _, i in calls[warm:]) // _RECENT_CALLS + 1
