"""The one bound: can a document a search has not scored still beat the k-th score it holds?

Every backend stops on this question (NormIndex's weight-order scan, :mod:`normrank.search.ann`;
the Qdrant client and Edge; PostgreSQL's client scan, its band scored in SQL and its SQL
function, whose text :mod:`normrank.backends.pgvector_sql` writes from the constants here), so
that "the same method" stops at the same place, with one floating-point margin.

**The question.** A document ``d`` the search has not scored has (i) a cosine at most the
*trusted cosine* ``c_T``, as the cosine source computed it (the source returned its best
cosines: the trust every re-ranking of ANN output rests on; "exact" is relative to it), and
(ii) a weight in ``[min_weight, max_weight]``. Scored, it would get ``fl(c' * w)``, where
``c'`` is its cosine as the *scoring* kernel computes it: another summation order (BLAS, FAISS's
SIMD kernels, Qdrant's engine, pgvector) than the one that ranked it.

**The margin, and why it is enough.** With ``u = 2**-24`` (float32's unit roundoff):

1. A float32 dot product of length ``dim``, in any summation order, with or without FMA or a
   wider accumulator, is within ``gamma * sum |q_i x_i| <= gamma * |q| |x|`` of the exact one,
   ``gamma = dim u / (1 - dim u)`` (Higham, *Accuracy and Stability of Numerical Algorithms*,
   2nd ed., section 3.1). Queries are unit vectors up to their float32 rounding; stored rows
   are too, or rows decoded from FAISS's SQ / PQ codes, whose lengths stray from 1 by their
   quantisation error: the bound allows lengths up to :data:`ROW_LENGTH_MAX`. Two kernels'
   cosines of one pair therefore differ by at most :func:`cosine_slack` ``= 2 gamma (1 + gamma)
   ROW_LENGTH_MAX``, so ``c' <= c_T + cosine_slack(dim)``.
2. A score is one product rounded to float32 once (or computed wider, then rounded): ``fl(y) <=
   y + u |y|``. A weight computed by another engine in float32 (Qdrant's formula) adds one more
   ``u``; the float64 arithmetic of the weights, of this bound and of the band edges read off
   it (relative errors ~1e-13 at most) takes far less than the two ``u`` left over:
   :data:`SCORE_ROUNDING` ``= 4 u``.

So ``d`` can beat ``kth`` only if ``top + SCORE_ROUNDING * |top| > kth``, with ``top`` the
largest of ``(c_T + cosine_slack) * w`` over the weights (``max_weight`` when that cosine is
positive, ``min_weight`` otherwise): :func:`unseen_can_beat`. When it says no, stopping gives
exactly the answer a full scan would ("beat" is strictly above: every scan keeps only the
scores above the k-th). The margin costs little: at ``dim = 384`` it is 5.7e-5 in cosine, so a
scan reads up to a relative ~1e-4 further in weight than the bare ``c_T * w <= kth``.

:func:`weight_limit` and :func:`cosine_limit` are the same test solved for the weight (how far
a weight-order scan must read) and for the cosine (the Edge engine's score threshold);
:func:`cosine_ceiling` the cosine a float32 score can hide (the Qdrant backends read cosines
back from formula scores).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

__all__ = [
    "ROW_LENGTH_MAX",
    "SCORE_ROUNDING",
    "cosine_ceiling",
    "cosine_limit",
    "cosine_slack",
    "unseen_can_beat",
    "weight_limit",
]

# float32's unit roundoff.
_U = 2.0**-24

#: The longest row the cosine margin allows for: unit vectors up to their float32 rounding, and
#: rows decoded from FAISS's SQ / PQ codes, whose lengths differ from 1 by their quantisation
#: error (within a few percent for SQ8). Also the cosine bound of a document the cosine source
#: ranked nowhere (an IVF whose probed lists hold fewer than the trusted rank: no trusted cosine).
ROW_LENGTH_MAX = 1.25

#: Relative margin on a score: its float32 rounding (``u``), a weight computed in float32 by
#: another engine (``u``), and ``2 u`` for the float64 arithmetic of weights, bounds and edges.
SCORE_ROUNDING = 4 * _U


def cosine_slack(dim: int) -> float:
    """How far two float32 computations of one cosine of length-``dim`` vectors can disagree
    (any summation order): ``2 gamma (1 + gamma) ROW_LENGTH_MAX``, ``gamma = dim u / (1 - dim
    u)``. 5.7e-5 at ``dim = 384``."""
    gamma = dim * _U / (1.0 - dim * _U)
    return 2.0 * gamma * (1.0 + gamma) * ROW_LENGTH_MAX


def unseen_can_beat(
    kth: ArrayLike, trusted_cosine: ArrayLike, max_weight: ArrayLike, min_weight: ArrayLike, dim: int
) -> np.ndarray | np.bool_:
    """Whether a document not scored, of cosine at most ``trusted_cosine`` (as the cosine source
    computed it) and weight in ``[min_weight, max_weight]``, could score above ``kth`` once
    scored, float rounding included (the module docstring gives the argument). Scalars or
    arrays (broadcast); False means the search may stop: its top-k is exact."""
    c = np.add(trusted_cosine, cosine_slack(dim))
    # The largest c * w over the weights: at max_weight for c >= 0, at min_weight for c < 0.
    top = np.maximum(c * max_weight, c * min_weight)
    return top + SCORE_ROUNDING * np.abs(top) > kth


def weight_limit(kth: ArrayLike, trusted_cosine: ArrayLike, dim: int) -> ArrayLike:
    """:func:`unseen_can_beat` solved for the weight: where ``trusted_cosine + cosine_slack(dim)
    > 0``, an unseen document of weight ``w >= 0`` can beat ``kth`` exactly when ``w >`` this
    (``kth / ((c_T + slack) (1 + SCORE_ROUNDING))``; float64 rounding aside, within the spare
    ``u`` of the margin). Elsewhere it means nothing: the bound does not fall with the weight.
    Plain arithmetic (a scalar in, a scalar out: the single-query scan calls it per block)."""
    return kth / ((trusted_cosine + cosine_slack(dim)) * (1.0 + SCORE_ROUNDING))


def cosine_limit(kth: float, max_weight: float, dim: int) -> float:
    """:func:`unseen_can_beat` solved for the cosine, for ``kth > 0`` and ``max_weight > 0``: a
    document of weight at most ``max_weight`` whose cosine is below this cannot beat ``kth``
    (``kth / (max_weight (1 + SCORE_ROUNDING)) - cosine_slack(dim)``)."""
    return kth / (max_weight * (1.0 + SCORE_ROUNDING)) - cosine_slack(dim)


def cosine_ceiling(score: ArrayLike, weight: ArrayLike) -> np.ndarray:
    """The largest cosine a float32 score ``score = fl(c * w')`` can come from, where ``w'`` is
    ``weight`` as another engine computed it (within a float32 rounding): ``score / weight``
    raised by :data:`SCORE_ROUNDING` of itself. 1 where ``weight`` is 0 (an underflowed weight
    hides its cosine: the bound then trusts nothing below a perfect match)."""
    s = np.asarray(score, dtype=np.float64)
    w = np.asarray(weight, dtype=np.float64)
    c = np.divide(s, w, out=np.ones(np.broadcast(s, w).shape), where=w > 0)
    return c + SCORE_ROUNDING * np.abs(c)
