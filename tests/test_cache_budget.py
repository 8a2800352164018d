"""Search caches sized to the index they serve (issue 48, deliverable 5): FAISS's own bytes read
cheaply (checked against ``faiss.serialize_index``), the default budget a fraction of them within
the absolute caps, reported in ``SearchStats``, held to by the caches, and results that do not
depend on it (numpy brute force for the exact kinds; the same results whatever the budget for
the ANN kinds, whose scan reads the same rows either way)."""

from __future__ import annotations

import faiss
import numpy as np
import pytest
from conftest import assert_same_topk, brute_force, clustered

from normrank import NormIndex, settings
from normrank.errors import InvalidParameterError
from normrank.search.cache import CacheBudget, cache_budget
from normrank.search.faiss_info import index_bytes
from normrank.search.scan_codes import CHUNK, BytePool, ScanCodes
from normrank.search.weight_order import WeightOrder

D = 32
ALPHAS = (-1.0, -0.5, 0.5, 1.0, 2.0)
KINDS = ("Flat", "IVF16,Flat", "HNSW16", "IVF16,PQ8", "HNSW16,SQ8", "IVF16,SQ8", "Flat,RFlat")


def _filled(kind: str, x: np.ndarray) -> NormIndex:
    idx = NormIndex(D, factory=kind)
    if not idx.is_trained:
        idx.train(x)
    idx.add(x)
    return idx


@pytest.mark.parametrize("kind", KINDS)
def test_index_bytes_near_serialized_size(kind):
    """Within 1% of the serialized length (what it leaves out: headers, an IVF list's size
    words), for the plain FAISS index and the one NormIndex wraps (an id map: 8 bytes a row)."""
    rng = np.random.default_rng(48)
    x = clustered(6000, D, rng)
    plain = faiss.index_factory(D, kind, faiss.METRIC_INNER_PRODUCT)
    plain.train(x)
    plain.add(x)
    for index in (plain, _filled(kind, x).faiss_index):
        serialized = len(faiss.serialize_index(index))
        assert abs(index_bytes(index) - serialized) <= 0.01 * serialized, (
            kind,
            index_bytes(index),
            serialized,
        )


def test_budget_is_a_fraction_of_the_index_within_the_caps(monkeypatch):
    """CACHE_FRACTION of the index's bytes split by CACHE_SPLIT (an eighth / a quarter / five
    eighths), each part within its cap; all to the weights where nothing is scanned; math.inf:
    the caps; bad fractions and splits refused."""
    monkeypatch.setattr(settings, "CACHE_FRACTION", 0.05)
    b = cache_budget(8_000_000)
    assert b == CacheBudget(50_000, 100_000, 250_000) and b.total == 400_000
    monkeypatch.setattr(settings, "CACHE_SPLIT", (0.25, 0.25, 0.5))
    assert cache_budget(8_000_000) == CacheBudget(100_000, 100_000, 200_000)
    for bad in ((0.5, 0.5, 0.5), (0.5, -0.1, 0.1), (0.5, 0.5)):
        monkeypatch.setattr(settings, "CACHE_SPLIT", bad)
        with pytest.raises(InvalidParameterError):
            cache_budget(1000)
    monkeypatch.setattr(settings, "CACHE_SPLIT", (0.125, 0.25, 0.625))
    assert cache_budget(8_000_000, scans=False) == CacheBudget(400_000, 0, 0)
    caps = CacheBudget(settings.SEARCH_CACHE_BYTES, settings.SCAN_PREFIX_BYTES, settings.SCAN_CODES_BYTES)
    assert cache_budget(10**13) == caps == cache_budget(None)
    monkeypatch.setattr(settings, "CACHE_FRACTION", float("inf"))
    assert cache_budget(1000) == caps
    monkeypatch.setattr(settings, "CACHE_FRACTION", 0)
    assert cache_budget(10**9).total == 0
    for bad in (-0.1, float("nan"), "0.1", True):
        monkeypatch.setattr(settings, "CACHE_FRACTION", bad)
        with pytest.raises(InvalidParameterError):
            cache_budget(1000)


FLOAT_ROWS = ("HNSW16", "IVF16,Flat")  # FAISS keeps float32 rows: the budget's floor applies


