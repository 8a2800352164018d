"""The numba kernel of :mod:`normrank.search.quantized_scan` (imported on first use: numba's import and
compilation are paid only by processes that scan; compiled code is cached on disk)."""

from __future__ import annotations

import math

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

__all__ = ["DONE", "FALLBACK", "GROW", "scan", "scan_one"]

# Rows bounded per block: their inner products first (a tight loop of vector multiply-adds),
# then their bounds (a loop over plain arrays that LLVM vectorises), then the few rows whose bound
# beats the k-th score (one pass per row, with its bookkeeping, was ~6 ns a row on top of the
# ~6 of its inner product). Hardware prefetch follows the sequential rows: software hints, which
# paid with the float32 loop, cost more than they saved with this one.
_BLOCK = 64


# Lanes per step of the codes' inner product: 32 int8 codes times 32 int16 query codes, summed in
# pairs into 16 int32 (x86: two vpmaddwd on AVX2, one on AVX-512BW; NEON: widening
# multiply-adds). Plain LLVM vector IR, so the same code compiles for every target; measured on
# Zen 5, 384-d rows: 7.1 ns a row under the AVX2 target, 5.8 native (the float32 loop it
# replaces: 12.5 / 7.0).
_LANES = 32


@intrinsic
def _dot_codes(typingctx, g, codes, j):
    """``sum_i g[i] * codes[j, i]`` in int32 (exact: :func:`_query_codes` bounds ``|g|`` so that
    the sum cannot overflow) for C-contiguous int16 ``g`` and int8 ``codes`` (others: a typing
    error)."""

    def codegen(context, builder, signature, args):
        i32, i64 = ir.IntType(32), ir.IntType(64)
        lanes = ir.VectorType(i32, _LANES)
        pairs = ir.VectorType(i32, _LANES // 2)
        ga = context.make_array(signature.args[0])(context, builder, args[0])
        ca = context.make_array(signature.args[1])(context, builder, args[1])
        d = builder.extract_value(ga.shape, 0)
        row = builder.gep(ca.data, [builder.mul(args[2], d)])
        g_vec = ir.VectorType(ir.IntType(16), _LANES).as_pointer()
        c_vec = ir.VectorType(ir.IntType(8), _LANES).as_pointer()
        even = ir.Constant(pairs, list(range(0, _LANES, 2)))
        odd = ir.Constant(pairs, list(range(1, _LANES, 2)))
        acc = cgutils.alloca_once_value(builder, ir.Constant(pairs, None))
        steps = builder.udiv(d, ir.Constant(i64, _LANES))
        with cgutils.for_range(builder, steps) as loop:
            at = builder.mul(loop.index, ir.Constant(i64, _LANES))
            gv = builder.load(builder.bitcast(builder.gep(ga.data, [at]), g_vec), align=1)
            cv = builder.load(builder.bitcast(builder.gep(row, [at]), c_vec), align=1)
            prod = builder.mul(builder.sext(gv, lanes), builder.sext(cv, lanes))
            # Adjacent products added in pairs: the shape x86's backend maps to vpmaddwd.
            pair = builder.add(
                builder.shuffle_vector(prod, prod, even), builder.shuffle_vector(prod, prod, odd)
            )
            builder.store(builder.add(builder.load(acc), pair), acc)
        reduce_add = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(i32, [pairs]), f"llvm.vector.reduce.add.v{_LANES // 2}i32"
        )
        total = cgutils.alloca_once_value(builder, builder.call(reduce_add, [builder.load(acc)]))
        tail = builder.mul(steps, ir.Constant(i64, _LANES))
        with cgutils.for_range_slice(builder, tail, d, ir.Constant(i64, 1), inc=True) as (i, _):
            gi = builder.sext(builder.load(builder.gep(ga.data, [i])), i32)
            ci = builder.sext(builder.load(builder.gep(row, [i])), i32)
            builder.store(builder.add(builder.load(total), builder.mul(gi, ci)), total)
        return builder.load(total)

    if g.layout != "C" or codes.layout != "C":  # rows are addressed as j * d bytes
        return None
    return types.int32(g, codes, j), codegen


@numba.njit(cache=True, nogil=True, inline="always")
def _code_bits(d):  # pragma: no cover - compiled
    """Bits of the query's int16 codes: ``|g_i| <= 2**bits`` with ``127 * 2**bits * d < 2**31``,
    so that the int32 sum cannot overflow (14 up to d = 1032; 12 at d = 4096)."""
    bits = 14
    while bits > 1 and 127 * (2**bits) * d >= 2**31:
        bits -= 1
    return bits


