"""Exact norm-weighted flat search in torch, on any torch device (GPU or CPU).

Same name and shapes as :func:`normrank.search.flat.weighted_flat_search`; the documents are moved to
the device once (:class:`TorchFlatStore`) and the kernel streams query/document blocks through
one matmul, one in-place multiply by the weights and ``torch.topk``.

Results agree with the CPU path id for id wherever scores are distinct (``tests/test_gpu.py``
checks this on continuous data, CPU and CUDA); among exactly equal scores ``torch.topk`` may
keep or order them differently, as FAISS's GPU and CPU indexes do.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from normrank.errors import InvalidParameterError, MissingDependencyError
from normrank.settings import WEIGHT_CACHE_ENTRIES

__all__ = ["TorchFlatStore", "resolve_device", "weighted_flat_search"]

# Scores held at once (queries x documents block), as in the CPU kernel: bounded memory.
_BLOCK_ELEMENTS = 1 << 24
_QUERY_BLOCK = 4096


def _torch() -> Any:
    try:
        import torch
    except ImportError as e:
        raise MissingDependencyError(
            "device= search needs torch: pip install 'normrank[gpu]' (torch==2.13.0 first)"
        ) from e
    return torch


def resolve_device(device: str) -> Any:
    """``device`` as a ``torch.device``; refuses CUDA when it is not available (never falls back)."""
    torch = _torch()
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise InvalidParameterError(f"unknown torch device {device!r}: {e}") from e
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise InvalidParameterError(f"device={device!r} but torch sees no CUDA device")
    return dev


class TorchFlatStore:
    """Unit vectors ``(n, d)`` resident on ``device`` (copied once, refreshed on change)."""

    def __init__(self, unit_vectors: np.ndarray, device: str) -> None:
        torch = _torch()
        self.device = resolve_device(device)
        self.vectors = torch.from_numpy(np.ascontiguousarray(unit_vectors, dtype=np.float32)).to(self.device)
        self._weights: dict[float, Any] = {}

    def weights_on_device(self, key: float, weights: np.ndarray | None) -> Any:
        if weights is None:
            return None
        w = self._weights.get(key)
        if w is None:
            if len(self._weights) >= WEIGHT_CACHE_ENTRIES:
                self._weights.pop(next(iter(self._weights)))
            torch = _torch()
            w = self._weights[key] = torch.from_numpy(np.ascontiguousarray(weights, np.float32)).to(
                self.device
            )
        return w


def weighted_flat_search(
    unit_vectors: Any,
    weights: Any,
    queries: np.ndarray,
    k: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-k of ``(q . u_j) * weights[j]``; the torch twin of the CPU kernel.

    Args:
        unit_vectors: ``(n, d)`` float32 torch tensor on the target device (or a numpy array,
            searched on the CPU through torch).
        weights: ``(n,)`` float32 tensor/array on the same device, or None for cosine.
        queries: ``(nq, d)`` float32 unit queries (numpy).
        k: results per query.

    Returns:
        ``(scores, positions)`` numpy float32 / int64 ``(nq, k)``, best first, padded with
        ``-inf`` / ``-1`` when ``n < k`` (FAISS convention).
    """
    torch = _torch()
    docs = torch.as_tensor(unit_vectors)
    dev = docs.device
    w = None if weights is None else torch.as_tensor(weights, device=dev)
    n = docs.shape[0]
    nq = queries.shape[0]
    out_s = np.full((nq, k), -np.inf, dtype=np.float32)
    out_p = np.full((nq, k), -1, dtype=np.int64)
    kk = min(k, n)
    if kk == 0 or nq == 0:
        return out_s, out_p
    q_all = torch.from_numpy(np.ascontiguousarray(queries, dtype=np.float32)).to(dev)
    with torch.no_grad():
        for q0 in range(0, nq, _QUERY_BLOCK):
            q = q_all[q0 : q0 + _QUERY_BLOCK]
            block = max(kk, 4096, _BLOCK_ELEMENTS // q.shape[0])
            best_s = best_p = None
            for j0 in range(0, n, block):
                s = q @ docs[j0 : j0 + block].T
                if w is not None:
                    s.mul_(w[j0 : j0 + block])
                bs, bp = torch.topk(s, min(kk, s.shape[1]), dim=1)
                bp = bp + j0
                if best_s is not None:
                    bs, sel = torch.topk(torch.cat([best_s, bs], 1), kk, dim=1)
                    bp = torch.gather(torch.cat([best_p, bp], 1), 1, sel)
                best_s, best_p = bs, bp
            out_s[q0 : q0 + q.shape[0], :kk] = best_s.cpu().numpy()
            out_p[q0 : q0 + q.shape[0], :kk] = best_p.cpu().numpy()
    return out_s, out_p
