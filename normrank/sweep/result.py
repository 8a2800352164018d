"""The result of one sweep (:class:`SweepRun`) and its pinned ``sweep.json`` entry."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from normrank.settings import CV_METRIC
from normrank.sweep.selection import argbest

__all__ = ["SweepRun", "pct", "summary_stats"]


def pct(new: float, base: float) -> float:
    """Relative change in percent (0 when the base is 0)."""
    return float(100.0 * (new - base) / base) if base else 0.0


def summary_stats(x: np.ndarray) -> dict[str, float]:
    """``{"mean", "std", "cv"}`` (cv = std / mean)."""
    mean, std = float(np.mean(x)), float(np.std(x))
    return {"mean": mean, "std": std, "cv": std / mean if mean else float("nan")}


@dataclass
class SweepRun:
    """One (dataset, model, weight) sweep. Arrays are indexed [alpha, query]."""

    dataset: str
    model: str
    n_docs: int
    alphas: list[float]
    query_ids: list[str]
    per_query: dict[str, np.ndarray]  # metric -> (n_alphas, n_queries)
    cv_alphas: list[float]
    cv_fold: np.ndarray  # (n_queries,) fold of each query
    cv_per_query: np.ndarray  # (n_queries,) held-out NDCG@10
    p_value: float
    norm_stats: dict[str, float]
    weight: str = "norm"
    weight_stats: dict[str, float] | None = None
    by_depth: dict[str, Any] | None = None
    depth_gradient: dict[str, Any] | None = None  # does the chosen α's gain grow with depth?
    timing: dict[str, float] = field(default_factory=dict)
    ranx_check: dict[str, float] = field(default_factory=dict)
    controls: dict[str, Any] | None = None  # length prior, residual norm, permutation null

    @property
    def n_queries(self) -> int:
        return len(self.query_ids)

    def mean(self, metric: str) -> np.ndarray:
        return self.per_query[metric].mean(axis=1)

    @property
    def i0(self) -> int:
        return self.alphas.index(0.0)

    @property
    def best_index(self) -> int:
        return argbest(self.mean(CV_METRIC), self.alphas)

    @property
    def best_alpha(self) -> float:
        return self.alphas[self.best_index]

    def gain_pct(self, metric: str = CV_METRIC) -> float:
        m = self.mean(metric)
        return pct(m[self.best_index], m[self.i0])

    @property
    def cv_mean(self) -> float:
        return float(self.cv_per_query.mean()) if self.cv_per_query.size else 0.0

    @property
    def cv_gain_pct(self) -> float:
        return pct(self.cv_mean, self.mean(CV_METRIC)[self.i0])

    def to_dict(self) -> dict[str, Any]:
        """The pinned ``sweep.json`` run entry (plus a few extra keys)."""
        metrics = {m: [float(x) for x in self.mean(m)] for m in self.per_query}
        return {
            "dataset": self.dataset,
            "model": self.model,
            "weight": self.weight,
            "n_docs": int(self.n_docs),
            "n_queries": int(self.n_queries),
            "alphas": [float(a) for a in self.alphas],
            "metrics": metrics,
            "relative": {
                m: [v / vals[self.i0] if vals[self.i0] else None for v in vals] for m, vals in metrics.items()
            },
            "best_alpha": float(self.best_alpha),
            "best_gain_pct": float(self.gain_pct()),
            "cv": {
                "alphas": [float(a) for a in self.cv_alphas],
                CV_METRIC: float(self.cv_mean),
                "gain_pct": float(self.cv_gain_pct),
                "p_value": float(self.p_value),
                "folds": len(self.cv_alphas),
            },
            "norm_stats": self.norm_stats,
            **({"weight_stats": self.weight_stats} if self.weight_stats else {}),
            **({"depth": {**self.by_depth, "gradient": self.depth_gradient}} if self.by_depth else {}),
            "timing_s": {k: round(v, 4) for k, v in self.timing.items()},
            "ranx_check": self.ranx_check,
            **({"controls": _public(self.controls)} if self.controls else {}),
        }


def _public(x: Any) -> Any:
    """``x`` without the keys that start with ``_`` (per-query arrays kept for reports and tests)."""
    if isinstance(x, dict):
        return {k: _public(v) for k, v in x.items() if not k.startswith("_")}
    return x
