"""``normrank diagnose DATA --model M``: does the norm carry a signal beyond length and chance?"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from normrank.cli.app import app
from normrank.cli.sweep import user_errors
from normrank.settings import DEFAULT_ALPHAS, DEFAULT_BETAS, DEFAULT_FOLDS, DEFAULT_PERMUTATIONS, DEFAULT_SEED


@app.command("diagnose")
def diagnose_command(
    data: str = typer.Argument(..., help="A BEIR folder, a BEIR name (scifact, ...) or an ir_datasets id."),
    model: str = typer.Option(..., "--model", "-m", help="Encoder name or path."),
    json_out: Path = typer.Option(None, "--json", help="Write the pinned JSON summary to this file."),
    out: Path = typer.Option(
        Path("diagnose-out"), help="Directory for diagnosis.png, calibration.json and sweep.json."
    ),
    permutations: int = typer.Option(DEFAULT_PERMUTATIONS, help="Shuffles of the norms for the null (K)."),
    alphas: str = typer.Option(DEFAULT_ALPHAS, help="α grid for the norm and the residual norm."),
    betas: str = typer.Option(DEFAULT_BETAS, help="β grid for the length prior len^β."),
    length_unit: str = typer.Option("auto", help="auto (the model's tokenizer, else words) | words."),
    folds: int = typer.Option(DEFAULT_FOLDS, help="Folds over queries (>= 2)."),
    seed: int = typer.Option(DEFAULT_SEED, help="Seed of the folds and of the permutations."),
    data_dir: Path = typer.Option(None, help="Where BEIR dataset names are looked up first."),
    split: str = typer.Option("test", help="qrels split to evaluate."),
    quiet: bool = typer.Option(False, help="No progress bars."),
    by_depth: bool = typer.Option(
        False, "--by-depth", help="Also per query-depth bucket and the gradient test (heading paths)."
    ),
) -> None:
    """Norm spread, norm-length correlation, CV gains of norm / length / residual with p-values,
    the permutation p, pooled calibration, and a one-sentence verdict (plus a figure)."""
    from normrank.progress import stderr_console
    from normrank.sweep.diagnosis import diagnose
    from normrank.sweep.plot import plot_diagnosis
    from normrank.sweep.report import write_json

    err = stderr_console()
    with user_errors():
        dg = diagnose(
            data, model, alphas=alphas, betas=betas, permutations=permutations, folds=folds, seed=seed,
            length_unit=length_unit, data_dir=data_dir, split=split, show_progress=not quiet,
            by_depth=by_depth,
        )  # fmt: skip
    summary = dg.to_json()
    out.mkdir(parents=True, exist_ok=True)
    plot_diagnosis(dg.run, dg.verdict, out / "diagnosis.png")
    (out / "calibration.json").write_text(json.dumps(dg.calibration, indent=1))
    write_json([dg.run], out / "sweep.json")
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(summary, indent=1))
    r, c, cal = dg.run, dg.run.controls, dg.calibration
    print(f"# {r.dataset} · {r.model}: {r.n_docs} documents, {r.n_queries} judged queries\n")
    print(f"norm spread (std/mean): {r.norm_stats['cv']:.3f}; Spearman(norm, length in {c['length_unit']}): "
          f"{summary['spearman_norm_length']:+.2f}\n")  # fmt: skip
    print("| weight | best exponent | CV gain | p (paired t vs cosine) |\n|---|---:|---:|---:|")
    for name, key, e in (("norm ‖d‖^α", "norm", "best_alpha"), ("length len^β", "length", "best_beta"),
                         ("norm, log-length regressed out", "residual", "best_alpha")):  # fmt: skip
        s = summary[key]
        print(f"| {name} | {s[e]:+.2f} | {s['cv_gain_pct']:+.1f}% | {s['p_value']:.3g} |")
    pm = summary["permutation"]
    print(f"\nshuffled norms: K = {pm['k']}, permutation p = {pm['p_value']:.3g}\n")
    print(
        "| pooled calibration (top-100 candidates) | γ per fold | AUROC | precision at best global threshold (F1) |"
    )
    print("|---|---|---:|---:|")
    for name, key in (("cos", "cos"), ("cos·‖q‖^−γ", "query"), ("cos·‖q‖^−γ‖d‖^−γ", "symmetric")):
        e = cal[key]
        print(f"| {name} | {', '.join(f'{g:g}' for g in e['cv_gammas']) or '-'} | {e['auroc']:.3f} | "
              f"{e['threshold_precision']:.3f} ({e['threshold_f1']:.3f}) |")  # fmt: skip
    print(f"\n{dg.verdict}")
    if dg.run.by_depth:  # per depth bucket, the gradient test, and the paper's Figure 6 as depth.png
        from normrank.sweep.depth_report import depth_sections, write_depth_plot

        print(depth_sections([dg.run]))
        write_depth_plot([dg.run], out / "depth.png")
    err.print(
        f"wrote {out}/diagnosis.png, calibration.json, sweep.json" + (f", {json_out}" if json_out else "")
    )