@numba.njit(cache=True, nogil=True, inline="always")
def _query_codes(q):  # pragma: no cover - compiled
    """``(g, t, e)``: int16 codes ``g`` and a power-of-two step ``t`` with ``q = t g + r``
    exactly (``t g_i`` and ``q_i - t g_i`` are exact in float64), and ``e >= ||r||``."""
    d = q.size
    peak = 0.0
    for i in range(d):
        peak = max(peak, abs(np.float64(q[i])))
    t = 1.0
    if peak > 0:
        t = math.ldexp(1.0, math.frexp(peak)[1] - _code_bits(d))  # |q_i| / t < 2**bits
    inv_t = 1.0 / t
    g = np.empty(d, dtype=np.int16)
    total = 0.0
    for i in range(d):
        gi = np.rint(np.float64(q[i]) * inv_t)  # exact: t is a power of two
        g[i] = np.int16(gi)
        r = np.float64(q[i]) - t * gi
        total += r * r
    return g, t, np.sqrt(total * (1.0 + (d + 2) * 2.0**-52))


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
def _block_bounds(g, t, q_norm, q_resid, codes, scale, bound, norm, w, w_at, lo, hi, dots, ub):
    """``ub[j - lo]`` for rows ``j`` in ``[lo, hi)`` (at most ``ub.size``): an upper bound of row
    ``j``'s fp32 score ``fl(fl(q . x_j) * w[j - w_at])`` from its int8 copy and the query's codes
    (quantized_scan's module docstring); NaN where the weight is inf and the bound 0."""
    for j in range(lo, hi):
        dots[j - lo] = _dot_codes(g, codes, j)
    for j in range(lo, hi):
        u = (
            t * np.float64(scale[j]) * np.float64(dots[j - lo])
            + q_norm * np.float64(bound[j])
            + q_resid * np.float64(norm[j])
        )
        wj = np.float64(w[j - w_at])
        ub[j - lo] = u * wj + 2.0**-23 * abs(u) * wj + 2.0**-149


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
def scan(q, codes, scale, bound, norm, w, lo, hi, kth, skip, out):  # pragma: no cover - compiled
    """Writes to ``out`` the rows ``j`` in ``[lo, hi)``, not in ``skip`` (sorted), whose upper
    bound of the fp32 score (quantized_scan's module docstring) exceeds ``kth``, ascending;
    returns how many."""
    q_norm = _query_norm_up(q)
    g, t, q_resid = _query_codes(q)
    dots = np.empty(_BLOCK, dtype=np.int32)
    ub = np.empty(_BLOCK, dtype=np.float64)
    count = 0
    s = np.searchsorted(skip, lo)
    for b0 in range(lo, hi, _BLOCK):
        b1 = min(hi, b0 + _BLOCK)
        _block_bounds(g, t, q_norm, q_resid, codes, scale, bound, norm, w, lo, b0, b1, dots, ub)
        for j in range(b0, b1):
            if ub[j - b0] <= kth:  # NaN (an inf weight times 0) stays: it is scored exactly
                continue
            s, skipped = _skip_to(skip, s, j)
            if skipped:  # already scored (an index candidate)
                continue
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
    norm,
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
    g, t, q_resid = _query_codes(q)
    dots = np.empty(_BLOCK, dtype=np.int32)
    ub = np.empty(_BLOCK, dtype=np.float64)
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
        for b0 in range(scanned, stop, _BLOCK):
            b1 = min(stop, b0 + _BLOCK)
            # Bounds against the k-th score as the block starts; it only rises within the block,
            # so each row is tested again against the current one: the row-by-row decisions.
            _block_bounds(g, t, q_norm, q_resid, codes, scale, bound, norm, w_sorted, 0, b0, b1, dots, ub)
            for j in range(b0, b1):
                if ub[j - b0] <= kth:
                    continue
                at_seen, skipped = _skip_to(seen, at_seen, j)
                if skipped:
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


@numba.njit(cache=True, nogil=True)
def query_codes_via(q):  # pragma: no cover - compiled
    """:func:`_query_codes` of ``q`` (a check)."""
    return _query_codes(q)


@numba.njit(cache=True, nogil=True)
def dot_codes_via(g, codes):  # pragma: no cover - compiled
    """``g . codes[j]`` for every row through the kernel's inner product (a check)."""
    out = np.empty(codes.shape[0], dtype=np.int64)
    for j in range(codes.shape[0]):
        out[j] = _dot_codes(g, codes, j)
    return out
