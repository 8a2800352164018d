"""Maximal marginal relevance with a norm-aware relevance score.

Relevance is whatever the caller ranks by (here ``cos(q, d) * ||d||**alpha``); redundancy is the
cosine between documents, since two documents say the same thing whatever their lengths.
At ``alpha = 0`` this is the usual cosine MMR (Carbonell & Goldstein, SIGIR 1998).
"""

from __future__ import annotations

import numpy as np

__all__ = ["maximal_marginal_relevance"]


def maximal_marginal_relevance(
    relevance: np.ndarray, vectors: np.ndarray, lambda_mult: float, k: int
) -> list[int]:
    """Greedy MMR: positions of up to ``k`` rows of ``vectors`` (n, d), most relevant first,
    each next one maximising ``lambda_mult * relevance - (1 - lambda_mult) * max cosine`` to
    those already chosen."""
    if len(relevance) == 0 or k < 1:
        return []
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    sim = unit @ unit.T
    chosen = [int(np.argmax(relevance))]
    redundancy = sim[chosen[0]].copy()
    while len(chosen) < min(k, len(relevance)):
        value = lambda_mult * relevance - (1.0 - lambda_mult) * redundancy
        value[chosen] = -np.inf
        nxt = int(np.argmax(value))
        chosen.append(nxt)
        redundancy = np.maximum(redundancy, sim[nxt])
    return chosen