@pytest.mark.parametrize("kind", ["Flat", "HNSW16", "IVF16,Flat", "IVF16,PQ8", "HNSW16,SQ8"])
def test_the_floor_applies_to_float_rows_only(kind, monkeypatch):
    """A small index of float32 rows gets FLOAT_ROWS_MIN_CACHE_BYTES (its scan's fast path);
    flat storage (no scan) and SQ / PQ codes get the fraction of FAISS's bytes alone."""
    rng = np.random.default_rng(7)
    idx = _filled(kind, clustered(3000, D, rng))
    got = idx.search(clustered(2, D, rng), 10, alpha=0.5, return_stats=True)[2].cache_budget_bytes
    share = settings.CACHE_FRACTION * index_bytes(idx.faiss_index)
    assert share < settings.FLOAT_ROWS_MIN_CACHE_BYTES  # small: the floor decides where it applies
    if kind in FLOAT_ROWS:
        assert got == settings.FLOAT_ROWS_MIN_CACHE_BYTES
    else:
        assert got <= share
    monkeypatch.setattr(settings, "FLOAT_ROWS_MIN_CACHE_BYTES", 0)
    idx.add(clustered(1, D, rng))  # a new state: its budget is read again
    again = idx.search(clustered(2, D, rng), 10, alpha=0.5, return_stats=True)[2].cache_budget_bytes
    assert again <= settings.CACHE_FRACTION * index_bytes(idx.faiss_index)


@pytest.mark.parametrize("kind", ["Flat", "HNSW16", "IVF16,Flat", "IVF16,PQ8", "HNSW16,SQ8"])
def test_caches_stay_within_the_reported_budget(kind):
    """After batches and single queries at several alphas: ``cache_budget_bytes`` is the
    default budget of the index's own bytes, and the bounded parts (weights, prefix copy, codes)
    hold at most it."""
    rng = np.random.default_rng(5)
    x = clustered(6000, D, rng)
    q = clustered(8, D, rng)
    idx = _filled(kind, x)
    n = idx.ntotal
    for alpha in ALPHAS:
        stats = idx.search(q, 10, alpha=alpha, return_stats=True)[2]
        one = idx.search(q[0], 10, alpha=alpha, return_stats=True)[2]
        cache = idx._cache
        floor = settings.FLOAT_ROWS_MIN_CACHE_BYTES if kind in FLOAT_ROWS else 0
        want = cache_budget(index_bytes(idx.faiss_index), scans=kind != "Flat", floor=floor)
        assert stats.cache_budget_bytes == one.cache_budget_bytes == want.total
        assert want.total <= max(settings.CACHE_FRACTION * index_bytes(idx.faiss_index), floor)
        weights = sum(p.nbytes for p in cache.powers.values())
        assert weights <= want.weights and bool(cache.powers) == (4 * n <= want.weights)
        prefix = sum(o._prefix.nbytes for o in cache.orders.values() if o._prefix is not None)
        codes = sum(o._scan_codes.rows * D for o in cache.orders.values() if o._scan_codes is not None)
        assert prefix <= want.prefix and codes <= want.codes
        assert one.cache_bytes == cache.nbytes


@pytest.mark.parametrize("kind", ["Flat", "HNSW16", "IVF16,SQ8"])
def test_results_do_not_depend_on_the_budget(kind, monkeypatch):
    """The same ids and scores, bit for bit, with the caches off (fraction 0), at the default
    fraction and at the absolute caps; and Flat's equal numpy brute force."""
    rng = np.random.default_rng(6)
    x = clustered(5000, D, rng)
    q = clustered(6, D, rng)
    base = _filled(kind, x)
    got = {}
    for fraction in (0.0, 0.05, float("inf")):
        monkeypatch.setattr(settings, "CACHE_FRACTION", fraction)
        idx = NormIndex.from_state(base.to_state())  # a new state: a budget of its own
        got[fraction] = [idx.search(q, 10, alpha=a) for a in ALPHAS] + [
            idx.search(q[0], 10, alpha=a) for a in ALPHAS
        ]
    for fraction in (0.05, float("inf")):
        for (s0, i0), (s1, i1) in zip(got[0.0], got[fraction], strict=True):
            np.testing.assert_array_equal(i0, i1)
            np.testing.assert_array_equal(s0, s1)
    if kind == "Flat":  # exact (the ANN kinds: exact w.r.t. the trusted depth, the same whatever the budget)
        for alpha, (s, i) in zip(ALPHAS, got[0.05][: len(ALPHAS)], strict=True):
            assert_same_topk(*brute_force(x, q, alpha), s, i, 10, tol=2e-5)


