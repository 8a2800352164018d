"""Norm-aware scores as small pure functions (paper: "Optimization Dynamics Imprint Semantic
Specificity in Contrastive Embedding Norms", §4.3).

Each takes cosine similarities that were already computed (by FAISS, a matmul or another store)
and re-weights them; none of them searches.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from normrank.errors import InvalidInputError, InvalidParameterError
from normrank.validation import as_numbers

__all__ = ["WEIGHT_CAP", "norm_weight", "norm_weighted", "symmetric_score"]

# w**alpha saturates here, half float32's maximum: a score cos * w then never reaches -FLT_MAX,
# which FAISS's heaps use as "empty slot" (a document scoring exactly that would be dropped),
# nor overflows when a rounded cosine exceeds 1.
WEIGHT_CAP = float(np.finfo(np.float32).max) / 2


def _alpha_column(alpha: ArrayLike, n_rows: int | None) -> np.ndarray | float:
    """A scalar alpha stays a float; one alpha per query becomes a column for broadcasting."""
    a = as_numbers(alpha, "alpha", "a number or one number per query")
    if not np.all(np.isfinite(a)):
        raise InvalidParameterError(f"alpha must be finite, got {alpha!r}")
    if a.ndim == 0:
        return float(a)
    if a.ndim != 1 or n_rows is None or a.shape[0] != n_rows:
        raise InvalidParameterError(
            f"alpha must be a scalar or have one value per query ({n_rows}), got shape {a.shape}"
        )
    return a[:, None]


def _positive_norms(norms: ArrayLike, name: str) -> np.ndarray:
    """Norms as float64, each finite and > 0: a norm is a length, and ``0**alpha`` or
    ``(-x)**alpha`` has no meaning as a weight (inf, NaN, or a sign flip that reorders)."""
    d = as_numbers(norms, name, "norms (finite numbers > 0)")
    bad = ~(np.isfinite(d) & (d > 0))
    if bad.any():
        first = np.flatnonzero(bad.reshape(-1))[:5].tolist()
        raise InvalidInputError(
            f"{name} must be finite and > 0 (a vector's length); bad at positions {first}: "
            f"{d.reshape(-1)[first].tolist()}"
        )
    return d


def norm_weight(norms: ArrayLike, alpha: float) -> np.ndarray:
    """``norms ** alpha`` as float32, with ``alpha == 0`` giving exact ones; values beyond
    :data:`WEIGHT_CAP` (half the float32 maximum) saturate there instead of becoming inf, and
    tiny ones underflow to 0, so every score ``cos * w`` is finite and above FAISS's empty-slot
    sentinel -FLT_MAX: saturation makes ties, never an unreturnable document."""
    n = np.asarray(norms, dtype=np.float64)
    if alpha == 0:
        return np.ones(n.shape, dtype=np.float32)
    # Saturate rather than overflow to inf (inf * 0 would be NaN): only an absurd alpha for
    # these norms gets there, and it then ranks those documents as ties.
    with np.errstate(over="ignore", under="ignore"):
        w = np.power(n, alpha)
    return np.minimum(w, WEIGHT_CAP).astype(np.float32)


def norm_weighted(cos: ArrayLike, norms: ArrayLike, alpha: ArrayLike) -> np.ndarray:
    """Norm-weighted score ``cos(q, d) * ||d||**alpha``.

    Args:
        cos: cosine similarities, shape ``(n,)`` for one query or ``(nq, n)``.
        norms: raw document norms ``||d||``, shape ``(n,)``, all > 0.
        alpha: one exponent, or one per query (shape ``(nq,)``). ``alpha < 0`` discounts
            generic, high-norm documents; 0 is cosine; 1 is the raw dot product.

    Returns:
        float32 array of the shape of ``cos``.
    """
    c = np.asarray(cos, dtype=np.float32)
    d = _positive_norms(norms, "norms")
    a = _alpha_column(alpha, c.shape[0] if c.ndim == 2 else None)
    if np.isscalar(a):
        return (c * norm_weight(d, a)).astype(np.float32, copy=False)
    with np.errstate(over="ignore", under="ignore"):
        w = np.minimum(np.power(d[None, :], a), WEIGHT_CAP)
    return (c * w).astype(np.float32)


def symmetric_score(cos: ArrayLike, q_norms: ArrayLike, d_norms: ArrayLike, gamma: float) -> np.ndarray:
    """Symmetric calibration score ``cos * ||q||**-gamma * ||d||**-gamma`` (paper eq. 4.20).

    Args:
        cos: ``(nq, n)`` cosine similarities.
        q_norms: ``(nq,)`` query norms.
        d_norms: ``(n,)`` document norms.
        gamma: discount exponent; ``gamma > 0`` discounts high-norm inputs, 0 is cosine,
            -1 is the dot product.
    """
    g = as_numbers(gamma, "gamma")
    if g.ndim or not np.isfinite(g):
        raise InvalidParameterError(f"gamma must be one finite number, got {gamma!r}")
    g = float(g)
    c = np.asarray(cos, dtype=np.float32)
    qn = _positive_norms(q_norms, "q_norms")
    dn = _positive_norms(d_norms, "d_norms")
    if c.ndim == 2:
        qn = qn[:, None]
    return (c * np.power(qn, -g) * np.power(dn, -g)).astype(np.float32)
