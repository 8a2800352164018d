"""Render sweep results: ``sweep.json`` (pinned schema), ``sweep.md``, ``sweep.png``, ``per_query.csv``."""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from pathlib import Path

from normrank.settings import CV_METRIC
from normrank.sweep.depth_report import depth_sections
from normrank.sweep.result import SweepRun

__all__ = [
    "controls_table",
    "markdown_table",
    "write_all",
    "write_csv",
    "write_json",
    "write_markdown",
]


def write_json(runs: Sequence[SweepRun], path: Path) -> None:
    path.write_text(json.dumps({"runs": [r.to_dict() for r in runs]}, indent=1, allow_nan=False))


def _fmt_p(p: float) -> str:
    return f"{p:.3f}" if p >= 0.001 else f"{p:.1e}"


def markdown_table(runs: Sequence[SweepRun]) -> str:
    """One row per run: cosine, oracle best α and its gain, the cross-validated α, gain and p."""
    head = (
        f"| dataset | model | docs | queries | norm CV | {CV_METRIC} cosine | best α | {CV_METRIC} best | "
        "oracle gain | CV α (per fold) | CV " + CV_METRIC + " | CV gain | p (CV vs cos) |\n"
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|\n"
    )
    rows = []
    for r in runs:
        m = r.mean(CV_METRIC)
        cv_alphas = ", ".join(f"{a:g}" for a in r.cv_alphas)
        rows.append(
            f"| {r.dataset} | {r.model} | {r.n_docs} | {r.n_queries} | {r.norm_stats['cv']:.3f} | {m[r.i0]:.4f} | "
            f"{r.best_alpha:+g} | {m[r.best_index]:.4f} | {r.gain_pct():+.1f}% | {cv_alphas} | {r.cv_mean:.4f} | "
            f"{r.cv_gain_pct:+.1f}% | {_fmt_p(r.p_value)} |"
        )
    return head + "\n".join(rows) + "\n"


def controls_table(runs: Sequence[SweepRun]) -> str:
    """Norm beside its controls: CV gains (paired t-test p vs cosine) and the permutation p."""
    with_c = [r for r in runs if r.controls]
    if not with_c:
        return ""
    head = (
        "| dataset | model | Spearman(‖d‖, length) | norm: CV gain (p) | length len^β: best β, CV gain (p) | "
        "norm, log-length regressed out: slope, CV gain (p) | shuffled norms: K, median / max CV gain | permutation p |\n"
        "|---|---|---:|---:|---:|---:|---:|---:|\n"
    )
    rows = []
    for r in with_c:
        c = r.controls
        ln, rs, pm = c["length"], c["residual"], c["permutation"]
        rows.append(
            f"| {r.dataset} | {r.model} | {c['spearman_norm_length']:+.2f} ({c['length_unit']}) | "
            f"{r.cv_gain_pct:+.1f}% ({_fmt_p(r.p_value)}) | {ln['best_beta']:+.2f}, {ln['cv']['gain_pct']:+.1f}% "
            f"({_fmt_p(ln['cv']['p_value'])}) | {rs['fit']['slope']:+.2f}, {rs['cv']['gain_pct']:+.1f}% "
            f"({_fmt_p(rs['cv']['p_value'])}) | {pm['k']}, {pm['null_median_pct']:+.1f}% / {pm['null_max_pct']:+.1f}% | "
            f"{_fmt_p(pm['p_value']) if pm['k'] else ''} |"
        )
    return head + "\n".join(rows) + "\n"


def _alpha_table(runs: Sequence[SweepRun]) -> str:
    alphas = runs[0].alphas
    head = "| dataset | model | " + " | ".join(f"{a:+g}" for a in alphas) + " |\n"
    head += "|---|---|" + "---:|" * len(alphas) + "\n"
    rows = []
    for r in runs:
        if r.alphas != alphas:
            continue
        m = r.mean(CV_METRIC)
        rows.append(f"| {r.dataset} | {r.model} | " + " | ".join(f"{v / m[r.i0]:.3f}" for v in m) + " |")
    return head + "\n".join(rows) + "\n"


