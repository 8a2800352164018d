"""NDCG@10 per α within each query-depth bucket (the paper's Table 3 layout)."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from normrank.corpus.beir import Dataset, depth_bucket
from normrank.settings import CV_METRIC
from normrank.sweep.result import SweepRun, pct
from normrank.sweep.selection import argbest

__all__ = ["depth_table"]

log = logging.getLogger(__name__)


def depth_table(dataset: Dataset, run: SweepRun) -> dict[str, Any] | None:
    """NDCG@10 per α within each query-depth bucket (the paper's Table 3 layout), or None."""
    if not dataset.has_heading_paths():
        log.info("%s: query ids carry no heading path; --by-depth skipped", dataset.name)
        return None
    buckets = np.array([depth_bucket(dataset.query_depth(q)) for q in run.query_ids])
    out: dict[str, Any] = {}
    nd = run.per_query[CV_METRIC]
    for b in sorted(set(buckets)):
        sel = buckets == b
        means = nd[:, sel].mean(axis=1)
        bi = argbest(means, run.alphas)
        out[b] = {
            "n_queries": int(sel.sum()),
            CV_METRIC: [float(x) for x in means],
            "best_alpha": float(run.alphas[bi]),
            "gain_pct": pct(means[bi], means[run.i0]),
        }
    return out
