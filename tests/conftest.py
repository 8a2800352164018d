"""Shared fixtures: a reference implementation in plain numpy and the data location."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

DATA_ROOT = Path(
    os.environ.get("NORMRANK_DATA", Path(__file__).resolve().parents[1].parent / "shared" / "data" / "beir")
)


def brute_force(
    x: np.ndarray, q: np.ndarray, alpha, ids: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Full score matrix cos(q, d) * ||d||^alpha in float64, independent of normrank."""
    x = np.asarray(x, np.float64)
    q = np.asarray(q, np.float64)
    norms = np.linalg.norm(x, axis=1)
    cos = (q / np.linalg.norm(q, axis=1, keepdims=True)) @ (x / norms[:, None]).T
    a = np.asarray(alpha, np.float64)
    scores = cos * (norms[None, :] ** (a[:, None] if a.ndim else a))
    return scores, (np.arange(len(x)) if ids is None else np.asarray(ids))


def assert_same_topk(ref_scores: np.ndarray, ref_ids: np.ndarray, got_scores, got_ids, k: int, tol=1e-5):
    """Rankings agree up to ties: same scores position by position, and every returned id has
    a reference score equal to the one reported (as faiss contrib's check_ref_knn_with_draws)."""
    n = ref_scores.shape[1]
    order = np.argsort(-ref_scores, axis=1, kind="stable")[:, :k]
    want = np.take_along_axis(ref_scores, order, axis=1)
    kk = min(k, n)
    scale = np.maximum(1.0, np.abs(want[:, :kk]))
    np.testing.assert_array_less(np.abs(got_scores[:, :kk] - want[:, :kk]) / scale, tol)
    pos = {int(i): j for j, i in enumerate(ref_ids)}
    for row in range(ref_scores.shape[0]):
        for col in range(kk):
            gid = int(got_ids[row, col])
            assert gid in pos, f"row {row}: returned unknown id {gid}"
            ref = ref_scores[row, pos[gid]]
            assert abs(ref - got_scores[row, col]) <= tol * max(1.0, abs(ref)), (row, col, gid)
        assert len(set(got_ids[row, :kk].tolist())) == kk, f"row {row}: repeated ids"
    if k > n:
        assert (got_ids[:, n:] == -1).all() and np.isneginf(got_scores[:, n:]).all()


def clustered(
    n: int, d: int, rng: np.random.Generator, n_clusters: int = 32, sigma: float = 0.6
) -> np.ndarray:
    """Raw vectors with cluster structure and log-normal norms, like real embeddings."""
    centers = rng.normal(size=(n_clusters, d))
    x = centers[rng.integers(0, n_clusters, n)] + rng.normal(scale=0.7, size=(n, d))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return (x * rng.lognormal(0.0, sigma, size=(n, 1))).astype(np.float32)


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)
