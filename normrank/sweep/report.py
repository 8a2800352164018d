"""Render sweep results: ``sweep.json`` (pinned schema), ``sweep.md``, ``sweep.png``, ``per_query.csv``."""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from pathlib import Path

from normrank.settings import CV_METRIC
from normrank.sweep.result import SweepRun

__all__ = ["markdown_table", "write_all", "write_csv", "write_json", "write_markdown", "write_plot"]


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


def _depth_table(runs: Sequence[SweepRun]) -> str:
    with_depth = [r for r in runs if r.by_depth]
    if not with_depth:
        return ""
    buckets = sorted({b for r in with_depth for b in r.by_depth})
    head = "| dataset | model | overall (best α) | " + " | ".join(buckets) + " |\n"
    head += "|---|---|---:|" + "---:|" * len(buckets) + "\n"
    rows = []
    for r in with_depth:
        cells = []
        for b in buckets:
            e = r.by_depth.get(b)
            cells.append(f"{e['gain_pct']:+.1f}% ({e['best_alpha']:+g}, {e['n_queries']}q)" if e else "")
        rows.append(
            f"| {r.dataset} | {r.model} | {r.gain_pct():+.1f}% ({r.best_alpha:+g}) | "
            + " | ".join(cells)
            + " |"
        )
    return "\n## " + CV_METRIC + " gain by query depth\n\n" + head + "\n".join(rows) + "\n"


def write_markdown(runs: Sequence[SweepRun], path: Path) -> None:
    metrics = list(runs[0].per_query) if runs else []
    text = [
        "# Norm-weighted retrieval sweep: score = cos(q, d) · ‖d‖^α\n",
        f"Metrics: {', '.join(metrics)}. Oracle best α is chosen on the test queries (as the paper's Fig. 4); "
        f"the CV α is chosen on the other folds and scored on held-out queries; p is ranx's paired t-test "
        f"of the pooled held-out {CV_METRIC} against cosine (α = 0).\n",
        markdown_table(runs),
        f"\n## {CV_METRIC} relative to cosine, per α\n",
        _alpha_table(runs) if runs else "",
        _depth_table(runs),
    ]
    timing = [r for r in runs if "sweep_total" in r.timing]
    if timing:
        text.append(
            "\n## Timing (seconds, embeddings cached)\n\n| dataset | model | sweep | one cosine evaluation | ratio |\n|---|---|---:|---:|---:|\n"
        )
        for r in timing:
            base = r.timing.get("cosine_eval")
            ratio = f"{r.timing['sweep_total'] / base:.2f}×" if base else ""
            text.append(
                f"| {r.dataset} | {r.model} | {r.timing['sweep_total']:.3f} | "
                f"{'' if base is None else f'{base:.3f}'} | {ratio} |\n"
            )
    path.write_text("\n".join(text))


def write_plot(runs: Sequence[SweepRun], path: Path) -> None:
    """NDCG@10 relative to cosine against α, one line per dataset, one panel per model (paper Fig. 4)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = list(dict.fromkeys(r.model for r in runs))
    datasets = sorted({r.dataset for r in runs})
    fig, axes = plt.subplots(
        1, len(models), figsize=(4.2 * len(models) + 2.6, 4.2), dpi=90, sharey=True, squeeze=False
    )
    cmap = plt.get_cmap("tab10")
    for ax, model in zip(axes[0], models, strict=True):
        for r in (r for r in runs if r.model == model):
            m = r.mean(CV_METRIC)
            if m[r.i0]:
                ax.plot(r.alphas, m / m[r.i0], marker="o", markersize=3, lw=1.2,
                        color=cmap(datasets.index(r.dataset) % 10), label=r.dataset)  # fmt: skip
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.axvline(0.0, color="grey", lw=0.8)
        ax.set_title(model, fontsize=10)
        ax.set_xlabel("α  (score = cos · ‖d‖^α)")
    axes[0][0].set_ylabel(f"{CV_METRIC} / {CV_METRIC} at α = 0 (cosine)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center right", fontsize=8)
    fig.tight_layout(rect=(0, 0, 1 - 2.5 / fig.get_figwidth(), 1))
    fig.savefig(path)
    plt.close(fig)


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
        write_plot(runs, out / "sweep.png")
    else:  # keep the promised file set even for an empty sweep
        (out / "sweep.png").unlink(missing_ok=True)
