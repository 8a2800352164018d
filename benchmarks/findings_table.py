"""Print the README's findings table (norm beside its controls) from benchmarks/results/sweep.json.

python benchmarks/findings_table.py [sweep.json]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ORDER = ["npl", "cacm", "nfcorpus-test-preprocessed", "scifact", "cisi", "cranfield", "medline", "adi"]
SHORT = {
    "all-MiniLM-L6-v2": "MiniLM-L6",
    "paraphrase-MiniLM-L3-v2": "L3-ONNX",
    "all-mpnet-base-v2": "mpnet",
    "use-multilingual-v3": "USE-m3",
}


def pct(x: float) -> str:
    return f"{0.0 if abs(x) < 1e-9 else x:+.1f}%"  # a gain of rounding noise prints as +0.0%, not -0.0%


def p(x: float) -> str:
    return f"{x:.0e}" if x < 1e-3 else f"{x:.3f}"


def main(path: str = "benchmarks/results/sweep.json") -> None:
    runs = [r for r in json.loads(Path(path).read_text())["runs"] if r["weight"] == "norm"]
    models = [m for m in SHORT if any(r["model"] == m for r in runs)]
    print(
        "| collection | model | cosine | Spearman(‖d‖, length) | norm ‖d‖^α | length len^β: β, gain "
        "| norm, length regressed out | shuffled norms: max gain / permutation p |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for ds in ORDER:
        first = True
        for m in models:
            r = next((r for r in runs if r["dataset"] == ds and r["model"] == m), None)
            if r is None:
                continue
            c = r["controls"]
            cos = r["metrics"]["ndcg@10"][r["alphas"].index(0.0)]
            ln, res, perm = c["length"], c["residual"], c["permutation"]
            beta = sorted(ln["cv"]["betas"])[len(ln["cv"]["betas"]) // 2]  # the folds' median beta
            print(
                f"| {ds if first else ''} | {SHORT[m]} | {cos:.4f} | {c['spearman_norm_length']:+.2f} "
                f"| {pct(r['cv']['gain_pct'])} ({p(r['cv']['p_value'])}) "
                f"| {beta:+.2f}: {pct(ln['cv']['gain_pct'])} ({p(ln['cv']['p_value'])}) "
                f"| {pct(res['cv']['gain_pct'])} ({p(res['cv']['p_value'])}) "
                f"| {pct(max(perm['null_cv_gain_pct']))} / {perm['p_value']:.3f} |"
            )
            first = False


if __name__ == "__main__":
    main(*sys.argv[1:])
