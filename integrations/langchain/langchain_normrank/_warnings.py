"""The warning raised when every added vector has unit length (alpha then has no effect)."""

from __future__ import annotations

import warnings

import numpy as np

UNIT_NORM_TOL = 1e-3


class UnitNormWarning(UserWarning):
    """All vectors added so far have norm ≈ 1, so the exponent alpha cannot change the ranking."""


_MESSAGE = (
    "all vectors added to this normrank store have norm ≈ 1 (within {tol:g}): the embeddings are "
    "already normalised, so alpha has no effect and the ranking is plain cosine. Use raw "
    "(unnormalised) embeddings: wrap a normrank encoder with "
    "langchain_normrank.NormRankEmbeddings('<model name or path>'), or turn normalisation off "
    "(e.g. HuggingFaceEmbeddings(encode_kwargs={{'normalize_embeddings': False}}) and a model "
    "without a Normalize module)."
)


def all_unit(norms: np.ndarray) -> bool:
    """True when every norm is within :data:`UNIT_NORM_TOL` of 1."""
    return bool(norms.size) and bool(np.all(np.abs(norms - 1.0) <= UNIT_NORM_TOL))


def warn_unit_norms(stacklevel: int = 3) -> None:
    """Emit :class:`UnitNormWarning` (the caller decides that it is the first time)."""
    warnings.warn(_MESSAGE.format(tol=UNIT_NORM_TOL), UnitNormWarning, stacklevel=stacklevel)
