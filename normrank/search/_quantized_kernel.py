"""The numba kernel of :mod:`normrank.search.quantized_scan` (imported on first use: numba's import and
compilation are paid only by processes that scan; compiled code is cached on disk)."""

from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

__all__ = ["DONE", "FALLBACK", "GROW", "scan", "scan_one"]

# Rows prefetched ahead of the one being read: the int8 prefix is read once, cold after the
# index search, and hints let its loads overlap the arithmetic (27k real MiniLM rows, 4.5k
# scanned: 121 -> 92 us; 2 to 8 rows ahead measured alike).
_AHEAD = 4


@intrinsic
def _prefetch(typingctx, array, offset):
    """LLVM's read-prefetch hint for ``array``'s byte ``offset`` (a no-op where the CPU has none)."""

    def codegen(context, builder, signature, args):
        data = context.make_array(signature.args[0])(context, builder, args[0]).data
        i8p, i32 = ir.IntType(8).as_pointer(), ir.IntType(32)
        fn = builder.module.declare_intrinsic(
            "llvm.prefetch", [i8p], ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
        )
        ptr = builder.gep(builder.bitcast(data, i8p), [args[1]])
        # read (0), high temporal locality (3), data cache (1)
        builder.call(fn, [ptr, ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return types.void(array, offset), codegen


# reassoc / contract let LLVM vectorise the float32 reduction (quantized_scan's gamma_d margin
# covers any summation order); no nnan / ninf: the k-th score may be -inf, weights inf.
@numba.njit(cache=True, nogil=True, fastmath={"reassoc", "contract"})
def _dot_int8(q, codes, j):  # pragma: no cover - compiled
    acc = np.float32(0.0)
    for i in range(q.size):
        acc += q[i] * np.float32(codes[j, i])
    return acc


@numba.njit(cache=True, nogil=True, inline="always")
def _query_norm_up(q):  # pragma: no cover - compiled
    """||q|| rounded up: float64 rounding of d squares summed (relative (d + 2) * 2**-53 at
    most), then the root."""
    d = q.size
    total = 0.0
    for i in range(d):
        total += np.float64(q[i]) * np.float64(q[i])
    return np.sqrt(total * (1.0 + (d + 2) * 2.0**-52))


@numba.njit(cache=True, nogil=True, inline="always")
def _row_bound(q, q_norm, codes, scale, bound, j, wj):  # pragma: no cover - compiled
    """Upper bound of row ``j``'s fp32 score ``fl(fl(q . x_j) * wj)`` from its int8 copy
    (quantized_scan's module docstring); NaN where ``wj`` is inf and the bound 0."""
    u = np.float64(_dot_int8(q, codes, j)) * np.float64(scale[j]) + q_norm * np.float64(bound[j])
    return u * wj + 2.0**-23 * abs(u) * wj + 2.0**-149


@numba.njit(cache=True, nogil=True, inline="always")
def _prefetch_ahead(codes, ahead, stop):  # pragma: no cover - compiled
    """Hint row ``ahead`` (if before ``stop``) into cache; the next row to hint."""
    if ahead >= stop:
        return ahead
    d = codes.shape[1]
    for c in range(0, d, 64):
        _prefetch(codes, ahead * d + c)
    return ahead + 1


@numba.njit(cache=True, nogil=True, inline="always")
def _insert_sorted(s, p, at, x, pid):  # pragma: no cover - compiled
    """Put score ``x`` (id ``pid``) into the descending ``s`` / ``p`` at slot ``at`` or above,
    after every score >= x (ties keep their order); the entry at ``at`` drops out."""
    while at > 0 and s[at - 1] < x:
        s[at] = s[at - 1]
        p[at] = p[at - 1]
        at -= 1
    s[at] = x
    p[at] = pid


@numba.njit(cache=True, nogil=True, inline="always")
def _skip_to(skip, at, j):  # pragma: no cover - compiled
    """Advance ``at`` in the sorted ``skip`` to row ``j``: ``(at, whether j is in skip)``."""
    while at < skip.size and skip[at] < j:
        at += 1
    return at, at < skip.size and skip[at] == j


@numba.njit(cache=True, nogil=True)
def scan(q, codes, scale, bound, w, lo, hi, kth, skip, out):  # pragma: no cover - compiled
    """Writes to ``out`` the rows ``j`` in ``[lo, hi)``, not in ``skip`` (sorted), whose upper
    bound of the fp32 score (quantized_scan's module docstring) exceeds ``kth``, ascending;
    returns how many."""
    q_norm = _query_norm_up(q)
    count = 0
    s = np.searchsorted(skip, lo)
    ahead = min(hi, lo + _AHEAD)
    for j in range(lo, hi):
        ahead = _prefetch_ahead(codes, ahead, hi)
        s, skipped = _skip_to(skip, s, j)
        if skipped:  # already scored (an index candidate)
            continue
        ub = _row_bound(q, q_norm, codes, scale, bound, j, np.float64(w[j - lo]))
        if not ub <= kth:  # NaN (an inf weight times 0) stays: it is scored exactly
            out[count] = j
            count += 1
    return count


# -- the whole single-query scan in one call ------------------------------------------------
# Status codes of scan_one.
DONE, FALLBACK, GROW = 0, 1, 2


@intrinsic
def _faiss_inner_product(typingctx, address, q, x, row):
    """``faiss::fvec_inner_products_ny(&out, q, x + row * d, d, 1)`` through its address: the
    very function the fp32 scan calls, on one row (bit for bit its value for that row)."""

    def codegen(context, builder, signature, args):
        f32 = ir.FloatType()
        f32p = f32.as_pointer()
        size_t = context.get_value_type(types.uintp)
        qa = context.make_array(signature.args[1])(context, builder, args[1])
        xa = context.make_array(signature.args[2])(context, builder, args[2])
        d = builder.extract_value(qa.shape, 0)
        fnty = ir.FunctionType(ir.VoidType(), [f32p, f32p, f32p, size_t, size_t])
        fn = builder.inttoptr(args[0], fnty.as_pointer())
        out = cgutils.alloca_once(builder, f32)
        ptr = builder.gep(xa.data, [builder.mul(args[3], d)])
        builder.call(fn, [out, qa.data, ptr, d, ir.Constant(size_t, 1)])
        return builder.load(out)

    return types.float32(address, q, x, row), codegen


@numba.njit(cache=True, nogil=True)
def scan_one(
    faiss_ny,
    q,
    cos,
    pos,
    weights,
    rank,
    order,
    w_sorted,
    neg_w,
    w_min,
    vectors,
    codes,
    scale,
    bound,
    k,
    trust,
    band_start,
    s,
    p,
    stats,
):  # pragma: no cover - compiled
    """normrank.search.ann._search_one after the index search, in one call: re-score the candidates
    (``cos * weights[pos]``), then the weight-order scan, each row bounded by its int8 copy and
    scored exactly (FAISS, ``faiss_ny``) only where the bound can beat the current k-th score.

    Writes the top-``k`` to ``s`` / ``p`` (best first; equal scores in candidate order, then
    weight order: numpy's stable sort of the fp32 scan) and ``stats`` = (rounds, scanned, the
    prefix length needed); returns DONE, FALLBACK (pads, tombstones, non-finite scores, too few
    candidates: the caller's numpy path decides) or GROW (``vectors`` / ``codes`` hold fewer
    rows than ``stats[2]``: grow them and call again; nothing was returned)."""
    m = pos.size
    if m < k:
        return FALLBACK
    count = 0
    for i in range(m):
        if pos[i] < 0:
            return FALLBACK
        x = cos[i] * weights[pos[i]]
        if not np.isfinite(x):
            return FALLBACK
        if count == k and not x > s[k - 1]:
            continue
        _insert_sorted(s, p, min(count, k - 1), x, pos[i])
        count = min(count + 1, k)
    c_last = np.float64(cos[trust - 1])
    seen = np.sort(rank[pos])  # candidates met again in the scan count once
    n = neg_w.size
    have = codes.shape[0]
    q_norm = _query_norm_up(q)
    scanned = 0
    rounds = 1
    while True:
        kth = np.float64(s[k - 1])
        # scan_needed for one query: the first weight rank where c_last * w <= kth
        need = np.searchsorted(neg_w, -(kth / c_last)) if c_last > 0 else (0 if kth >= c_last * w_min else n)
        if need <= scanned:
            stats[0] = rounds
            stats[1] = scanned
            return DONE
        stop = min(n, need, max(band_start if scanned == 0 else n, k, scanned + 1))
        if stop > have:
            stats[2] = stop
            return GROW
        at_seen = np.searchsorted(seen, scanned)
        ahead = min(stop, scanned + _AHEAD)
        for j in range(scanned, stop):
            ahead = _prefetch_ahead(codes, ahead, stop)
            at_seen, skipped = _skip_to(seen, at_seen, j)
            if skipped:
                continue
            ub = _row_bound(q, q_norm, codes, scale, bound, j, np.float64(w_sorted[j]))
            if ub <= kth:
                continue
            x = _faiss_inner_product(faiss_ny, q, vectors, j) * w_sorted[j]
            # Entering the top-k with the threshold raised as rows enter gives the fp32 scan's
            # merge of everything above the chunk's first threshold: a row that does not beat
            # the current k-th could not have made the k best of that merge either.
            if not x > s[k - 1]:
                continue
            _insert_sorted(s, p, k - 1, x, order[j])
            kth = np.float64(s[k - 1])
        scanned = stop
        rounds += 1


@numba.njit(cache=True, nogil=True)
def inner_products_via(faiss_ny, q, x, out):  # pragma: no cover - compiled
    """``out[j]`` = row ``j``'s inner product with ``q`` through ``faiss_ny`` (a check)."""
    for j in range(x.shape[0]):
        out[j] = _faiss_inner_product(faiss_ny, q, x, j)
