"""An int8 copy of float32 rows that bounds their inner products with a query from above,
rigorously, in a quarter of the bytes.

Used by the single-query weight-order scan (:mod:`normrank.search.ann`): the scan reads a prefix of
the documents in weight order, and an fp32 pass over it is memory bound (27k real MiniLM
embeddings, alpha = 1: ~4.5k x 384 floats, 7 MB, ~250 us a query). Per row ``x_j`` this keeps

* a scale ``s_j = max|x_j| / 127`` (float32) and codes ``c_j = round(x_j / s_j)`` (int8), so that
  ``x~_j = s_j c_j`` exactly;
* ``b_j``, an upper bound, rounded up, of ``e_j + gamma_d (||x_j|| + ||x~_j||)``, where
  ``e_j = ||x_j - x~_j||`` is computed in float64 from the float32 row and the exact ``x~_j``, and
  ``gamma_d = d u / (1 - d u)`` (``u = 2**-24``) bounds the relative rounding of a d-term float32
  dot product in any summation order (``|fl(q.x) - q.x| <= gamma_d ||q|| ||x||``).

and ``n_j >= ||x~_j||`` (float32, rounded up). The query is coded once per scan: a power-of-two
step ``t`` and int16 codes ``g = rint(q / t)``, so that ``q = t g + r`` exactly, with ``e >= ||r||``.
The kernel's inner product ``I_j = g . c_j`` is an exact int32 sum (``|g_i|`` is capped so that it
cannot overflow). Then, for the fp32 cosine ``c = fl(q . x_j)`` the scan would compute (FAISS, any
order):

    c <= q.x_j + gamma_d ||q|| ||x_j|| <= q.x~_j + ||q|| e_j + gamma_d ||q|| ||x_j||
      <= t s_j I_j + e n_j + ||q|| b_j =: U_j,

and the fp32 score ``fl(c * w_j) <= U_j w_j + u |U_j| w_j`` (plus half the smallest subnormal),
which the kernel evaluates in float64 with a doubled ``u`` (covering its own float64 rounding).
A row it rules out therefore cannot score above the k-th score; the rows it keeps are scored
exactly, by the same FAISS call as the fp32 scan, so results are bit for bit those of the fp32
scan. No assumption on the data: non-unit queries, huge components and extreme weights only
loosen the bound (more rows kept). Integer codes on both sides make the inner product a
widening multiply-add (x86 vpmaddwd, 16 lanes per instruction on AVX2), so the kernel runs at
about the same speed with and without 512-bit registers.

The kernel is compiled by numba at first use (cached on disk). Without numba, or for rows too
short for the copy to pay (``d < MIN_DIM``) or too long for its int32 sums (``d > MAX_DIM``),
:func:`available` is False and the scan stays fp32:
the same results, only slower.
"""

from __future__ import annotations

import warnings

import numpy as np

__all__ = [
    "MAX_DIM",
    "MIN_DIM",
    "FusedScan",
    "QuantizedRows",
    "available",
    "candidates",
    "faiss_inner_products_address",
    "fused_scan",
    "quantize",
]

# Below this dimension a row is a cache line or two either way; FAISS's specialised small-d
# kernels (d = 2, 4, 8, 12) also round differently on gathered rows.
MIN_DIM = 16
# Above this the query's int16 codes would need too few bits for the int32 sum not to overflow.
MAX_DIM = 1 << 20

_BLOCK_ROWS = 1024  # rows quantised at a time
_UNIT = 2.0**-24  # float32 unit roundoff
_kernel = None  # the compiled numba function; False once numba was found missing
_fused = None  # (scan_one, FAISS's fvec_inner_products_ny address), or False
# scan_one's answers (normrank.search._quantized_kernel).
_DONE, _FALLBACK, _GROW = 0, 1, 2


def _gamma(d: int) -> float:
    du = d * _UNIT
    return du / (1 - du)


def _round_up_f32(v: np.ndarray) -> np.ndarray:
    """float64 -> float32, never below the float64 value."""
    f = v.astype(np.float32)
    return np.where(f.astype(np.float64) < v, np.nextafter(f, np.float32(np.inf)), f)


