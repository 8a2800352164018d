"""Is the specific answer's norm smaller than the general one's? The paper's Table 5 statistics
(Appendix D) with the controls for length beside them.

For pairs i = 1..n with raw embeddings of a question q, a specific answer s and a general answer
g (repeated or not, as the caller encoded it):

- ``Δ_i = ||s_i|| - ||g_i||``; ``z = sqrt(n) · mean(Δ) / sd(Δ)`` (sd with n - 1; the paired
  z of Table 5, the one-sample t statistic); ``%Norm↓`` = share of Δ_i < 0;
  ``%Cos↓`` = share of cos(q, s) < cos(q, g);
- ``p``: two-sided sign-flip permutation p of mean(Δ) (exact over all 2^n sign vectors when
  ``2^n <= permutations``, else ``(1 + #{|mean flipped| >= |mean|}) / (K + 1)``);
- **matched**: the same on the pairs whose two texts' token counts are within ``tolerance``
  (10%) of each other;
- **residual**: ``log ||x|| = a + b log tokens`` fitted by least squares over both answers of
  every pair (:func:`normrank.sweep.controls.length_residual`), Δ taken between the residuals:
  the part of the norm gap that length does not predict.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from normrank.errors import InvalidInputError, InvalidParameterError
from normrank.sweep.controls import length_residual

__all__ = ["matched_mask", "pair_statistics", "paired_z", "sign_flip_p", "specificity_table"]


def paired_z(delta: np.ndarray) -> float:
    """``sqrt(n) · mean(Δ) / sd(Δ)`` (sd with n - 1); 0 when every Δ is equal to 0, ±inf when
    every Δ is the same non-zero value."""
    d = np.asarray(delta, dtype=np.float64)
    if d.size < 2:
        raise InvalidInputError(f"need at least 2 pairs, got {d.size}")
    m, sd = float(d.mean()), float(d.std(ddof=1))
    if sd == 0.0:
        return 0.0 if m == 0.0 else float(np.copysign(np.inf, m))
    return float(np.sqrt(d.size) * m / sd)


def sign_flip_p(delta: np.ndarray, permutations: int = 9999, seed: int = 0) -> float:
    """Two-sided sign-flip permutation p of mean(Δ): exact when ``2^n <= permutations``."""
    d = np.asarray(delta, dtype=np.float64)
    if d.size < 1:
        raise InvalidInputError("no pairs")
    if permutations < 1:
        raise InvalidParameterError(f"permutations must be >= 1, got {permutations}")
    real = abs(d.mean())
    tol = 1e-12 * max(1.0, float(np.abs(d).max()))  # a flip that gives the same mean counts
    if d.size <= 20 and 2**d.size <= permutations:
        signs = 1 - 2 * ((np.arange(2**d.size)[:, None] >> np.arange(d.size)) & 1)
        return float(np.mean(np.abs(signs @ d / d.size) >= real - tol))
    rng = np.random.default_rng(seed)
    hits, left = 0, permutations
    while left:  # in chunks: K x n signs at once would not fit for large n
        k = min(left, max(1, 2_000_000 // d.size))
        signs = rng.integers(0, 2, size=(k, d.size), dtype=np.int8) * 2 - 1
        hits += int(np.count_nonzero(np.abs(signs @ d / d.size) >= real - tol))
        left -= k
    return (1 + hits) / (permutations + 1)


def matched_mask(len_a: np.ndarray, len_b: np.ndarray, tolerance: float = 0.1) -> np.ndarray:
    """Pairs whose lengths differ by at most ``tolerance`` of the longer one."""
    a, b = np.asarray(len_a, dtype=np.float64), np.asarray(len_b, dtype=np.float64)
    return np.abs(a - b) <= tolerance * np.maximum(a, b)


def _cos(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def pair_statistics(
    delta: np.ndarray, cos_down: np.ndarray, permutations: int = 9999, seed: int = 0
) -> dict[str, Any]:
    """``{"n", "z", "mean_delta", "pct_norm_down", "pct_cos_down", "p"}`` of one set of pairs
    (None in every field but n when there are fewer than 2)."""
    d = np.asarray(delta, dtype=np.float64)
    if d.size < 2:
        return {"n": int(d.size), "z": None, "mean_delta": None, "pct_norm_down": None,
                "pct_cos_down": None, "p": None}  # fmt: skip
    return {
        "n": int(d.size),
        "z": paired_z(d),
        "mean_delta": float(d.mean()),
        "pct_norm_down": 100.0 * float(np.mean(d < 0)),
        "pct_cos_down": 100.0 * float(np.mean(np.asarray(cos_down, dtype=bool))),
        "p": sign_flip_p(d, permutations, seed),
    }


def specificity_table(
    q: np.ndarray,
    s: np.ndarray,
    g: np.ndarray,
    len_s: np.ndarray,
    len_g: np.ndarray,
    *,
    tolerance: float = 0.1,
    permutations: int = 9999,
    seed: int = 0,
) -> dict[str, Any]:
    """The Table 5 statistics of one protocol and their length controls.

    Args:
        q, s, g: raw (n, d) embeddings of the questions, specific and general answers (``g`` as
            encoded: repeated for the paper's protocol).
        len_s, len_g: token counts of the encoded specific and general texts.
    Returns:
        ``{"all", "matched", "residual"}`` (each :func:`pair_statistics`), ``"fit"`` (the
        log-norm on log-length fit) and ``"tokens"`` (median token counts).
    """
    q, s, g = (np.asarray(x, dtype=np.float64) for x in (q, s, g))
    if not (q.shape == s.shape == g.shape) or q.ndim != 2:
        raise InvalidInputError(f"q, s, g must be (n, d) of one shape, got {q.shape}, {s.shape}, {g.shape}")
    len_s, len_g = np.asarray(len_s, dtype=np.float64), np.asarray(len_g, dtype=np.float64)
    if len_s.shape != (len(q),) or len_g.shape != (len(q),):
        raise InvalidInputError(f"lengths must have {len(q)} entries")
    ns, ng = np.linalg.norm(s, axis=1), np.linalg.norm(g, axis=1)
    delta = ns - ng
    cos_down = _cos(q, s) < _cos(q, g)
    resid, fit = length_residual(np.r_[ns, ng], np.r_[len_s, len_g])
    rdelta = np.log(resid[: len(q)]) - np.log(resid[len(q) :])  # in log units: both sides scaled
    rdelta[np.abs(rdelta) < 1e-12] = 0.0  # the fit's rounding, not a gap: z would blow it up
    m = matched_mask(len_s, len_g, tolerance)
    return {
        "all": pair_statistics(delta, cos_down, permutations, seed),
        "matched": pair_statistics(delta[m], cos_down[m], permutations, seed),
        "residual": pair_statistics(rdelta, cos_down, permutations, seed),
        "fit": fit,
        "tokens": {
            "specific_median": float(np.median(len_s)),
            "general_median": float(np.median(len_g)),
            "mean_log_ratio": float(np.mean(np.log(len_s / len_g))),
        },
    }
