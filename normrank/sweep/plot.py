"""The sweep's figures: NDCG@10 against α per dataset (the paper's Fig. 4 layout), the norm's
cross-validated gain beside its controls, and the one-collection diagnosis figure."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from normrank.settings import CV_METRIC
from normrank.sweep.result import SweepRun

__all__ = ["plot_diagnosis", "write_plot"]


def _controls_panel(ax: Any, runs: Sequence[SweepRun]) -> None:
    """Per dataset: the norm's CV gain, the length prior's, the residual's, and the shuffled band."""
    for x, r in enumerate(runs):
        c = r.controls
        null = c["permutation"]["null_cv_gain_pct"]
        if null:
            ax.vlines(
                x,
                min(null),
                max(null),
                color="0.75",
                lw=6,
                label="shuffled norms (range)" if x == 0 else None,
            )
            ax.plot([x - 0.15, x + 0.15], [c["permutation"]["null_q95_pct"]] * 2, color="0.4", lw=1,
                    label="shuffled 95th pct" if x == 0 else None)  # fmt: skip
        ax.plot(x, r.cv_gain_pct, "o", color="C0", label="norm ‖d‖^α" if x == 0 else None)
        ax.plot(
            x + 0.12, c["length"]["cv"]["gain_pct"], "s", color="C1", label="length len^β" if x == 0 else None
        )
        ax.plot(x - 0.12, c["residual"]["cv"]["gain_pct"], "^", color="C2",
                label="norm, log-length regressed out" if x == 0 else None)  # fmt: skip
    ax.axhline(0.0, color="grey", lw=0.8)
    ax.set_xticks(range(len(runs)), [r.dataset for r in runs], rotation=30, ha="right", fontsize=8)
    if runs:
        ax.legend(fontsize=7, loc="best")


def write_plot(runs: Sequence[SweepRun], path: Path) -> None:
    """NDCG@10 relative to cosine against α, one line per dataset, one panel per model (paper Fig. 4)."""
    from matplotlib import colormaps
    from matplotlib.figure import Figure  # no pyplot: its import costs a fresh sweep ~0.3 s

    models = list(dict.fromkeys(r.model for r in runs))
    datasets = sorted({r.dataset for r in runs})
    controls = any(r.controls for r in runs)
    fig = Figure(figsize=(4.2 * len(models) + 2.6, 8.4 if controls else 4.2), dpi=90)
    axes = fig.subplots(2 if controls else 1, len(models), sharey="row", squeeze=False)
    cmap = colormaps["tab10"]
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
    if controls:
        for ax, model in zip(axes[1], models, strict=True):
            _controls_panel(ax, [r for r in runs if r.model == model and r.controls])
        axes[1][0].set_ylabel(f"cross-validated {CV_METRIC} gain vs cosine (%)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center right", fontsize=8)
    fig.tight_layout(rect=(0, 0, 1 - 2.5 / fig.get_figwidth(), 1))
    fig.savefig(path)  # a Figure of its own: nothing to close


def plot_diagnosis(run: SweepRun, verdict: str, path: Path) -> None:
    """Left: NDCG@10 / cosine against the exponent for the norm, the length prior and the
    residual norm, over the band the shuffled norms span. Right: the shuffled norms' CV gains
    with the real norm's marked. The verdict as caption."""
    import textwrap

    from matplotlib.figure import Figure

    c = run.controls
    base = run.mean(CV_METRIC)[run.i0]
    fig = Figure(figsize=(10.5, 4.6), dpi=90)
    ax, hx = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.6, 1]})
    band = c["permutation"].get("relative_curve")
    if band:
        ax.fill_between(run.alphas, band["q05"], band["q95"], color="0.85", label="shuffled norms, 5–95%")
        ax.plot(run.alphas, band["max"], color="0.6", lw=0.8, ls=":", label="shuffled norms, max")
    if base:
        ax.plot(run.alphas, run.mean(CV_METRIC) / base, "o-", ms=3, color="C0", label="norm ‖d‖^α")
        ax.plot(c["residual"]["alphas"], [v / base for v in c["residual"][CV_METRIC]], "^-", ms=3, color="C2",
                label="norm, log-length regressed out")  # fmt: skip
        ax.plot(c["length"]["betas"], [v / base for v in c["length"][CV_METRIC]], "s-", ms=3, color="C1",
                label=f"length^β ({c['length_unit']})")  # fmt: skip
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.axvline(0.0, color="grey", lw=0.8)
    ax.set_xlabel("exponent: α (norm, residual), β (length)")
    ax.set_ylabel(f"{CV_METRIC} / cosine")
    ax.legend(fontsize=7, loc="best")
    null = c["permutation"]["null_cv_gain_pct"]
    if null:
        hx.hist(null, bins=min(30, max(5, len(null) // 3)), color="0.7")
    hx.axvline(run.cv_gain_pct, color="C0", lw=2, label=f"real norm {run.cv_gain_pct:+.1f}%")
    hx.axvline(c["length"]["cv"]["gain_pct"], color="C1", lw=1.5, ls="--", label="length prior")
    hx.axvline(
        c["residual"]["cv"]["gain_pct"], color="C2", lw=1.5, ls="--", label="norm, log-length regressed out"
    )
    hx.set_xlabel(f"cross-validated {CV_METRIC} gain vs cosine (%)")
    hx.set_ylabel(f"shuffled norms (K = {c['permutation']['k']})")
    hx.legend(fontsize=7)
    fig.suptitle(f"{run.dataset} · {run.model}: is it the norm, the length, or chance?", fontsize=11)
    fig.text(0.5, 0.01, "\n".join(textwrap.wrap(verdict, 150)), ha="center", va="bottom", fontsize=8)
    fig.tight_layout(rect=(0, 0.08, 1, 0.95))
    fig.savefig(path)