def quantize(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(codes int8 (m, d), scales float32 (m,), bounds float32 (m,), norms float32 (m,))`` of
    finite float32 rows (the module docstring's ``c_j``, ``s_j``, ``b_j``, ``n_j``). All-zero
    rows get scale 1, codes 0."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    m, d = x.shape
    peak = np.abs(x).max(axis=1) if d else np.zeros(m, dtype=np.float32)
    scale = np.where(peak > 0, peak / np.float32(127), np.float32(1)).astype(np.float32)
    codes = np.clip(np.rint(x / scale[:, None]), -127, 127).astype(np.int8)
    # s_j * c_ji is exact in float64 (a 24-bit times an 8-bit mantissa), and so is x minus it.
    approx = scale.astype(np.float64)[:, None] * codes
    resid = x.astype(np.float64) - approx
    e = np.sqrt(np.einsum("ij,ij->i", resid, resid))
    x_norm = np.sqrt(np.einsum("ij,ij->i", x.astype(np.float64), x.astype(np.float64)))
    a_norm = np.sqrt(np.einsum("ij,ij->i", approx, approx))
    b = e + _gamma(d) * (x_norm + a_norm)
    # float64 rounding of these sums and of the kernel's U_j (relative 2**-52 per operation,
    # a few dozen of them), and subnormal products (absolute 2**-150 each, 2d of them).
    b = b * (1 + 1e-12) + 2.0**-40 * (1 + 2 * a_norm) + d * 2.0**-148
    n = a_norm * (1 + 1e-12) + d * 2.0**-148
    return codes, scale, _round_up_f32(b), _round_up_f32(n)


class QuantizedRows:
    """Growable int8 copy of a float32 row prefix: :func:`quantize` of each appended block."""

    __slots__ = ("bound", "codes", "norm", "scale")

    def __init__(self, d: int) -> None:
        self.codes = np.empty((0, d), dtype=np.int8)
        self.scale = np.empty(0, dtype=np.float32)
        self.bound = np.empty(0, dtype=np.float32)
        self.norm = np.empty(0, dtype=np.float32)

    def __len__(self) -> int:
        return self.scale.size

    def extend(self, x: np.ndarray) -> None:
        # A block at a time: float64 temporaries of a whole prefix cost more in fresh pages
        # than the arithmetic (27k x 384: 2.4 s in one piece, 0.15 s in blocks).
        parts = [quantize(x[r : r + _BLOCK_ROWS]) for r in range(0, x.shape[0], _BLOCK_ROWS)]
        self.codes = np.concatenate([self.codes, *(c for c, _, _, _ in parts)])
        self.scale = np.concatenate([self.scale, *(s for _, s, _, _ in parts)])
        self.bound = np.concatenate([self.bound, *(b for _, _, b, _ in parts)])
        self.norm = np.concatenate([self.norm, *(n for _, _, _, n in parts)])

    @property
    def nbytes(self) -> int:
        return self.codes.nbytes + self.scale.nbytes + self.bound.nbytes + self.norm.nbytes


def _working_kernel():
    """The compiled kernel (:mod:`normrank.search._quantized_kernel`, numba), or False where it cannot
    be built here (checked once, on a few rows with a known answer), said in a warning: the
    fp32 scan gives the same results, slower."""
    try:
        from normrank.search._quantized_kernel import scan
    except ImportError as e:  # numba is a dependency: a broken or partial install
        return _fp32_only(f"numba is not importable ({e})")
    codes, scale, bound, norm = quantize(np.eye(MIN_DIM, dtype=np.float32))
    q = np.zeros(MIN_DIM, np.float32)
    q[3] = 1.0
    out = np.empty(MIN_DIM, np.int64)
    w = np.ones(MIN_DIM, np.float32)
    try:
        count = scan(q, codes, scale, bound, norm, w, 0, MIN_DIM, 0.5, np.empty(0, np.int64), out)
    except Exception as e:  # a numba / LLVM that cannot compile it
        return _fp32_only(f"its numba kernel did not compile ({type(e).__name__}: {e})")
    if count != 1 or out[0] != 3:
        return _fp32_only("its numba kernel gave a wrong answer on a check")
    return scan


def _fp32_only(why: str) -> bool:
    warnings.warn(
        f"normrank: the int8 bound of the single-query ANN scan is off because {why}; the scan "
        "reads fp32 vectors instead (the same results, slower). Reinstall numba to restore it.",
        RuntimeWarning,
        stacklevel=4,
    )
    return False


def available(d: int) -> bool:
    """Whether :func:`candidates` runs here: numba importable (compiled on the first call) and
    ``MIN_DIM <= d <= MAX_DIM``."""
    global _kernel
    if not MIN_DIM <= d <= MAX_DIM:
        return False
    if _kernel is None:
        _kernel = _working_kernel()
    return _kernel is not False


def candidates(
    q: np.ndarray, rows: QuantizedRows, w: np.ndarray, lo: int, hi: int, kth: float, skip: np.ndarray
) -> np.ndarray:
    """Ascending rows ``j`` in ``[lo, hi)``, not in ``skip`` (sorted int64), whose fp32 score
    ``fl(fl(q . x_j) * w[j - lo])`` may exceed ``kth``: a superset of those whose score does.
    ``q``: float32 query (any norm); ``w``: the float32 weights of rows ``lo .. hi - 1``.
    Requires :func:`available`."""
    out = np.empty(hi - lo, dtype=np.int64)
    count = _kernel(q, rows.codes, rows.scale, rows.bound, rows.norm, w, lo, hi, float(kth), skip, out)
    return out[:count]


def faiss_inner_products_address() -> int | None:
    """The address of ``faiss::fvec_inner_products_ny`` in the FAISS library this process loaded
    (the function the fp32 scan calls through the Python bindings), or None where its symbol
    is not exported under the Itanium C++ name (e.g. Windows builds)."""
    import ctypes
    import glob
    import os

    import faiss

    here = os.path.dirname(faiss.__file__)
    for path in [*sorted(glob.glob(os.path.join(here, "libfaiss*"))), faiss._swigfaiss.__file__]:
        try:
            fn = ctypes.CDLL(path)._ZN5faiss22fvec_inner_products_nyEPfPKfS2_mm
        except (OSError, AttributeError):
            continue
        return ctypes.cast(fn, ctypes.c_void_p).value
    return None


def fused_scan(d: int):
    """``(scan_one, address)`` for the whole single-query scan in one compiled call
    (:func:`normrank.search._quantized_kernel.scan_one`), or None where it does not run: no int8
    kernel, no FAISS address, or the address's inner products differing in any bit from those
    of ``faiss.fvec_inner_products_ny`` on a check (then quietly the per-chunk path: the same
    results)."""
    global _fused
    if not available(d):
        return None
    if _fused is None:
        _fused = _working_fused()
    return _fused or None


def _working_fused():
    import faiss

    from normrank.search._quantized_kernel import inner_products_via, scan_one

    address = faiss_inner_products_address()
    if address is None:
        return False
    rng = np.random.default_rng(0)
    for dim in (MIN_DIM, 37, 384):
        x = rng.normal(size=(64, dim)).astype(np.float32)
        q = rng.normal(size=dim).astype(np.float32)
        want, got = np.empty(64, dtype=np.float32), np.empty(64, dtype=np.float32)
        faiss.fvec_inner_products_ny(faiss.swig_ptr(want), faiss.swig_ptr(q), faiss.swig_ptr(x), dim, 64)
        try:
            inner_products_via(address, q, x, got)
        except Exception:  # a numba / LLVM that cannot compile it: the per-chunk path
            return False
        if got.tobytes() != want.tobytes():
            return False
    # One scan with a known answer (compiles scan_one here, not in a user's search): 32 unit
    # rows in weight order, the index "returning" the two lightest; row 5 (cosine 1) must win.
    n = 32
    x = np.eye(n, dtype=np.float32)
    w = (10 - np.arange(n) / 4).astype(np.float32)
    codes, scale, bound, norm = quantize(x)
    pos = np.array([30, 31], dtype=np.int64)
    order = np.arange(n, dtype=np.int64)
    top_s, top_p, stats = np.empty(1, np.float32), np.empty(1, np.int64), np.zeros(3, np.int64)
    try:
        status = scan_one(
            address, x[5].copy(), np.array([0.5, 0.4], np.float32), pos, w, order, order, w,
            -w.astype(np.float64), float(w.min()), x, codes, scale, bound, norm, 1, 2, 0, top_s, top_p, stats,
        )  # fmt: skip
    except Exception:
        return False
    if status != 0 or top_p[0] != 5 or top_s[0] != w[5] or stats[1] != n - 4:
        return False
    return scan_one, address


class FusedScan:
    """The single-query scan of :func:`normrank.search.ann.rerank` in one compiled call
    (:func:`normrank.search._quantized_kernel.scan_one`: the same candidates, bound, chunks and
    scores) for one weighting, ``k`` and trusted rank, with its result buffers: built once per
    search plan, so that a single query pays the compiled call and little else. Calls must not
    overlap (a NormIndex searches under its lock); results are views of the buffers, valid until
    the next call. ``order``: the plan's :class:`normrank.search.ann.WeightOrder`; ``fused``:
    :func:`fused_scan`'s pair."""

    __slots__ = ("_fused", "_order", "_sorted", "_weights", "band_start", "k", "out", "p", "s", "trust")

    def __init__(self, fused, order, weights: np.ndarray, k: int, trust: int, band_start: int):
        self._fused, self._order, self._weights = fused, order, weights
        self._sorted = order.sorted_weights(weights)
        self.k, self.trust, self.band_start = k, trust, band_start
        self.s = np.empty(k, dtype=np.float32)
        self.p = np.empty(k, dtype=np.int64)
        self.out = np.zeros(3, dtype=np.int64)  # rounds, rows scanned, rows the copy must hold

    def __call__(
        self, q: np.ndarray, cos: np.ndarray, pos: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """``(scores, positions)`` ``(k,)`` of one query (``q`` float32 C-contiguous, its
        candidates' cosines and storage positions); None where the compiled call leaves the case
        to the numpy path (pads, tombstones, non-finite scores)."""
        scan_one, address = self._fused
        order = self._order
        w_sorted, neg_w, w_min = self._sorted
        rows = 1
        while True:
            codes = order.codes(rows, q.size)  # the prefix copied so far, at least `rows` long
            status = scan_one(
                address, q, cos, pos, self._weights, order.rank, order.order, w_sorted, neg_w, w_min,
                order.vectors(len(codes)), codes.codes, codes.scale, codes.bound, codes.norm,
                self.k, self.trust, self.band_start, self.s, self.p, self.out,
            )  # fmt: skip
            if status == _GROW:  # the copy is grown (doubling) and the call repeated: warm-up only
                rows = int(self.out[2])
                continue
            return None if status == _FALLBACK else (self.s, self.p)
