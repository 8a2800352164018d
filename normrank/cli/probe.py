"""``normrank probe DATA --model M``: per-document heat and drift by virtual SGD steps."""

from __future__ import annotations

from pathlib import Path

import typer

from normrank.cli.app import app


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
    import numpy as np
    from rich.console import Console

    from normrank.encoders import load_encoder
    from normrank.errors import InvalidParameterError, NormrankError
    from normrank.probe import load_pairs, probe, self_pairs, write_probe
    from normrank.probe.pairs import read_corpus

    console = Console(stderr=True)
    try:
        ids, titles, bodies, texts = read_corpus(data)
        if pairs == "self":
            pair_list, pair_src = self_pairs(titles, bodies), "self-pairs"
        else:
            pair_list, pair_src = load_pairs(
                data if pairs == "auto" else Path(pairs), titles=titles, texts=bodies
            )
        if batch_size > len(pair_list):
            console.print(
                f"[yellow]only {len(pair_list)} pairs: --batch-size {batch_size} -> {len(pair_list)}[/yellow]"
            )
            batch_size = len(pair_list)
        if probe_docs < 0:
            raise InvalidParameterError(f"--probe-docs must be >= 0, got {probe_docs}")
        if 0 < probe_docs < len(ids):
            sel = np.sort(np.random.default_rng(seed).choice(len(ids), probe_docs, replace=False))
            ids, texts = [ids[i] for i in sel], [texts[i] for i in sel]
        encoder = load_encoder(model)
        if not hasattr(encoder, "torch_module"):
            raise InvalidParameterError(f"{model} is not a torch model; the probe needs gradients")
        result = probe(
            encoder,
            texts,
            pair_list,
            steps=steps,
            batch_size=batch_size,
            lr=lr,
            temperature=temperature,
            scope=scope,
            seed=seed,
            encode_batch_size=encode_batch_size,
            fast_path=fast_path,
            progress=not quiet,
        )
        payload = write_probe(
            result,
            ids,
            out,
            settings={
                "data": str(data),
                "model": model,
                "pairs": pair_src,
                "probe_docs": len(ids),
                "title": f"{Path(data).name}, {model}, scope={scope}",
            },
            weight_decay=weight_decay if weight_decay > 0 else None,
        )
    except NormrankError as e:
        console.print(f"[red]error:[/red] {e}")
        raise typer.Exit(2) from e
    c, st, slope = payload["correlations"], result.settings, payload["loglog_slope_norm_vs_heat"]
    console.print(
        f"{len(ids)} docs, scope={st['scope']} ({st['path']}), {st['seconds']:.1f}s: "
        f"r(heat,norm)={c['heat_norm']:+.3f} r(drift,norm)={c['drift_norm']:+.3f} "
        f"r(drift,heat)={c['drift_heat']:+.3f} log-log slope={slope:.3f} -> {out}"
    )
