"""``normrank train-head DATA --model BASE --weight-decay L --out DIR``: train a projection head."""

from __future__ import annotations

from pathlib import Path

import typer

from normrank.cli.app import app


@app.command("train-head")
def train_head_command(
    data: list[str] = typer.Argument(
        ..., help="BEIR folders / names (qrels pairs, or titles) or .tsv files of anchor<TAB>positive."
    ),
    model: str = typer.Option(..., "--model", "-m", help="Base encoder (name or path, a torch model)."),
    weight_decay: float = typer.Option(..., "--weight-decay", help="Decoupled weight decay lambda (SGDW)."),
    out: Path = typer.Option(..., "--out", help="Folder to write (load it with --model DIR)."),
    variant: str = typer.Option(
        "linear", help="linear (head on frozen features) | last-block (+ last block)."
    ),
    pairs: str = typer.Option("qrels", help="From a BEIR folder: qrels (query -> relevant doc) | titles."),
    split: str = typer.Option("train", help="qrels split the pairs come from (never evaluate on it)."),
    dim: int = typer.Option(None, help="Output dimension d' of the head (default: the base's d)."),
    lr: float = typer.Option(0.1, help="SGD learning rate eta."),
    temperature: float = typer.Option(0.05, help="InfoNCE temperature."),
    batch_size: int = typer.Option(256, help="Pairs per minibatch (in-batch negatives)."),
    max_epochs: int = typer.Option(300, help="Stop here if the norm has not converged (logged as such)."),
    tol: float = typer.Option(1e-2, help="Norm convergence: relative change of the mean norm per epoch."),
    patience: int = typer.Option(5, help="Epochs in a row under --tol."),
    steps_per_epoch: int = typer.Option(
        None, help="Minibatches per epoch (default: one pass over the pairs)."
    ),
    max_pairs: int = typer.Option(0, help="Train on a seeded random subset of N pairs (0: all)."),
    max_seq_length: int = typer.Option(None, help="Override the base encoder's maximum tokens per text."),
    seed: int = typer.Option(0, help="Seed of the head's initialisation and the minibatches."),
    overwrite: bool = typer.Option(False, help="Replace DIR if it already holds a trained head."),
    quiet: bool = typer.Option(False, help="No progress bars."),
) -> None:
    """Contrastive training (symmetric InfoNCE, SGD with decoupled weight decay) to norm convergence."""
    from normrank.errors import NormrankError
    from normrank.progress import stderr_console
    from normrank.train import train_head

    err = stderr_console()
    try:
        result = train_head(
            data, model, weight_decay, out, variant=variant, pairs=pairs, split=split, out_dim=dim, lr=lr,
            temperature=temperature, batch_size=batch_size, max_epochs=max_epochs, tol=tol,
            patience=patience, steps_per_epoch=steps_per_epoch, max_pairs=max_pairs,
            max_seq_length=max_seq_length, seed=seed, overwrite=overwrite, progress=not quiet,
        )  # fmt: skip
    except NormrankError as e:
        err.print(f"[red]error:[/red] {e}")
        raise typer.Exit(2) from e
    last = result.epochs[-1] if result.epochs else {}
    verdict = "converged" if result.converged else "NOT converged"
    err.print(
        f"{verdict} ({result.stop_reason}): {len(result.epochs)} epochs, loss {last.get('loss', float('nan')):.4f}, "
        f"mean norm {result.initial_norm:.4f} -> {last.get('mean_norm', float('nan')):.4f}"
    )
    print(f"wrote {out}/ (normrank_head.json, model.safetensors, train_log.json); use --model {out}")
    if not result.converged:
        raise typer.Exit(1)
