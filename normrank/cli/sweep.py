"""``normrank sweep DATA... --model M``: NDCG per α, oracle and cross-validated α, plots."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import typer

from normrank import settings
from normrank.cli.app import app
from normrank.errors import NormrankError
from normrank.sweep.metrics import METRICS


@contextmanager
def user_errors() -> Iterator[None]:
    """A :class:`NormrankError` becomes one ``error:`` line on stderr and exit code 2 (no
    traceback); each warning while the block runs becomes one ``warning:`` line."""

    def show(message, category, filename, lineno, file=None, line=None) -> None:
        typer.echo(f"warning: {message}", err=True)

    before = warnings.showwarning
    warnings.showwarning = show
    try:
        yield
    except NormrankError as e:
        typer.echo("error: " + " ".join(str(e).splitlines()), err=True)
        raise typer.Exit(2) from e
    finally:
        warnings.showwarning = before


def summary_line(run) -> str:
    """A finished run's one line (rich markup): cosine NDCG@10, best and cross-validated α with
    their gains, and the controls' when they ran. Printed through :func:`stderr_console`, it stays
    one line in a file or a log."""
    line = (
        f"[green]{run.dataset} · {run.model}[/green]: cosine {run.mean('ndcg@10')[run.i0]:.4f}, "
        f"best α {run.best_alpha:+g} ({run.gain_pct():+.1f}%), CV {run.cv_gain_pct:+.1f}% (p={run.p_value:.3g})"
    )
    if run.controls:
        c = run.controls
        line += (
            f"; length CV {c['length']['cv']['gain_pct']:+.1f}% (p={c['length']['cv']['p_value']:.3g}), "
            f"residual CV {c['residual']['cv']['gain_pct']:+.1f}%, permutation p={c['permutation']['p_value']:.3g}"
        )
    return line


@app.command("sweep")
def sweep_command(
    data: list[str] = typer.Argument(
        ..., help="BEIR folders, BEIR names (scifact, ...) or ir_datasets ids (car/v1.5/...)."
    ),
    model: list[str] = typer.Option(
        ..., "--model", "-m", help="Encoder name or path; repeat for several models."
    ),
    alphas: str = typer.Option(
        settings.DEFAULT_ALPHAS,
        help="α grid: START:STOP:STEP (stop included) or a comma list; 0 is always added.",
    ),
    metrics: str = typer.Option(
        settings.DEFAULT_METRICS, help=f"Comma list of NAME@K, NAME one of {', '.join(METRICS)}."
    ),
    by_depth: bool = typer.Option(
        False, "--by-depth", help="Also report per query-depth bucket (heading-path query ids)."
    ),
    folds: int = typer.Option(
        settings.DEFAULT_FOLDS, help="Folds over queries for the cross-validated α (>= 2)."
    ),
    weights: list[str] = typer.Option(
        [],
        "--weights",
        help="FILE.npz:KEY per-document weights (e.g. probe.npz:heat), swept beside the norm.",
    ),
    out: Path = typer.Option(
        Path("sweep-out"), help="Output directory: sweep.json, sweep.md, sweep.png, per_query.csv."
    ),
    data_dir: Path = typer.Option(
        None, help="Where BEIR dataset names are looked up first (then $NORMRANK_DATA, ../shared/data/beir)."
    ),
    split: str = typer.Option("test", help="qrels split to evaluate."),
    batch_size: int = typer.Option(64, help="Texts per encoder batch."),
    max_seq_length: int = typer.Option(None, help="Override the encoder's maximum tokens per text."),
    seed: int = typer.Option(settings.DEFAULT_SEED, help="Seed of the CV fold assignment."),
    controls: bool = typer.Option(
        True, help="Length prior, length-residualised norm and permutation null beside the norm."
    ),
    permutations: int = typer.Option(
        settings.DEFAULT_PERMUTATIONS, help="Shuffles of the norms for the null (K)."
    ),
    betas: str = typer.Option(settings.DEFAULT_BETAS, help="β grid of the length prior len^β."),
    length_unit: str = typer.Option("auto", help="auto (the model's tokenizer, else words) | words."),
    ranx_check: bool = typer.Option(
        False, help="Cross-check metrics and test with ranx and time one cosine evaluation with ranx."
    ),
    quiet: bool = typer.Option(False, help="No progress bars."),
) -> None:
    """Sweep score = cos(q, d) · ‖d‖^α over α for each dataset × model and print the table."""
    from normrank.progress import stderr_console
    from normrank.sweep import run_sweep
    from normrank.sweep.report import controls_table, markdown_table, write_all

    err = stderr_console()
    options = {"max_seq_length": max_seq_length} if max_seq_length else None

    def report(run) -> None:
        err.print(summary_line(run))

    with user_errors():
        runs = run_sweep(
            data, model, alphas=alphas, metrics=metrics, folds=folds, by_depth=by_depth, weights=weights,
            data_dir=data_dir, split=split, batch_size=batch_size, show_progress=not quiet,
            seed=seed, encoder_options=options, on_run=report, controls=controls, betas=betas,
            permutations=permutations, length_unit=length_unit, ranx_check=ranx_check,
        )  # fmt: skip
        write_all(runs, out)
    print(markdown_table(runs))
    if any(r.controls for r in runs):
        print(controls_table(runs))
    if any(r.by_depth for r in runs):
        from normrank.sweep.depth_report import depth_sections

        print(depth_sections(runs))
    err.print(f"wrote {out}/sweep.json, sweep.md, sweep.png, per_query.csv")
