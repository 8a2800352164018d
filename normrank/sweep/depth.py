"""The sweep per query-depth bucket (the paper's Appendix C, Table 3), with the BEIR sweep's honesty.

Per bucket (``d=1`` page, ``d=2``, ``d=3``, ``d=4+``; :func:`normrank.corpus.beir.depth_bucket`):

- the oracle α and its gain (chosen on the bucket's queries, as the paper's Table 3);
- the cross-validated gain and its paired p-value: α chosen on the other folds *of the bucket's
  queries* and scored on the held-out fold (the honest counterpart of the bucket's oracle α),
  plus ``global_cv_gain_pct`` / ``global_p_value``: the run's own CV α (chosen over all depths)
  scored on this bucket;
- the controls, each selected the same way within the bucket: the length prior ``len^β``, the
  length-residualised norm, and the permutation null (the run's shuffled norms, each through the
  same within-bucket CV; p = (1 + #{shuffled gain >= real}) / (K + 1)).

The depth gradient (:func:`depth_gradient`): does the per-query gain of the chosen (cross-
validated) α over cosine grow with depth? Spearman's ρ between depth (1..4, 4 = 4+) and that gain,
with a two-sided permutation p (depths shuffled over queries); the same statistic for the length
prior's and the residual norm's gains, and against the shuffled norms (ρ of each shuffle's gain).
A gradient *survives the controls* (:func:`gradient_survives`) only if it is significant, beats the
shuffled norms, and the residual norm shows it too (significant, same sign).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from normrank.corpus.beir import Dataset, depth_bucket
from normrank.settings import CV_METRIC, DEFAULT_FOLDS, DEFAULT_SEED
from normrank.sweep.controls import average_ranks, permutation_summary, spearman, weight_control
from normrank.sweep.result import SweepRun, pct
from normrank.sweep.selection import argbest, cross_validate, cv_choose_many, median, paired_t_p

__all__ = [
    "GRADIENT_PERMUTATIONS",
    "SURVIVAL_LEVEL",
    "depth_gradient",
    "depth_table",
    "gradient_survives",
    "query_depths",
    "rank_gradient",
]

GRADIENT_PERMUTATIONS = 999  # depth shuffles for the gradient's permutation p
SURVIVAL_LEVEL = 0.05  # each of the three tests of gradient_survives, uncorrected for the runs compared


def query_depths(dataset: Dataset, qids: list[str]) -> np.ndarray:
    """Depth of each query: ``metadata.depth`` of the collection's queries.jsonl where it has one
    (``normrank depthset build`` writes it), else read from the heading-path id."""
    meta: dict[str, int] = dict(getattr(dataset, "query_depths", None) or {})
    path = Path(dataset.source) / "queries.jsonl" if dataset.source else None
    if not meta and path is not None and path.is_file():
        with path.open(encoding="utf-8") as f:
            for line in f:
                if '"depth"' in line:  # only rows that can carry metadata.depth are parsed
                    row = json.loads(line)
                    d = (row.get("metadata") or {}).get("depth") if isinstance(row, dict) else None
                    if isinstance(d, int) and d >= 1:
                        meta[str(row["_id"])] = d
    return np.array([meta.get(q) or dataset.query_depth(q) for q in qids], dtype=np.int64)


def _folds(run: SweepRun) -> int:
    return max(2, len(run.cv_alphas)) if run.cv_alphas else DEFAULT_FOLDS


def _control(
    entry: dict[str, Any], key: str, sel: np.ndarray, cos: np.ndarray, folds: int, seed: int
) -> dict:
    pq = entry.get("_per_query")
    if pq is None:
        return {}
    wc = weight_control(pq[:, sel], entry[f"{key}s"], cos, folds, seed, key)
    return {
        f"best_{key}": wc[f"best_{key}"],
        "gain_pct": wc["best_gain_pct"],
        "cv_gain_pct": wc["cv"]["gain_pct"],
        "p_value": wc["cv"]["p_value"],
    }


def depth_table(
    dataset: Dataset, run: SweepRun, *, folds: int | None = None, seed: int = DEFAULT_SEED
) -> dict[str, Any] | None:
    """Per depth bucket: the oracle α and gain, the cross-validated gain with its p-value and the
    controls (module docstring), or None when no query has a heading path."""
    depths = query_depths(dataset, run.query_ids)
    if not (depths > 1).any():
        warnings.warn(
            f"{dataset.name}: no query has a heading path (metadata.depth or a/b ids): no depth table; "
            "build one with `normrank depthset build`",
            stacklevel=2,
        )
        return None
    folds = folds or _folds(run)
    buckets = np.array([depth_bucket(int(d)) for d in depths])
    nd = run.per_query[CV_METRIC]
    i0 = run.i0
    perm = (run.controls or {}).get("permutation", {})
    null_ndcg, null_cols = perm.get("_null_ndcg"), perm.get("_null_cols")
    out: dict[str, Any] = {}
    for b in sorted(set(buckets.tolist())):
        sel = buckets == b
        n = int(sel.sum())
        means = nd[:, sel].mean(axis=1)
        bi = argbest(means, run.alphas)
        cos = nd[i0, sel]
        e: dict[str, Any] = {
            "n_queries": n,
            CV_METRIC: [float(x) for x in means],
            "cosine": float(means[i0]),
            "best_alpha": float(run.alphas[bi]),
            "gain_pct": pct(means[bi], means[i0]),
            "global_cv_gain_pct": pct(float(run.cv_per_query[sel].mean()), float(means[i0])),
            "global_p_value": paired_t_p(cos, run.cv_per_query[sel]),
        }
        if n < 2:  # nothing to cross-validate on: said, not invented
            e.update(cv_gain_pct=None, p_value=None, cv_alphas=[], note="one query: no cross-validation")
            out[b] = e
            continue
        wc = weight_control(nd[:, sel], run.alphas, cos, folds, seed, "alpha")
        e.update(cv_gain_pct=wc["cv"]["gain_pct"], p_value=wc["cv"]["p_value"], cv_alphas=wc["cv"]["alphas"])
        if run.controls:
            e["length"] = _control(run.controls["length"], "beta", sel, cos, folds, seed)
            e["residual"] = _control(run.controls["residual"], "alpha", sel, cos, folds, seed)
        if null_ndcg is not None and null_ndcg.shape[0]:
            a = np.asarray(run.alphas, dtype=np.float64)[null_cols]
            _, fold, _ = cross_validate(nd[:, sel], run.alphas, folds, seed)  # the real norm's folds
            held = cv_choose_many(null_ndcg[:, :, sel], a, fold)
            base = float(cos.mean())
            gains = 100.0 * (held.mean(axis=1) - base) / base if base else np.zeros(held.shape[0])
            s = permutation_summary(gains, e["cv_gain_pct"], held.shape[0], int(perm.get("seed", seed)))
            e["permutation"] = {
                k: s[k] for k in ("k", "p_value", "null_median_pct", "null_max_pct", "null_q95_pct")
            }
        out[b] = e
    return out


def _rank_unit(x: np.ndarray) -> np.ndarray | None:
    """Centred average ranks scaled to unit length (None when constant): Spearman's ρ of two
    such vectors is their dot product."""
    r = average_ranks(np.asarray(x, dtype=np.float64))
    r -= r.mean()
    nrm = float(np.sqrt(r @ r))
    return r / nrm if nrm > 0 else None


def rank_gradient(
    depth: np.ndarray, gain: np.ndarray, k: int = GRADIENT_PERMUTATIONS, seed: int = DEFAULT_SEED
) -> dict:
    """Spearman's ρ between ``depth`` and ``gain`` with a two-sided permutation p: depths shuffled
    over queries ``k`` times, p = (1 + #{|ρ*| >= |ρ|}) / (k + 1). ρ = 0, p = 1 when either is constant."""
    stat = spearman(depth, gain)
    rd, rg = _rank_unit(depth), _rank_unit(gain)
    if rd is None or rg is None or k == 0:
        return {"statistic": float(stat), "p_value": 1.0, "k": int(k)}
    rng = np.random.default_rng(seed)
    perms = np.stack([rng.permutation(rd.size) for _ in range(k)])
    null = rd[perms] @ rg
    ge = int(np.sum(np.abs(null) >= abs(stat) - 1e-12))
    return {"statistic": float(stat), "p_value": (1 + ge) / (k + 1), "k": int(k)}


def depth_gradient(
    dataset: Dataset, run: SweepRun, *, k: int = GRADIENT_PERMUTATIONS, seed: int = DEFAULT_SEED
) -> dict[str, Any] | None:
    """Does the chosen α's per-query gain grow with depth? (module docstring), or None without
    heading paths."""
    depths = np.minimum(query_depths(dataset, run.query_ids), 4)
    if not (depths > 1).any():
        return None
    cos = run.per_query[CV_METRIC][run.i0]
    out: dict[str, Any] = {
        **rank_gradient(depths, run.cv_per_query - cos, k, seed),
        "n_queries": int(depths.size),
        "method": (
            f"Spearman rho of query depth (1..4, 4 = 4+) and the per-query {CV_METRIC} gain of the "
            "cross-validated alpha over cosine; p two-sided, depths permuted over queries k times"
        ),
    }
    if not run.controls:
        return {**out, "survives_controls": None}
    c = run.controls
    controls: dict[str, Any] = {}
    for name in ("length", "residual"):
        held = c[name].get("_per_query_cv")
        if held is not None:
            controls[name] = rank_gradient(depths, held - cos, k, seed)
    perm = c.get("permutation", {})
    null_ndcg, null_cols = perm.get("_null_ndcg"), perm.get("_null_cols")
    if null_ndcg is not None and null_ndcg.shape[0]:
        a = np.asarray(run.alphas, dtype=np.float64)[null_cols]
        held = cv_choose_many(null_ndcg, a, run.cv_fold)  # each shuffle through the run's own CV
        rd = _rank_unit(depths)
        rho = np.zeros(held.shape[0])
        if rd is not None:
            for j in range(held.shape[0]):
                rg = _rank_unit(held[j] - cos)
                rho[j] = 0.0 if rg is None else float(rd @ rg)
        ge = int(np.sum(np.abs(rho) >= abs(out["statistic"]) - 1e-12))
        controls["shuffled_norms"] = {
            "k": int(rho.size),
            "p_value": (1 + ge) / (rho.size + 1),
            "null_median_abs": median(np.abs(rho)),
            "null_max_abs": float(np.abs(rho).max()),
        }
    out["controls"] = controls
    out["survives_controls"] = gradient_survives(out)
    return out


def gradient_survives(gradient: dict[str, Any] | None, level: float = SURVIVAL_LEVEL) -> bool | None:
    """Whether a depth gradient survives the controls: its own p < ``level``, the shuffled norms'
    p < ``level``, and the residual norm's ρ has the same sign with p < ``level``. None when the
    controls were not run (nothing to judge it against)."""
    if not gradient:
        return None
    c = gradient.get("controls") or {}
    res, sh = c.get("residual"), c.get("shuffled_norms")
    if res is None or sh is None:
        return None
    same_sign = np.sign(res["statistic"]) == np.sign(gradient["statistic"]) != 0
    return bool(
        gradient["p_value"] < level and sh["p_value"] < level and res["p_value"] < level and same_sign
    )
