"""normrank.scoring against closed forms computed in float64."""

from __future__ import annotations

import numpy as np
import pytest

from normrank.errors import InvalidParameterError
from normrank.scoring import WEIGHT_CAP, norm_weight, norm_weighted, symmetric_score

F32_MAX = float(np.finfo(np.float32).max)


def test_norm_weighted_closed_form():
    rng = np.random.default_rng(0)
    cos = rng.uniform(-1, 1, size=(3, 20))
    norms = rng.lognormal(size=20)
    for alpha in (-1.5, 0.0, 0.5, 1.0):
        np.testing.assert_allclose(norm_weighted(cos, norms, alpha), cos * norms**alpha, rtol=1e-5)
    per_query = np.array([-1.0, 0.0, 2.0])
    np.testing.assert_allclose(
        norm_weighted(cos, norms, per_query), cos * norms[None] ** per_query[:, None], rtol=1e-5
    )


def test_alpha_zero_is_exact_cosine():
    assert norm_weight(np.array([1e-30, 1e30]), 0.0).tolist() == [1.0, 1.0]


@pytest.mark.parametrize("alpha", [-16.0, -2.0, -0.5, 0.5, 2.0, 16.0])
def test_powers_at_the_float32_ends_saturate_below_the_sentinel(alpha):
    """Every stored norm (float32 normal range) raised to any alpha in [-16, 16]: finite, >= 0, at
    most WEIGHT_CAP, so cos * w stays above -FLT_MAX (FAISS's empty-slot value) even at cos = -1."""
    norms = np.array([np.finfo(np.float32).tiny, 1e-25, 1e-10, 1.0, 1e10, 1e20, F32_MAX], np.float32)
    w = norm_weight(norms, alpha)
    assert np.isfinite(w).all() and (w >= 0).all() and (w <= WEIGHT_CAP).all()
    scores = norm_weighted(np.array([[-1.0] * norms.size, [1.0] * norms.size]), norms, alpha)
    assert np.isfinite(scores).all() and (scores > -F32_MAX).all()
    with np.errstate(over="ignore"):
        exact = np.minimum(norms.astype(np.float64) ** alpha, WEIGHT_CAP)
    np.testing.assert_allclose(w, exact.astype(np.float32), rtol=1e-6)


def test_per_query_alpha_saturates_too():
    norms = np.array([1e20, 1.0])
    out = norm_weighted(np.array([[-1.0, 1.0], [1.0, 1.0]]), norms, np.array([2.0, 16.0]))
    assert np.isfinite(out).all() and (out > -F32_MAX).all()


def test_symmetric_score_closed_form():
    cos = np.array([[0.5, -0.2]])
    out = symmetric_score(cos, np.array([2.0]), np.array([4.0, 0.5]), 0.5)
    np.testing.assert_allclose(out, cos * 2.0**-0.5 * np.array([4.0, 0.5]) ** -0.5, rtol=1e-6)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_exponents_are_refused(bad):
    with pytest.raises(InvalidParameterError):
        norm_weighted([0.5], [1.0], bad)
    with pytest.raises(InvalidParameterError):
        symmetric_score([[0.5]], [1.0], [1.0], bad)
