"""The single-query scan's int8 codes (normrank.search.scan_codes): their bound never drops a row
whose exact score passes the threshold, and searches with codes return bit for bit what searches
reading every row return."""

from __future__ import annotations

import threading

import faiss
import numpy as np
import pytest
from conftest import clustered
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from normrank import NormIndex
from normrank import settings as nr_settings
from normrank.search import ann, scan_codes
from normrank.search.scan_codes import CHUNK, CONTENDERS, QueryCodes, ScanCodes


def _exact(q: np.ndarray, x: np.ndarray) -> np.ndarray:
    """The scan's exact scores: FAISS's row kernel, float32."""
    out = np.empty(x.shape[0], dtype=np.float32)
    x = np.ascontiguousarray(x, dtype=np.float32)
    faiss.fvec_inner_products_ny(
        faiss.swig_ptr(out), faiss.swig_ptr(q), faiss.swig_ptr(x), q.size, x.shape[0]
    )
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    d=st.sampled_from([3, 8, 37, 96, 384, 1536]),  # 1536: integer products past 2**24
    n=st.integers(1, 3 * CHUNK),
    spread=st.floats(0.01, 30.0),
    seed=st.integers(0, 2**31 - 1),
    quantile=st.floats(0.0, 1.0),
)
def test_contenders_hold_every_row_that_passes(d, n, spread, seed, quantile):
    """Rows of any scale (unit vectors, PQ-like reconstructions, a few huge coordinates), a
    threshold anywhere in the scores: every row whose float32 score exceeds it is a contender."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d)) * rng.lognormal(0, 0.3, (n, 1))
    x[rng.random((n, d)) < 0.01] *= spread  # a few outlying coordinates widen a chunk's scale
    x = x.astype(np.float32)
    q = rng.standard_normal(d).astype(np.float32)
    q /= np.linalg.norm(q)
    exact = _exact(q, x)
    need = float(np.quantile(exact, quantile))
    codes = ScanCodes(d, n, budget=4 * CHUNK * d)
    assert codes.grow(n, lambda lo, hi: x[lo:hi]) == min(n, codes.cap)
    query = QueryCodes(q)
    for lo in range(0, codes.rows, CHUNK):
        hi = min(codes.rows, lo + CHUNK)
        got = codes.contenders(query, lo, hi, need)
        passing = lo + np.flatnonzero(exact[lo:hi] > need)
        if got is None:  # more than the heap holds: the caller reads the chunk
            assert passing.size > 0 or hi - lo > CONTENDERS
            continue
        assert set(passing) <= set(got.tolist())
        assert np.all(np.diff(got) > 0) and (got.size == 0 or (got[0] >= lo and got[-1] < hi))
    query.close()


def test_rows_just_past_the_threshold_are_contenders():
    """Adversarial: 20 scores packed within 1e-6 of the threshold on both sides (the rest far
    below): the chunk's heap holds them all, and every one that passes is among them."""
    rng = np.random.default_rng(3)
    d = 384
    q = rng.standard_normal(d).astype(np.float32)
    q /= np.linalg.norm(q)
    base = rng.standard_normal((CHUNK, d))
    base -= np.outer(base @ q.astype(np.float64), q)  # orthogonal to q ...
    base /= np.linalg.norm(base, axis=1, keepdims=True)
    target = np.where(np.arange(CHUNK) % 25 == 3, 0.5 + rng.uniform(-1e-6, 1e-6, CHUNK), 0.05)
    # ... plus q at a cosine of 0.5 +- 1e-6 (21 rows) or 0.05
    x = (np.sqrt(1 - target**2)[:, None] * base + target[:, None] * q).astype(np.float32)
    exact = _exact(q, x)
    codes = ScanCodes(d, CHUNK, budget=CHUNK * d)
    codes.grow(CHUNK, lambda lo, hi: x[lo:hi])
    query = QueryCodes(q)
    for need in (0.5 - 2e-6, 0.5, 0.5 + 5e-7):
        got = codes.contenders(query, 0, CHUNK, need)
        passing = np.flatnonzero(exact > need)
        assert passing.size >= (10 if need < 0.5 else 0)
        assert got is not None and set(passing) <= set(got.tolist())
    assert codes.contenders(query, 0, CHUNK, 0.9).size == 0  # far above every row: none
    query.close()


def _pair(monkeypatch, factory: str, x: np.ndarray, codes_bytes: int):
    """Two indexes over ``x``, one scanning single queries through codes, one reading rows."""
    made = []
    monkeypatch.setattr(
        nr_settings, "CACHE_FRACTION", float("inf")
    )  # (the caps alone: codes in a small index)
    for budget in (codes_bytes, 0):
        monkeypatch.setattr(nr_settings, "SCAN_CODES_BYTES", budget)
        idx = NormIndex(x.shape[1], factory=factory, n_tail=32)
        if not idx.is_trained:
            idx.train(x)
        idx.add(x)
        if "IVF" in factory:
            faiss.extract_index_ivf(idx.faiss_index).nprobe = 4
        for sign in (1.0, -1.0):  # the budget is read at an index state's first scan of a sign
            idx.search(x[:1], 10, alpha=sign)
        made.append(idx)
    return made