def write_markdown(runs: Sequence[SweepRun], path: Path) -> None:
    metrics = list(runs[0].per_query) if runs else []
    text = [
        "# Norm-weighted retrieval sweep: score = cos(q, d) · ‖d‖^α\n",
        f"Metrics: {', '.join(metrics)}. Oracle best α is chosen on the test queries (as the paper's Fig. 4); "
        f"the CV α is chosen on the other folds and scored on held-out queries; p is the two-sided paired t-test "
        f"(ranx's `student`, scipy's ttest_rel; equal, computed here without either) of the pooled held-out "
        f"{CV_METRIC} against cosine (α = 0).\n",
        markdown_table(runs),
        f"\n## {CV_METRIC} relative to cosine, per α\n",
        _alpha_table(runs) if runs else "",
        depth_sections(runs),  # per depth bucket, with the CV gains, controls and gradient
    ]
    if any(r.controls for r in runs):
        text += [
            "\n## Is it the norm, or the length, or chance? (controls from the same cosine matrix)\n",
            "Each weight is selected and tested exactly as the norm (same folds, paired t-test vs cosine). "
            "Length: tokens of the model's tokenizer where found, else words. norm with log-length regressed out: the residual "
            "of a least-squares fit log ‖d‖ = a + b log length on this collection (b shown). Shuffled norms: "
            "the norms permuted over documents K times, each through the same α grid and CV; the permutation "
            "p is (1 + #{shuffled gain ≥ real gain}) / (K + 1).\n",
            controls_table(runs),
        ]
    timing = [r for r in runs if "sweep_total" in r.timing]
    if timing:
        text.append(_timing_table(timing))
    path.write_text("\n".join(text))


def _timing_table(runs: Sequence[SweepRun]) -> str:
    """Seconds per stage, embeddings cached. Each column is what its header names."""
    out = [
        "\n## Timing (seconds, in this process, embeddings already in memory)\n\n",
        "Stage times of the sweep itself; not included: interpreter start, imports, reading the collection "
        "and the embeddings, writing these reports (the whole process is timed by "
        "`benchmarks/sweep_speed.py`). α-sweep: unit vectors and norms, the cosine matrix once, every α re-weighted and ranked "
        "exactly, all metrics. Norm total: the α-sweep + cross-validation + paired t-test. Controls: "
        "document lengths, the length and residual weights scored, and the permutation null (K shuffles "
        "through every α and the CV). Everything: norm total + controls. One cosine evaluation (only with "
        "`--ranx-check`): exact top-k by cosine + ranx's metrics on that run, ranx already loaded.\n\n",
        "| dataset | model | α-sweep | norm total | controls (of which null) | everything | one cosine eval (ranx) | "
        "norm total / cosine eval | everything / cosine eval |\n|---|---|---:|---:|---:|---:|---:|---:|---:|\n",
    ]
    for r in runs:
        t = r.timing
        base = t.get("cosine_eval")
        ctrl = f"{t['controls']:.3f} ({t['controls_null']:.3f})" if "controls" in t else ""
        ratio = f"{t['sweep_norm'] / base:.2f}× | {t['sweep_total'] / base:.2f}×" if base else " | "
        out.append(
            f"| {r.dataset} | {r.model} | {t['alpha_sweep']:.3f} | {t['sweep_norm']:.3f} | {ctrl} | "
            f"{t['sweep_total']:.3f} | {'' if base is None else f'{base:.3f}'} | {ratio} |\n"
        )
    return "".join(out)


def write_csv(runs: Sequence[SweepRun], path: Path) -> None:
    """One row per (dataset, model, query): NDCG@10 at each α, the CV fold, α and held-out value."""
    alphas = sorted({a for r in runs for a in r.alphas})
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(
            [
                "dataset",
                "model",
                "query_id",
                *[f"{CV_METRIC}@alpha={a:g}" for a in alphas],
                "cv_fold",
                "cv_alpha",
                f"cv_{CV_METRIC}",
            ]
        )
        for r in runs:
            nd = r.per_query[CV_METRIC]
            col = {a: i for i, a in enumerate(r.alphas)}
            for qi, q in enumerate(r.query_ids):
                vals = [f"{nd[col[a], qi]:.4f}" if a in col else "" for a in alphas]
                f_ = int(r.cv_fold[qi])
                w.writerow(
                    [r.dataset, r.model, q, *vals, f_, f"{r.cv_alphas[f_]:g}", f"{r.cv_per_query[qi]:.4f}"]
                )


def write_all(runs: Sequence[SweepRun], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    write_json(runs, out / "sweep.json")
    write_markdown(runs, out / "sweep.md")
    write_csv(runs, out / "per_query.csv")
    if runs:
        from normrank.sweep.plot import write_plot

        write_plot(runs, out / "sweep.png")
        if any(r.by_depth for r in runs):
            from normrank.sweep.depth_report import write_depth_plot

            write_depth_plot(runs, out / "depth.png")  # the paper's Figure 6: one curve per depth
    else:  # keep the promised file set even for an empty sweep
        (out / "sweep.png").unlink(missing_ok=True)
