"""Streaming (Welford) moments of per-text displacement vectors.

Holds only a running mean ``(n, d)`` and a running sum of squared deviations ``(n,)``, so the
memory does not grow with the number of virtual steps M (never an ``M x n x d`` array).
"""

from __future__ import annotations

import numpy as np

__all__ = ["WelfordTrace"]


class WelfordTrace:
    """Running mean vector and covariance trace for ``n`` streams of ``d``-dimensional samples.

    Every row receives one sample per step (``update`` on any row slice, each row exactly once per
    step; rows updated in the same step share the step count). Accumulates in float64.
    """

    def __init__(self, n: int, d: int) -> None:
        self.mean = np.zeros((n, d), dtype=np.float64)
        self.m2 = np.zeros(n, dtype=np.float64)  # sum over samples of ||x - mean||^2 (trace form)
        self.count = np.zeros(n, dtype=np.int64)

    def update(self, rows: slice | np.ndarray, x: np.ndarray) -> None:
        """Add one sample ``x`` (shape ``(len(rows), d)``) to each of ``rows``."""
        x = np.asarray(x, dtype=np.float64)
        self.count[rows] += 1
        k = self.count[rows][:, None].astype(np.float64)
        delta = x - self.mean[rows]
        self.mean[rows] += delta / k
        # Welford: M2 += (x - mean_old) . (x - mean_new), summed over the d coordinates = trace.
        self.m2[rows] += np.einsum("ij,ij->i", delta, x - self.mean[rows])

    def trace_cov(self) -> np.ndarray:
        """Trace of the sample covariance with the unbiased 1/(M-1) factor (paper eq. H.3)."""
        return self.m2 / np.maximum(self.count - 1, 1)
