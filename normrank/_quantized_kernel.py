"""The numba kernel of :mod:`normrank.quantized_scan` (imported on first use: numba's import and
compilation are paid only by processes that scan; compiled code is cached on disk)."""

from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

__all__ = ["scan"]

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
@numba.njit(cache=True, nogil=True, fastmath={"reassoc", "contract", "nsz"})
def scan(q, codes, scale, bound, w, lo, hi, kth, skip, out):  # pragma: no cover - compiled
    """Writes to ``out`` the rows ``j`` in ``[lo, hi)``, not in ``skip`` (sorted), whose upper
    bound of the fp32 score (quantized_scan's module docstring) exceeds ``kth``, ascending;
    returns how many."""
    d = q.size
    q_norm = 0.0
    for i in range(d):
        q_norm += np.float64(q[i]) * np.float64(q[i])
    # float64 rounding of d squares summed (relative (d + 2) * 2**-53 at most), then the root.
    q_norm = np.sqrt(q_norm * (1.0 + (d + 2) * 2.0**-52))
    count = 0
    s = np.searchsorted(skip, lo)
    ahead = min(hi, lo + _AHEAD)
    for j in range(lo, hi):
        if ahead < hi:
            for c in range(0, d, 64):
                _prefetch(codes, ahead * d + c)
            ahead += 1
        while s < skip.size and skip[s] < j:
            s += 1
        if s < skip.size and skip[s] == j:  # already scored (an index candidate)
            continue
        acc = np.float32(0.0)
        for i in range(d):
            acc += q[i] * np.float32(codes[j, i])
        u = np.float64(acc) * np.float64(scale[j]) + q_norm * np.float64(bound[j])
        wj = np.float64(w[j - lo])
        ub = u * wj + 2.0**-23 * abs(u) * wj + 2.0**-149
        if not ub <= kth:  # NaN (an inf weight times 0) stays: it is scored exactly
            out[count] = j
            count += 1
    return count
