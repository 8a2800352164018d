"""The one bound (:mod:`normrank.search.bound`, issue 47 item 2): its margin covers what float
rounding can do to an unseen document's score, and its three forms (the test, solved for the
weight, solved for the cosine) agree."""

from __future__ import annotations

import faiss
import numpy as np

from normrank.search.bound import (
    SCORE_ROUNDING,
    cosine_ceiling,
    cosine_limit,
    cosine_slack,
    unseen_can_beat,
    weight_limit,
)


def _unit(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    x = rng.normal(size=(n, d))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def test_cosine_slack_covers_what_kernels_disagree_by():
    """Cosines of one pair computed by FAISS's kernel, BLAS (numpy float32), and a plain
    sequential float32 sum differ from each other, and from the exact value, by less than the
    slack; the slack grows with the length."""
    rng = np.random.default_rng(47)
    for d in (8, 384, 1536):
        q, x = _unit(rng, 4, d), _unit(rng, 300, d)
        exact = q.astype(np.float64) @ x.astype(np.float64).T
        blas = q @ x.T
        index = faiss.IndexFlatIP(d)
        index.add(x)
        fs, fi = index.search(q, x.shape[0])
        by_faiss = np.empty_like(blas)
        np.put_along_axis(by_faiss, fi, fs, axis=1)
        sequential = np.zeros_like(blas)
        for i in range(d):  # one float32 rounding per term, in index order
            sequential += q[:, i : i + 1] * x[:, i][None, :]
        kernels = (blas, by_faiss, sequential)
        worst = max(float(np.abs(a.astype(np.float64) - b).max()) for a in kernels for b in (*kernels, exact))
        assert 0 < worst < cosine_slack(d), (d, worst)
    assert cosine_slack(8) < cosine_slack(384) < cosine_slack(1536)


def test_a_cosine_one_float32_step_above_the_trusted_one_can_beat():
    """A k-th score equal to the trusted cosine times the weight does not stop the search: a
    document whose cosine another kernel computes one float32 step higher scores above it (the
    bare bound ``c_T * w <= kth``, FAISS's before issue 47, stopped here)."""
    rng = np.random.default_rng(1)
    c = rng.uniform(0.05, 0.99, 500).astype(np.float32)
    w = rng.lognormal(0, 1, 500).astype(np.float32)
    kth = c * w  # float32, as scores are
    above = np.nextafter(c, np.float32(2)) * w
    beats = above > kth
    assert beats.any()
    assert unseen_can_beat(kth.astype(np.float64), c, w, w, 384)[beats].all()


def test_when_the_bound_says_no_no_float32_score_beats():
    """For trusted cosines and weights of both signs and sizes, with ``kth`` the smallest float32
    the bound clears: every float32 score of a cosine up to the trusted one plus the slack, at
    any weight in range, stays at or below ``kth``."""
    rng = np.random.default_rng(2)
    dim = 64
    slack = cosine_slack(dim)
    for _ in range(2000):
        c = float(np.float32(rng.uniform(-1, 1)))
        w_min, w_max = sorted(np.float32(rng.lognormal(0, 2, 2)).tolist())
        top = max((c + slack) * w_max, (c + slack) * w_min)
        kth = np.float32(top + SCORE_ROUNDING * abs(top))
        while unseen_can_beat(float(kth), c, w_max, w_min, dim):
            kth = np.nextafter(kth, np.float32(np.inf))
        for cos in (c, c + slack):
            for w in (w_min, w_max):
                assert np.float32(cos) * np.float32(w) <= kth, (c, w, kth)


def test_weight_and_cosine_limits_are_the_bound_solved():
    """``weight_limit`` is where ``unseen_can_beat`` turns true along the weight, ``cosine_limit``
    along the cosine (compared a float64 ulp or two either side)."""
    rng = np.random.default_rng(3)
    dim = 384
    kth = np.concatenate([rng.uniform(0.01, 5, 300), rng.uniform(-5, 0, 100)])
    c = np.concatenate([rng.uniform(-0.5, 1, 300), rng.uniform(0.01, 1, 100)])
    up = c + cosine_slack(dim) > 0
    limit = weight_limit(kth[up], c[up], dim)
    near = 1e-12 * np.abs(limit) + 1e-300
    below, above = limit - near, np.maximum(limit + near, 0)
    safe = limit > 0  # a negative k-th score: every weight >= 0 can beat it, even 0
    assert not unseen_can_beat(kth[up][safe], c[up][safe], below[safe], below[safe], dim).any()
    assert unseen_can_beat(kth[up], c[up], above, above, dim).all()
    for k_th, w_max in zip(kth[:300], rng.lognormal(0, 1, 300), strict=True):
        cos = cosine_limit(k_th, w_max, dim)
        assert not unseen_can_beat(k_th, cos - 1e-12, w_max, 0.0, dim)
        assert unseen_can_beat(k_th, cos + 1e-12, w_max, 0.0, dim)


def test_cosine_ceiling_is_above_the_cosine_behind_a_float32_score():
    """A float32 score ``fl(c * w')``, ``w'`` the weight one float32 step off (another engine's
    power), never hides a cosine above the ceiling; an underflowed weight hides everything."""
    rng = np.random.default_rng(4)
    c = rng.uniform(-1, 1, 5000)
    w = rng.lognormal(0, 3, 5000)
    for w_engine in (
        np.float32(w),
        np.nextafter(np.float32(w), np.float32(0)),
        np.nextafter(np.float32(w), np.float32(np.inf)),
    ):
        score = np.float32(np.float32(c) * w_engine)
        assert (np.float32(c) <= cosine_ceiling(score, w)).all()
    assert cosine_ceiling(np.array([0.5]), np.array([0.0]))[0] >= 1
