"""The torch flat backend (``NormIndex(..., device=...)``) against the CPU path and numpy.

``device="cpu"`` runs the same torch code on the CPU (always, when torch is installed); the CUDA
tests skip cleanly without a GPU and never fall back to the CPU. Both sides are checked against
numpy's float64 scores up to float32 rounding and ties (torch's product and FAISS's BLAS round
differently, so equal ids would hold only where no two scores come within rounding).
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_same_topk, brute_force

from normrank import NormIndex
from normrank.errors import InvalidParameterError

torch = pytest.importorskip("torch")

CUDA = torch.cuda.is_available()
ALPHAS = [-1.5, -0.75, 0.0, 0.5, 1.0]


def data(n=3000, nq=40, d=48, seed=0):
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(12, d))
    x = centers[rng.integers(12, size=n)] + 0.8 * rng.normal(size=(n, d))
    x = x / np.linalg.norm(x, axis=1, keepdims=True) * rng.lognormal(0, 0.4, size=(n, 1))
    q = centers[rng.integers(12, size=nq)] + rng.normal(size=(nq, d))
    return x.astype(np.float32), q.astype(np.float32)


def check_same(device: str) -> None:
    x, q = data()
    ids = np.arange(x.shape[0], dtype=np.int64) * 5 + 2
    cpu, dev = NormIndex(x.shape[1]), NormIndex(x.shape[1], device=device)
    cpu.add(x, ids)
    dev.add(x, ids)
    alphas = np.linspace(-1.5, 1, q.shape[0])
    for a, k in [*((a, 10) for a in ALPHAS), (alphas, 7)]:  # per-query alpha: the same path
        ref_scores, ref_ids = brute_force(x, q, a, ids)
        for index in (cpu, dev):
            s, i = index.search(q, k, alpha=a)
            assert_same_topk(ref_scores, ref_ids, s, i, k)
    # Removal, and padding when k > n.
    dev.remove(ids[:2990])
    cpu.remove(ids[:2990])
    ref_scores, ref_ids = brute_force(x[2990:], q, -1.0, ids[2990:])
    for index in (cpu, dev):
        s, i = index.search(q, 15, alpha=-1.0)
        assert_same_topk(ref_scores, ref_ids, s, i, 15)
        assert (i[:, 10:] == -1).all() and np.isneginf(s[:, 10:]).all()


def test_torch_backend_on_cpu_matches_faiss_path():
    check_same("cpu")


def test_torch_kernel_matches_numpy():
    from normrank.search.torch_flat import weighted_flat_search

    x, q = data(n=5000, nq=30)
    u = x / np.linalg.norm(x, axis=1, keepdims=True)
    qu = q / np.linalg.norm(q, axis=1, keepdims=True)
    w = (np.linalg.norm(x, axis=1) ** -1.25).astype(np.float32)
    s, p = weighted_flat_search(torch.from_numpy(u), torch.from_numpy(w), qu, 10)
    ref = (qu.astype(np.float64) @ u.T.astype(np.float64)) * w
    assert_same_topk(ref, np.arange(len(u)), s, p, 10)


def test_unknown_device_is_refused():
    with pytest.raises(InvalidParameterError):
        NormIndex(8, device="no-such-device")


@pytest.mark.skipif(CUDA, reason="checks the refusal on machines without CUDA")
def test_cuda_without_gpu_refuses_instead_of_running_on_cpu():
    with pytest.raises(InvalidParameterError, match="CUDA"):
        NormIndex(8, device="cuda")


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs CUDA")
def test_cuda_matches_cpu():
    check_same("cuda")
    idx = NormIndex(8, device="cuda")
    idx.add(np.eye(8, dtype=np.float32) + 0.1)
    idx.search(np.ones((1, 8), np.float32), 3)
    assert idx._cache.device.vectors.is_cuda  # really on the GPU
