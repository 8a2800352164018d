"""Synthetic concepts in feature space, for the paper's Figure 2 and Table 1 in miniature.

A concept ``k`` has a *semantic centre* ``c_k`` (a random direction, ``N(0, I/d)``) and a
*spread* ``s_k``. Its anchor (the paper's artificial concept token) is the feature ``c_k``; each
of its positive contexts is ``c_k + s_k * e`` with ``e ~ N(0, I/d)`` (the paper's "diverse
sentence variations" of one meaning). A larger spread is a more ambiguous concept. Pairs are
(anchor of k, one context of k).

*Semantic content held fixed* (Table 1): every context of a target concept is drawn once, from
one seeded stream, and a dataset with ``rho`` contexts takes the first ``rho`` of them, so a
smaller ``rho`` sees a subset of the same meaning, never a different one; the background
concepts are identical across ``rho``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from normrank.errors import InvalidParameterError

__all__ = ["ConceptSet", "concepts", "frequency_sets"]


@dataclass
class ConceptSet:
    """Anchors (K, d), contexts (N, d), and pairs ``(ia[k], ib[k])`` into them (``ia`` = concept)."""

    anchors: np.ndarray
    contexts: np.ndarray
    ia: np.ndarray
    ib: np.ndarray
    spread: np.ndarray  # (K,)

    @property
    def n_pairs(self) -> int:
        return len(self.ia)


def _centres(n: int, dim: int, rng: np.random.Generator) -> np.ndarray:
    return (rng.standard_normal((n, dim)) / np.sqrt(dim)).astype(np.float32)


def concepts(
    n_concepts: int = 512,
    positives: int = 100,
    dim: int = 128,
    spread: tuple[float, float] = (0.3, 1.2),
    seed: int = 0,
) -> ConceptSet:
    """``n_concepts`` concepts with ``positives`` contexts each; spreads evenly spaced over ``spread``."""
    if n_concepts < 2 or positives < 1 or dim < 2:
        raise InvalidParameterError("need n_concepts >= 2, positives >= 1, dim >= 2")
    rng = np.random.default_rng(seed)
    c = _centres(n_concepts, dim, rng)
    s = np.linspace(spread[0], spread[1], n_concepts)[rng.permutation(n_concepts)].astype(np.float32)
    noise = rng.standard_normal((n_concepts, positives, dim)).astype(np.float32) / np.sqrt(dim)
    ctx = (c[:, None, :] + s[:, None, None] * noise).reshape(-1, dim)
    ia = np.repeat(np.arange(n_concepts), positives)
    return ConceptSet(c, ctx, ia, np.arange(len(ia)), s)


def frequency_sets(
    rhos: tuple[int, ...] = (5, 20, 100, 500, 2000),
    n_targets: int = 4,
    n_background: int = 252,
    background_positives: int = 100,
    dim: int = 128,
    spread: float = 0.75,
    seed: int = 0,
) -> dict[int, ConceptSet]:
    """One dataset per ``rho``: ``n_targets`` target concepts (anchors ``0..n_targets-1``) with
    ``rho`` contexts each (prefixes of one fixed stream, see the module docstring) beside the same
    ``n_background`` concepts of ``background_positives`` contexts each, all of spread ``spread``."""
    if min(rhos) < 1 or n_targets < 1 or n_background < 1:
        raise InvalidParameterError("need rho >= 1, n_targets >= 1, n_background >= 1")
    rng = np.random.default_rng(seed)
    k = n_targets + n_background
    c = _centres(k, dim, rng)
    rmax = max(rhos)
    target_noise = rng.standard_normal((n_targets, rmax, dim)).astype(np.float32) / np.sqrt(dim)
    bg_noise = rng.standard_normal((n_background, background_positives, dim)).astype(np.float32) / np.sqrt(
        dim
    )
    bg = (c[n_targets:, None, :] + spread * bg_noise).reshape(-1, dim)
    bg_ia = np.repeat(np.arange(n_targets, k), background_positives)
    out = {}
    for rho in rhos:
        tgt = (c[:n_targets, None, :] + spread * target_noise[:, :rho]).reshape(-1, dim)
        ctx = np.concatenate([tgt, bg])
        ia = np.concatenate([np.repeat(np.arange(n_targets), rho), bg_ia])
        out[rho] = ConceptSet(c, ctx, ia, np.arange(len(ia)), np.full(k, spread, dtype=np.float32))
    return out
