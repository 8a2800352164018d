"""benchmarks/compare_revisions.py's workload on a tiny index, in this process: the Flat answers it
records are numpy's exact top-k, and its comparison tells equal, one-ulp and different results
apart."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import assert_same_topk, brute_force

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
compare_revisions = pytest.importorskip("compare_revisions")

N, D, K, NQ = 400, 16, 5, 6
ALPHAS = (-1.0, 0.0, 1.0)


@pytest.fixture(scope="module")
def run():
    return compare_revisions.workload(
        n=N, dim=D, n_single=NQ, batch=NQ, k=K, kinds=("Flat", "HNSW16"), alphas=ALPHAS, batch_repeats=1
    )


def test_the_workload_records_the_exact_top_k_of_flat(run):
    docs, queries = compare_revisions.generate(N, D, NQ, seed=0)
    assert Path(run["normrank"]) == Path(__file__).resolve().parents[1] / "normrank"
    for alpha in ALPHAS:
        want = brute_force(docs, queries, alpha)
        for mode in ("single", f"batch{NQ}"):
            case = run["cases"][f"Flat alpha={alpha:+.1f} {mode}"]
            ids, scores = np.asarray(case["ids"]), np.asarray(case["scores"])
            assert ids.shape == (NQ, K) and case["us"] > 0
            assert_same_topk(*want, scores, ids, K)
    assert {name for name in run["cases"] if "HNSW16" in name} >= {"HNSW16 build", "HNSW16 alpha=+1.0 single"}


def test_the_comparison_tells_equal_ulp_and_different_apart(run):
    assert compare_revisions.compare_results(run, run) == ([], [])
    name = "Flat alpha=+1.0 batch6"
    case = run["cases"][name]
    scores = np.asarray(case["scores"], dtype=np.float32)
    nudged = {
        **run,
        "cases": {**run["cases"], name: {**case, "scores": np.nextafter(scores, np.inf).tolist()}},
    }
    assert compare_revisions.compare_results(run, nudged) == ([], [f"{name}: {scores.size} scores"])
    far = {**run, "cases": {**run["cases"], name: {**case, "scores": (scores + 0.01).tolist()}}}
    assert compare_revisions.compare_results(run, far)[0] == [f"{name}: {scores.size} scores"]
    ids = np.asarray(case["ids"])
    ids[2, [0, 1]] = ids[2, [1, 0]]
    swapped = {**run, "cases": {**run["cases"], name: {**case, "ids": ids.tolist()}}}
    assert compare_revisions.compare_results(run, swapped)[0] == [f"{name}: ids differ in 1 of {NQ} queries"]
    fewer = {**run, "cases": {key: v for key, v in run["cases"].items() if key != name}}
    assert compare_revisions.compare_results(run, fewer)[0] == [f"{name}: only in old"]
