"""The depth sweep's reports: the paper's Table 3 layout with the CV gains and controls, the
gradient test, and Figure 6 (NDCG@10 / cosine against α, one curve per depth bucket)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from normrank.settings import CV_METRIC
from normrank.sweep.depth import SURVIVAL_LEVEL, gradient_survives
from normrank.sweep.result import SweepRun

__all__ = ["PAPER_TABLE3_TEXT", "depth_markdown", "depth_sections", "write_depth_plot"]

# The paper's Appendix C, Table 3, text rows (TREC CAR): oracle gain and α, no depth pattern.
PAPER_TABLE3_TEXT = {"MiniLM-L6": ("+1.4%", -0.10), "SBERT-MPNet": ("+1.3%", -0.30)}
BUCKETS = ("d=1", "d=2", "d=3", "d=4+")


def _p(p: float | None) -> str:
    if p is None:
        return "–"
    return f"{p:.3f}" if p >= 0.001 else f"{p:.1e}"


def _g(x: float | None) -> str:
    return "–" if x is None else f"{x:+.1f}%"


def _buckets(runs: Sequence[SweepRun]) -> list[str]:
    seen = {b for r in runs if r.by_depth for b in r.by_depth}
    return [b for b in BUCKETS if b in seen]


def depth_sections(runs: Sequence[SweepRun]) -> str:
    """Markdown: the Table 3 layout (oracle gain and α per bucket), the CV gains with p and the
    controls per bucket, and the gradient test. "" when no run has a depth table."""
    runs = [r for r in runs if r.by_depth]
    if not runs:
        return ""
    bks = _buckets(runs)
    out = [f"\n## {CV_METRIC} gain by query depth (the paper's Table 3 layout: oracle gain, best α)\n\n"]
    out.append(
        "| dataset | model | overall | " + " | ".join(bks) + " |\n|---|---|---:|" + "---:|" * len(bks) + "\n"
    )
    for r in runs:
        cells = []
        for b in bks:
            e = r.by_depth.get(b)
            cells.append(f"{e['gain_pct']:+.1f}% ({e['best_alpha']:+.2f}, {e['n_queries']}q)" if e else "")
        out.append(
            f"| {r.dataset} | {r.model} | {r.gain_pct():+.1f}% ({r.best_alpha:+.2f}) | "
            + " | ".join(cells)
            + " |\n"
        )
    out.append(
        "\n## Cross-validated, with the controls, per depth\n\n"
        "Per bucket, each weight's exponent is chosen by 5-fold CV over that bucket's queries and scored on "
        "the held-out fold; p: paired t-test against cosine. Shuffled norms: the run's K shuffles, each "
        "through the same within-bucket CV (permutation p). Global CV: the run's own CV α (chosen over all "
        "depths) scored on the bucket.\n\n"
        "| dataset | model | bucket | queries | cosine | norm: CV gain (p) | global CV α: gain (p) | "
        "length len^β: CV gain (p) | residual norm: CV gain (p) | shuffled: max gain / permutation p |\n"
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|\n"
    )
    for r in runs:
        for b in bks:
            e = r.by_depth.get(b)
            if not e:
                continue
            ln, rs, pm = e.get("length") or {}, e.get("residual") or {}, e.get("permutation") or {}
            out.append(
                f"| {r.dataset} | {r.model} | {b} | {e['n_queries']} | {e['cosine']:.4f} | "
                f"{_g(e['cv_gain_pct'])} ({_p(e['p_value'])}) | {_g(e['global_cv_gain_pct'])} ({_p(e['global_p_value'])}) | "
                f"{_g(ln.get('cv_gain_pct'))} ({_p(ln.get('p_value'))}) | {_g(rs.get('cv_gain_pct'))} ({_p(rs.get('p_value'))}) | "
                + (f"{pm['null_max_pct']:+.1f}% / {_p(pm['p_value'])}" if pm else "–")
                + " |\n"
            )
    out.append(
        "\n## Does the gain grow with depth? (the gradient test)\n\n"
        "Spearman ρ between query depth (1..4, 4 = 4+) and each query's NDCG@10 gain of the cross-validated α "
        "over cosine; p two-sided, depths permuted over queries (K = 999). The same ρ for the length prior's and "
        "the residual norm's per-query gains, and against the shuffled norms (p: share of shuffles whose |ρ| "
        "reaches the real one). Survives the controls: the norm's ρ has p < "
        f"{SURVIVAL_LEVEL}, beats the shuffled norms (p < {SURVIVAL_LEVEL}) and the residual norm's ρ has the "
        f"same sign with p < {SURVIVAL_LEVEL}.\n\n"
        "| dataset | model | norm: ρ (p) | length prior: ρ (p) | residual norm: ρ (p) | vs shuffled norms: p "
        "| survives the controls |\n"
        "|---|---|---:|---:|---:|---:|---|\n"
    )
    verdicts = {True: "yes", False: "no", None: "–"}
    for r in runs:
        gr = r.depth_gradient or {}
        c = gr.get("controls") or {}

        def cell(x: dict[str, Any] | None) -> str:
            return f"{x['statistic']:+.3f} ({_p(x['p_value'])})" if x else "–"

        sh = c.get("shuffled_norms")
        out.append(
            f"| {r.dataset} | {r.model} | {cell(gr or None)} | {cell(c.get('length'))} | {cell(c.get('residual'))} | "
            f"{_p(sh['p_value']) if sh else '–'} | {verdicts[gradient_survives(gr or None)]} |\n"
        )
    judged = [r.depth_gradient for r in runs if gradient_survives(r.depth_gradient) is not None]
    if judged:
        n, strict = len(judged), SURVIVAL_LEVEL / len(judged)
        out.append(
            f"\nSurvive the controls: {sum(map(gradient_survives, judged))} of {n} runs at p < {SURVIVAL_LEVEL} "
            f"each (uncorrected); {sum(gradient_survives(g, strict) for g in judged)} of {n} with all three "
            f"tests at p < {strict:.4f} (Bonferroni over the {n} runs).\n"
        )
    return "".join(out)


def depth_markdown(
    runs: Sequence[SweepRun],
    sets: dict[str, Any] | None = None,
    *,
    sweep_s: float | None = None,
    machine: str = "",
    full: dict[str, Any] | None = None,
    skipped: dict[str, str] | None = None,
) -> str:
    """A whole depth report: the collections (the swept samples, and whole-corpus builds' cost),
    the paper's text rows, the (collection, model) pairs not swept and why (``skipped``:
    ``"collection:model"`` -> reason), then :func:`depth_sections`."""
    out = ["# The depth sweep (TREC CAR's protocol) on real documentation\n\n"]
    if full:
        out.append(
            f"Whole-corpus builds ({machine}): "
            + "; ".join(
                f"{n}: {st['pages_used']} pages, {st['paragraphs']} paragraphs, "
                + ", ".join(f"{b} {q}" for b, q in st["queries_per_depth"].items())
                + f" queries, {st['seconds']:.1f} s"
                for n, st in full.items()
            )
            + ". The sweeps below run on seeded page samples (`--max-pages`, seed 0):\n\n"
        )
    if sets:
        out.append(
            "| collection | source | format | pages | paragraphs | duplicates merged | "
            + " | ".join(f"queries {b}" for b in BUCKETS)
            + " | build (s) |\n|---|---|---|---:|---:|---:|"
            + "---:|" * len(BUCKETS)
            + "---:|\n"
        )
        for name, s in sets.items():
            st = s["stats"]
            q = st["queries_per_depth"]
            out.append(
                f"| {name} | `{s['source']}` | {s['format']} | {st['pages_used']} of {st['pages_found']} | "
                f"{st['paragraphs']} | {st['duplicates_merged']} | "
                + " | ".join(str(q.get(b, 0)) for b in BUCKETS)
                + f" | {st['seconds']:.1f} |\n"
            )
    paper = ", ".join(f"{m} {g} at α = {a:+.2f}" for m, (g, a) in PAPER_TABLE3_TEXT.items())
    out.append(f"\nThe paper's Table 3 text rows (TREC CAR, oracle α): {paper}; no depth pattern.\n")
    if sweep_s is not None:
        out.append(f"\nSweeps (all runs, embeddings cached): {sweep_s:.1f} s on {machine}.\n")
    if skipped:
        out.append(
            "\n**Not swept** (no row below): "
            + "; ".join(f"{pair.replace(':', ' × ', 1)} ({why})" for pair, why in skipped.items())
            + ".\n"
        )
    out.append(depth_sections(runs))
    return "".join(out)


def write_depth_plot(runs: Sequence[SweepRun], path: Path) -> None:
    """The paper's Figure 6 layout: NDCG@10 / cosine against α, one curve per depth bucket, one
    panel per (dataset, model)."""
    from matplotlib.figure import Figure

    runs = [r for r in runs if r.by_depth]
    if not runs:
        return
    datasets = list(dict.fromkeys(r.dataset for r in runs))
    models = list(dict.fromkeys(r.model for r in runs))
    fig = Figure(figsize=(3.4 * len(models) + 0.6, 2.9 * len(datasets) + 0.4), dpi=80)
    axes = fig.subplots(len(datasets), len(models), sharex=True, squeeze=False)
    used = {(datasets.index(r.dataset), models.index(r.model)) for r in runs}
    for i, row in enumerate(axes):
        for j, ax in enumerate(row):
            ax.set_visible((i, j) in used)  # a (dataset, model) pair not swept: no empty panel
    for r in runs:
        ax = axes[datasets.index(r.dataset)][models.index(r.model)]
        for i, b in enumerate(BUCKETS):
            e = r.by_depth.get(b)
            if e and e["cosine"]:
                ax.plot(r.alphas, [v / e["cosine"] for v in e[CV_METRIC]], lw=1.2, color=f"C{i}",
                        label=f"{b} ({e['n_queries']}q)")  # fmt: skip
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.axvline(0.0, color="grey", lw=0.8)
        ax.set_title(f"{r.dataset} · {r.model}", fontsize=8)
        ax.legend(fontsize=6, loc="lower center")
        ax.tick_params(labelsize=7)
    for ax in axes[-1]:
        ax.set_xlabel("α", fontsize=8)
    for row in axes:
        row[0].set_ylabel(f"{CV_METRIC} / cosine", fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