@pytest.mark.parametrize("factory", ["HNSW16", "IVF16,Flat", "HNSW16,SQ8", "IVF16,PQ8"])
@pytest.mark.parametrize("alpha", [-2.0, -0.5, 0.5, 1.0, 3.0])
def test_single_queries_with_codes_match_reading_rows(monkeypatch, factory, alpha):
    """Bit for bit: the same ids and float32 scores with codes (a small budget: rows past it are
    read) as without; the codes are what the scan used, within their budget."""
    rng = np.random.default_rng(5)
    x = clustered(3000, 32, rng).astype(np.float32)
    x *= rng.lognormal(0, 0.4, (x.shape[0], 1)).astype(np.float32)
    q = clustered(40, 32, rng).astype(np.float32)
    monkeypatch.setattr(ann, "MIN_ROWS", 0)  # codes from a block's first row: a small collection
    with_codes, rows_only = _pair(monkeypatch, factory, x, codes_bytes=2 * 2 * CHUNK * 32)
    for i in range(q.shape[0]):
        s1, i1 = with_codes.search(q[i], 10, alpha=alpha)
        s2, i2 = rows_only.search(q[i], 10, alpha=alpha)
        np.testing.assert_array_equal(i1, i2)
        np.testing.assert_array_equal(s1, s2)
    orders = with_codes._cache.orders.values()
    assert any(o._scan_codes is not None and o._scan_codes.rows for o in orders)
    assert all(o._scan_codes is None or o._scan_codes.rows <= 2 * CHUNK for o in orders)  # its budget


def test_crowded_chunks_and_negative_scores_read_rows(monkeypatch):
    """Many near-duplicate documents (more contenders in a chunk than the heap holds) and queries
    facing away from every document (k-th score <= 0: no threshold): both read rows exactly."""
    rng = np.random.default_rng(9)
    center = rng.standard_normal(24)
    x = (center + 0.01 * rng.standard_normal((2000, 24))).astype(np.float32)
    x *= rng.lognormal(0, 0.5, (x.shape[0], 1)).astype(np.float32)
    with_codes, rows_only = _pair(monkeypatch, "HNSW16", x, codes_bytes=1 << 20)
    monkeypatch.setattr(ann, "MIN_ROWS", 0)
    queries = np.vstack(
        [center + 0.01 * rng.standard_normal((5, 24)), -center + 0.01 * rng.standard_normal((5, 24))]
    )
    for qv in queries.astype(np.float32):
        for alpha in (-1.0, 1.0, 2.0):
            s1, i1 = with_codes.search(qv, 10, alpha=alpha)
            s2, i2 = rows_only.search(qv, 10, alpha=alpha)
            np.testing.assert_array_equal(i1, i2)
            np.testing.assert_array_equal(s1, s2)


def test_threads_share_nothing_but_the_codes(monkeypatch):
    """Single queries from several threads at once (each query its own FAISS scanner, from a
    pool): the results of one thread alone."""
    rng = np.random.default_rng(11)
    x = clustered(4000, 48, rng).astype(np.float32)
    x *= rng.lognormal(0, 0.4, (x.shape[0], 1)).astype(np.float32)
    q = clustered(60, 48, rng).astype(np.float32)
    monkeypatch.setattr(ann, "MIN_ROWS", 0)
    idx, _ = _pair(monkeypatch, "HNSW16", x, codes_bytes=1 << 20)
    expected = [idx.search(v, 10, alpha=1.0) for v in q]
    failures: list[int] = []

    def run(offset: int) -> None:
        for j in range(q.shape[0]):
            i = (j + offset) % q.shape[0]
            s, ids = idx.search(q[i], 10, alpha=1.0)
            if not (np.array_equal(ids, expected[i][1]) and np.array_equal(s, expected[i][0])):
                failures.append(i)

    threads = [threading.Thread(target=run, args=(7 * t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures
    # one FAISS quantizer a dimension, and no more scanners than queries ran at once
    assert 1 <= len(scan_codes._POOLS[48][1]) <= len(threads)


def test_long_scans_read_codes_at_the_default_threshold(monkeypatch):
    """At the default MIN_ROWS only blocks of 1,024 rows or more go through codes; a collection
    whose scans are that long uses them, with the results of reading rows."""
    rng = np.random.default_rng(13)
    x = clustered(20_000, 16, rng).astype(np.float32)
    x *= rng.lognormal(0, 0.1, (x.shape[0], 1)).astype(np.float32)  # narrow norms: long scans
    q = clustered(30, 16, rng).astype(np.float32)
    with_codes, rows_only = _pair(monkeypatch, "HNSW16", x, codes_bytes=1 << 20)
    scanned = []
    for v in q:
        s1, i1, stats = with_codes.search(v, 10, alpha=1.0, return_stats=True)
        s2, i2 = rows_only.search(v, 10, alpha=1.0)
        np.testing.assert_array_equal(i1, i2)
        np.testing.assert_array_equal(s1, s2)
        scanned.append(stats.scanned)
    assert max(scanned) >= scan_codes.MIN_ROWS
    assert with_codes._cache.orders[1]._scan_codes.rows >= scan_codes.MIN_ROWS


def test_a_chunk_with_a_non_finite_row_is_read_as_rows():
    """A wrapped index may hold anything: a chunk with NaN or inf gets no codes, never a wrong
    threshold."""
    rng = np.random.default_rng(17)
    x = rng.standard_normal((3 * CHUNK, 8)).astype(np.float32)
    x[CHUNK + 3, 2] = np.nan
    x[2 * CHUNK + 1, 0] = np.inf
    codes = ScanCodes(8, x.shape[0], budget=x.size)
    codes.grow(x.shape[0], lambda lo, hi: x[lo:hi])
    q = np.ones(8, dtype=np.float32) / np.sqrt(8)
    query = QueryCodes(q)
    need = 10.0  # above every finite row's q . x (norms ~3): a finite chunk has no contender
    assert codes.contenders(query, 0, CHUNK, need).size == 0
    assert codes.contenders(query, CHUNK, 2 * CHUNK, need) is None
    assert codes.contenders(query, 2 * CHUNK, 3 * CHUNK, need) is None
    query.close()
