"""The int8 bound of the single-query weight-order scan (normrank.search.quantized_scan).

Two claims, each against an independent reference: the bound never rules out a row whose fp32
score (FAISS's own inner product, times the float32 weight: what the fp32 scan computes) beats
the k-th score, including rows placed exactly at it; and the single-query search through the
int8 copy returns bit for bit what the fp32 scan returns (scores, ids, tie order).
"""

from __future__ import annotations

import warnings

import faiss
import numpy as np
import pytest

from normrank.search import quantized_scan
from normrank.search.ann import IdLookup, WeightOrder, adaptive_search
from normrank.search.quantized_scan import QuantizedRows, candidates, quantize

pytestmark = pytest.mark.skipif(not quantized_scan.available(64), reason="numba not installed")


def fp32_scores(q: np.ndarray, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """What the fp32 scan computes: FAISS's inner products, times the weights in float32."""
    out = np.empty(x.shape[0], dtype=np.float32)
    faiss.fvec_inner_products_ny(
        faiss.swig_ptr(out), faiss.swig_ptr(q), faiss.swig_ptr(x), q.size, x.shape[0]
    )
    return out * w


def adversarial_rows(rng: np.random.Generator, m: int, d: int) -> np.ndarray:
    """Unit rows of every awkward shape: Gaussian, one huge component (the others round to 0),
    all components equal, a few spikes, tiny and subnormal entries, exact duplicates."""
    x = rng.normal(size=(m, d))
    x[: m // 8, 0] = 1e3  # one huge component
    x[m // 8 : m // 4] = 1.0  # all equal
    spikes = x[m // 4 : 3 * m // 8]
    spikes *= 1e-3
    spikes[:, :3] = rng.normal(size=(spikes.shape[0], 3))
    x[3 * m // 8 : m // 2, 1:] *= 1e-30  # one component and near-zeros
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    x = x.astype(np.float32)
    x[m // 2 : m // 2 + 20] = x[m // 2 + 20 : m // 2 + 40]  # duplicates: tied scores
    x[m // 2 + 40, 5:] = np.float32(1e-44)  # subnormals
    # Rows the codes represent exactly (residual 0): only the rounding margins separate the
    # bound from the fp32 score, and the two sums round in different orders.
    exact = rng.integers(-127, 128, size=(m // 4, d))
    exact[:, 0] = 127
    x[3 * m // 4 :] = (exact * 2.0**-10).astype(np.float32)
    return x


def test_quantize_residual_bound_against_exact_arithmetic():
    """``b_j`` covers ``||x_j - s_j c_j||`` and ``n_j`` covers ``||s_j c_j||``, both computed in
    extended precision from the exact value of every float (numpy longdouble as an independent
    reference)."""
    rng = np.random.default_rng(0)
    x = adversarial_rows(rng, 400, 48)
    codes, scale, bound, norm = quantize(x)
    assert codes.dtype == np.int8 and np.abs(codes.astype(int)).max() <= 127
    approx = scale.astype(np.longdouble)[:, None] * codes.astype(np.longdouble)
    resid = x.astype(np.longdouble) - approx
    exact = np.sqrt((resid * resid).sum(axis=1))
    assert (bound.astype(np.longdouble) >= exact).all()
    assert (norm.astype(np.longdouble) >= np.sqrt((approx * approx).sum(axis=1))).all()
    # Not vacuous: the bound is within a few rounding units plus gamma_d of the residual.
    assert np.median(bound - exact.astype(np.float64)) < 1e-4


@pytest.mark.parametrize("d", [16, 37, 384, 1000, 4096])
def test_query_codes_and_integer_inner_product_are_exact(d):
    """The query's codes: ``q = t g + r`` with ``t`` a power of two and ``e >= ||r||`` (longdouble
    reference), ``|g|`` small enough that no int32 sum of ``g . c`` overflows at this ``d``; and
    the vector kernel's ``g . c_j`` equals numpy's int64 product for every row, at dimensions
    that are and are not multiples of its lane count."""
    from normrank.search._quantized_kernel import dot_codes_via, query_codes_via

    rng = np.random.default_rng(d)
    for trial, q in enumerate(
        [
            rng.normal(size=d).astype(np.float32),
            (rng.normal(size=d) * 1e-30).astype(np.float32),
            np.r_[np.float32(3e4), rng.normal(size=d - 1).astype(np.float32) * np.float32(1e-6)],
            np.full(d, np.float32(-1.0)),  # every code at the cap
        ]
    ):
        g, t, e = query_codes_via(q)
        assert g.dtype == np.int16 and np.log2(t) == int(np.log2(t)), trial
        resid = q.astype(np.longdouble) - np.longdouble(t) * g.astype(np.longdouble)
        assert e >= np.sqrt((resid * resid).sum()), trial
        assert 127 * int(np.abs(g.astype(np.int64)).max()) * d < 2**31, trial
        assert e <= 1e-3 * np.linalg.norm(q.astype(np.float64)), trial  # ~15 bits: not vacuous
        codes = rng.integers(-127, 128, size=(50, d)).astype(np.int8)
        codes[0] = 127 * np.sign(g)  # the largest sum these codes can reach
        want = codes.astype(np.int64) @ g.astype(np.int64)
        np.testing.assert_array_equal(dot_codes_via(g, codes), want)


@pytest.mark.parametrize("d", [16, 48, 384])
def test_candidates_keep_every_row_that_beats_kth(d):
    """For queries of any norm and thresholds placed exactly at (and one float below) the fp32
    scores, every row whose fp32 score exceeds the threshold is a candidate."""
    rng = np.random.default_rng(d)
    x = adversarial_rows(rng, 512, d)
    rows = QuantizedRows(d)
    rows.extend(x)
    skip = np.empty(0, dtype=np.int64)
    kept_fraction = []
    for trial in range(60):
        q = rng.normal(size=d).astype(np.float32) * np.float32([1.0, 1e-3, 37.0][trial % 3])
        if trial % 5 == 0:
            q = x[rng.integers(512)].copy()  # a query equal to a row: cosine 1
        w = rng.lognormal(0, 1.5, 512).astype(np.float32) if trial % 2 else np.ones(512, np.float32)
        if trial % 7 == 0:
            w[::9] = np.float32(1e-42)  # subnormal weights
        exact = fp32_scores(q, x, w)
        order = np.sort(exact)[::-1]
        for kth in (order[10], np.nextafter(order[10], np.float32(-np.inf)), order[0], order[-1], -np.inf):
            lo, hi = trial % 7, 512 - trial % 5
            got = candidates(q, rows, w[lo:hi], lo, hi, float(kth), skip)
            want = lo + np.flatnonzero(exact[lo:hi] > kth)
            assert np.isin(want, got).all(), (trial, float(kth))
            assert (np.diff(got) > 0).all() and got.min(initial=lo) >= lo and got.max(initial=lo) < hi
            if kth == order[10]:
                kept_fraction.append(got.size / (hi - lo))
    assert np.median(kept_fraction) < 0.5  # it rules rows out, or it would be no use


def test_candidates_skip_rows_and_keep_inf_weights():
    rng = np.random.default_rng(4)
    x = adversarial_rows(rng, 200, 32)
    rows = QuantizedRows(32)
    rows.extend(x[:120])
    rows.extend(x[120:])  # grown in two pieces
    q = x[3].copy()
    w = np.ones(200, dtype=np.float32)
    w[7] = np.inf  # overflowed weight: its score is inf (or NaN), the bound must not drop it
    skip = np.array([2, 2, 7, 150, 500], dtype=np.int64)  # sorted, with a duplicate and an outsider
    got = candidates(q, rows, w, 0, 200, -np.inf, skip)
    np.testing.assert_array_equal(got, np.setdiff1d(np.arange(200), skip))
    w[7] = np.inf
    got = candidates(q, rows, w, 0, 200, 1e30, np.empty(0, dtype=np.int64))
    assert 7 in got


def clustered(n: int, d: int, seed: int):
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(12, d))
    u = centers[rng.integers(12, size=n)] + rng.normal(size=(n, d))
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    norms = rng.lognormal(0.0, 0.2, size=n)  # narrow, as MiniLM's: the scan goes deep
    x = (u * norms[:, None]).astype(np.float32)
    x[:40] = x[40:80]  # duplicate documents: exactly tied scores at the k-th place
    x[80:90, 0] = 50.0  # one huge component
    q = centers[rng.integers(12, size=40)] + rng.normal(size=(40, d))
    return x, q.astype(np.float32)


@pytest.mark.parametrize("path", ["one call", "per chunk"])
@pytest.mark.parametrize("alpha", [-1.5, 0.5, 1.0, 4.0])
@pytest.mark.parametrize("factory", ["IVF8,Flat", "HNSW16"])
def test_single_query_int8_scan_is_bit_for_bit_the_fp32_scan(alpha, factory, path, monkeypatch):
    """Every single query, through the int8 copy (the whole scan in one compiled call, or chunk
    by chunk from numpy) and through the fp32 scan: the same scores bit for bit, the same
    positions in the same order; and, probing every IVF list (where the bound is a proof),
    brute force's scores."""
    if path == "per chunk":
        monkeypatch.setattr(quantized_scan, "fused_scan", lambda d: None)
    else:
        assert quantized_scan.fused_scan(48) is not None
    x, q = clustered(3000, 48, seed=int(10 * abs(alpha)) + len(factory))
    norms = np.linalg.norm(x.astype(np.float64), axis=1)
    unit = (x / norms[:, None]).astype(np.float32)
    index = faiss.index_factory(48, factory, faiss.METRIC_INNER_PRODUCT)
    index.train(unit)
    index.add(unit)
    if factory.startswith("IVF"):
        faiss.extract_index_ivf(index).nprobe = 8
    base = norms.astype(np.float32)
    weights = (norms**alpha).astype(np.float32)
    sign = 1 if alpha > 0 else -1
    fp32 = WeightOrder(base, sign, lambda pos: unit[pos], quantized=False)
    int8 = WeightOrder(base, sign, lambda pos: unit[pos], quantized=True)
    lookup = IdLookup(np.arange(3000))
    qu = (q / np.linalg.norm(q.astype(np.float64), axis=1, keepdims=True)).astype(np.float32)
    scores64 = (qu.astype(np.float64) @ unit.T.astype(np.float64)) * norms**alpha
    for depth, band in ((10, 16), (40, 100), (10, 3000)):
        for i in range(qu.shape[0]):
            args = dict(k=10, weights=weights, lookup=lookup, depth=depth, band_start=band)
            s8, p8 = adaptive_search(index, qu[i : i + 1], order=int8, **args)
            s32, p32 = adaptive_search(index, qu[i : i + 1], order=fp32, **args)
            # Exact by construction: the rows the int8 bound keeps are scored by the same FAISS
            # row kernel (fvec_inner_products_ny: each row's sum alone, no BLAS) and the same
            # float32 multiply as the fp32 scan's, and a row ruled out cannot reach the top k.
            assert s8.tobytes() == s32.tobytes()
            np.testing.assert_array_equal(p8, p32)
            if factory.startswith("IVF"):
                ref = np.sort(scores64[i])[::-1][:10]
                np.testing.assert_allclose(np.sort(scores64[i, p8[0]])[::-1], ref, rtol=1e-5)
    assert int8._codes is not None and fp32._codes is None
    # The int8 copy holds what the fp32 one holds, in a quarter of the bytes plus 8 per row.
    assert len(int8._codes) == int8._vectors.shape[0]
    assert int8._codes.nbytes == int8._vectors.nbytes // 4 + 12 * len(int8._codes)


def test_without_numba_the_scan_stays_fp32(monkeypatch):
    """No numba (or a kernel that does not build, or a short vector): the fp32 scan runs, nothing
    is quantised, and a warning says so once."""
    import builtins
    import sys

    real_import = builtins.__import__

    def no_numba(name, *args, **kwargs):
        if name == "numba" or name.startswith("normrank.search._quantized_kernel"):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(quantized_scan, "_kernel", None)
    monkeypatch.delitem(sys.modules, "normrank.search._quantized_kernel", raising=False)
    monkeypatch.setattr(builtins, "__import__", no_numba)
    with pytest.warns(RuntimeWarning, match="numba is not importable"):
        assert not quantized_scan.available(384)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not quantized_scan.available(384)  # decided once: no second warning
    order = WeightOrder(np.ones(4, dtype=np.float32), 1, lambda pos: np.eye(4, 32, dtype=np.float32)[pos])
    assert order.codes(2, 32) is None and order.quantized is False
    monkeypatch.undo()
    assert quantized_scan.available(384)
    assert not quantized_scan.available(quantized_scan.MIN_DIM - 1)


def test_single_queries_with_tombstones_and_few_documents():
    """Where the one-call scan declines (removed documents among the candidates, fewer documents
    than k): the numpy path answers, the same as the fp32 scan, and no id is a removed one."""
    from normrank import NormIndex

    x, q = clustered(400, 32, seed=3)
    for n, k in ((400, 10), (7, 10)):
        got = {}
        for quantized in (True, False):
            idx = NormIndex(32, factory="HNSW16")
            idx.add(x[:n])
            if n > k:
                idx.remove(np.arange(0, n, 3))
            for sign in (1, -1):
                order = idx._weight_order(float(sign))
                order.quantized = quantized
            got[quantized] = [idx.search(q[i], k, alpha=a) for i in range(10) for a in (-1.0, 1.0)]
        for (s8, i8), (s32, i32) in zip(got[True], got[False], strict=True):
            assert s8.tobytes() == s32.tobytes()  # the same row kernel and multiply (see above)
            np.testing.assert_array_equal(i8, i32)
            if n > k:
                assert not np.isin(i8, np.arange(0, n, 3)).any()
