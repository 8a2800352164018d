"""Detecting embeddings that were normalised before they reached normrank.

With unit vectors every ``||d||`` is 1, so ``alpha`` cannot change the ranking. Most embedding
wrappers normalise by default, so the adapters warn once when everything added so far is unit
length, and say how to get raw embeddings.
"""

from __future__ import annotations

import warnings

import numpy as np

__all__ = ["UNIT_NORM_TOL", "UnitNormWarning", "all_unit", "warn_unit_norms"]

UNIT_NORM_TOL = 1e-3


class UnitNormWarning(UserWarning):
    """All vectors added so far have norm ≈ 1, so the norm exponent cannot change the ranking."""


def all_unit(norms: np.ndarray) -> bool:
    """True when there are norms and every one is within :data:`UNIT_NORM_TOL` of 1."""
    return bool(norms.size) and bool(np.all(np.abs(norms - 1.0) <= UNIT_NORM_TOL))


def warn_unit_norms(exponent: str, raw_embeddings_hint: str, stacklevel: int = 3) -> None:
    """Emit :class:`UnitNormWarning`; the caller decides that it is the first time."""
    warnings.warn(
        f"all vectors added to this normrank store have norm ≈ 1 (within {UNIT_NORM_TOL:g}): they "
        f"were normalised already, so {exponent} has no effect and the ranking is plain cosine. "
        f"Use raw (unnormalised) embeddings: {raw_embeddings_hint}",
        UnitNormWarning,
        stacklevel=stacklevel,
    )