class _Rows:
    """Float32 rows by position (what a weight order reads through a row source)."""

    def __init__(self, x: np.ndarray) -> None:
        self.x = x

    def gather(self, pos: np.ndarray) -> np.ndarray:
        return self.x[pos]


def test_a_byte_pool_bounds_the_orders_that_share_it():
    """Weight orders drawing from one :class:`BytePool` (prefix copy, scan codes) never hold more
    than it, first come first served: the first takes what it reads, the second what is left;
    the rows kept are the rows in each order. (The search cache gives each sign its own share:
    shared, alpha < 0 starved alpha > 0.)"""
    rng = np.random.default_rng(7)
    x = rng.normal(size=(8000, D)).astype(np.float32)
    ascending = np.argsort(rng.random(8000)).astype(np.int32)
    prefix, codes = BytePool(200 * D * 4), BytePool(3 * CHUNK * D)
    up = WeightOrder(ascending, 1, _Rows(x), prefix, codes)
    down = WeightOrder(ascending, -1, _Rows(x), prefix, codes)
    assert up._cached(8000) == 200 and prefix.left == 0  # all of the prefix pool: one sign
    np.testing.assert_array_equal(up._prefix, x[ascending[::-1][:200]])
    assert down._cached(8000) == 0  # nothing left for the other sign: it reads rows in place
    up._scan_codes = ScanCodes(D, 8000, codes)
    assert up._scan_codes.grow(2 * CHUNK, up._rows_for_codes) == 2 * CHUNK
    down._scan_codes = ScanCodes(D, 8000, codes)
    assert down._scan_codes.grow(8000, down._rows_for_codes) == CHUNK  # what is left, whole chunks
    assert up._scan_codes.grow(8000, up._rows_for_codes) == 2 * CHUNK and codes.left == 0
    assert BytePool(10).take(25) == 10 and BytePool(-3).take(1) == 0


@pytest.mark.parametrize(
    ("spread", "want_up"),
    [
        (lambda z: np.exp(0.6 * np.maximum(z, 0)), 0.75),  # only an upper tail: the most either sign gets
        (lambda z: np.exp(0.6 * np.minimum(z, 0)), 0.25),  # only a lower tail: the least
        (lambda z: np.exp(0.3 * z), 0.5),  # log-symmetric: half each
        (lambda z: np.full_like(z, 2.0), 0.5),  # equal norms (float32 rounding aside): half each
        (lambda z: np.exp(np.where(z > 0, 0.4, 0.2) * z), None),  # both, longer above: by the logs
    ],
)
def test_each_sign_scans_within_its_share_of_the_budget(spread, want_up):
    """The scan budget (prefix copy, codes) is split between the signs of alpha by their norm
    tails: ``log(p95 / p50)`` against ``log(p50 / p5)`` (numpy's percentiles here), within
    [0.25, 0.75]; the two shares sum to the budget and each order's pools hold its share."""
    rng = np.random.default_rng(8)
    z = rng.standard_normal(4000)
    unit = rng.normal(size=(4000, D)).astype(np.float32)
    unit /= np.linalg.norm(unit, axis=1, keepdims=True)
    norms = spread(z)
    idx = _filled("HNSW16", unit * norms[:, None].astype(np.float32))
    q = rng.normal(size=(1, D)).astype(np.float32)
    for alpha in (1.0, -1.0):
        idx.search(q, 10, alpha=alpha)
    cache = idx._cache
    p5, p50, p95 = np.percentile(idx.norm_of(np.arange(4000)), [5, 50, 95])
    up, down = np.log(p95 / p50), np.log(p50 / p5)
    expect = want_up if want_up is not None else min(max(up / (up + down), 0.25), 0.75)
    assert cache.sign_share(norms, 1) == pytest.approx(expect, abs=0.01)
    assert cache.sign_share(norms, 1) + cache.sign_share(norms, -1) == pytest.approx(1.0)
    budget = cache.budget
    for sign, order in cache.orders.items():
        share = cache.sign_share(norms, sign)
        assert order._prefix_pool.total == int(budget.prefix * share)
        assert order._codes_pool.total == int(budget.codes * share)
    assert sum(o._prefix_pool.total for o in cache.orders.values()) <= budget.prefix
    assert sum(o._codes_pool.total for o in cache.orders.values()) <= budget.codes
