"""``normrank probe DATA --model M``: per-document heat and drift by virtual SGD steps."""

from __future__ import annotations

from pathlib import Path

import typer

from normrank.cli.app import app
from normrank.cli.sweep import user_errors


@app.command("probe")
def probe_command(
    data: Path = typer.Argument(
        ..., help="BEIR folder (corpus.jsonl; qrels/train.tsv gives the pairs when present)."
    ),
    model: str = typer.Option(..., "--model", "-m", help="Encoder name or path (a torch model)."),
    scope: str = typer.Option("head", help="Parameters a virtual step moves: full | head | last:N."),
    steps: int = typer.Option(64, help="Virtual minibatches M."),
    batch_size: int = typer.Option(64, help="Pairs per virtual minibatch."),
    lr: float = typer.Option(1e-3, help="Virtual step size eta."),
    temperature: float = typer.Option(0.05, help="InfoNCE temperature."),
    probe_docs: int = typer.Option(0, help="Probe a seeded random subset of N documents (0: all)."),
    pairs: str = typer.Option(
        "auto", help="auto (train qrels, else self-pairs) | self | PATH.tsv of anchor<TAB>positive."
    ),
    weight_decay: float = typer.Option(0.0, help="lambda for the eq. 4.15 equilibrium-norm check (0: skip)."),
    seed: int = typer.Option(0, help="Seed of the minibatch draws and of --probe-docs."),
    encode_batch_size: int = typer.Option(32, help="Texts per forward pass when re-encoding."),
    fast_path: bool = typer.Option(
        True, help="Replay only the tail after the head (scope=head) when verified exact."
    ),
    out: Path = typer.Option(Path("probe-out"), help="Output directory: probe.npz, probe.json, probe.png."),
    quiet: bool = typer.Option(False, help="No progress bar."),
) -> None:
    """Estimate each document's norm R, drift D~ and heat V~^2 (paper Appendix H) and check the theory."""
    from normrank.probe import run_probe, write_probe
    from normrank.progress import stderr_console

    console = stderr_console()
    with user_errors():  # one plain "error:" line, exit 2, as sweep and diagnose
        run = run_probe(
            data, model, scope=scope, steps=steps, batch_size=batch_size, lr=lr, temperature=temperature,
            probe_docs=probe_docs, pairs=pairs, seed=seed, encode_batch_size=encode_batch_size,
            fast_path=fast_path, progress=not quiet,
        )  # fmt: skip
        for note in run.notes:
            console.print(f"[yellow]{note}[/yellow]")
        result, ids = run.result, run.doc_ids
        payload = write_probe(
            result,
            ids,
            out,
            settings={
                "data": str(data),
                "model": model,
                "pairs": run.pair_source,
                "probe_docs": len(ids),
                "title": f"{Path(data).name}, {model}, scope={scope}",
            },
            weight_decay=weight_decay if weight_decay > 0 else None,
        )
    c, st, slope = payload["correlations"], result.settings, payload["loglog_slope_norm_vs_heat"]
    console.print(
        f"{len(ids)} docs, scope={st['scope']} ({st['path']}), {st['seconds']:.1f}s: "
        f"r(heat,norm)={c['heat_norm']:+.3f} r(drift,norm)={c['drift_norm']:+.3f} "
        f"r(drift,heat)={c['drift_heat']:+.3f} log-log slope={slope:.3f} -> {out}"
    )
