"""The frontier benchmark's pure methods (benchmarks/frontier.py) on 500 random documents: the
methods whose recall the chart reads as 1.0 by construction do reach it."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import faiss
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
_env = dict(os.environ)
# frontier imports speed.py, which pins thread counts in os.environ for its own runs: undone here.
frontier = pytest.importorskip("frontier")
os.environ.clear()
os.environ.update(_env)
from bench_exact import exact_top, recall, unit  # noqa: E402 - benchmarks/ is on the path above


@pytest.fixture(scope="module")
def docs():
    rng = np.random.default_rng(3)
    x = (rng.normal(size=(500, 32)) * rng.lognormal(0, 0.5, (500, 1))).astype(np.float32)
    return x, unit(x), np.linalg.norm(x, axis=1), unit(rng.normal(size=(20, 32)))


@pytest.mark.parametrize("alpha", [-1.0, 0.0, 1.0])
def test_brute_force_is_exact(docs, alpha):
    _, xu, norms, qu = docs
    got = frontier.brute_force(xu, frontier.weights(norms, alpha), qu)
    assert recall(got, exact_top(xu, norms, qu, alpha)) == 1.0


@pytest.mark.parametrize("alpha", [-1.5, 1.0])
def test_over_fetch_of_every_document_is_exact(docs, alpha):
    _, xu, norms, qu = docs
    index = faiss.IndexFlatIP(xu.shape[1])
    index.add(xu)
    got = frontier.over_fetch(index, qu, frontier.weights(norms, alpha), depth=xu.shape[0])
    assert recall(got, exact_top(xu, norms, qu, alpha)) == 1.0


def test_cheapest_point_at_the_target():
    pts = [{"recall": 0.99, "us_1": 1.0}, {"recall": 1.0, "us_1": 5.0}, {"recall": 0.996, "us_1": 3.0}]
    assert frontier.recall_at(pts)["us_1"] == 3.0
    assert frontier.recall_at(pts[:1]) is None


def test_single_query_recall_picks_the_single_point():
    # A point exact for the batch (normrank's flat path) but not for single queries is not the
    # single-query winner.
    pts = [
        {"recall": 1.0, "recall_1": 0.99, "us_1": 1.0, "us_100": 1.0},
        {"recall": 1.0, "recall_1": 1.0, "us_1": 2.0, "us_100": 3.0},
    ]
    assert frontier.recall_at(pts, nq=1)["us_1"] == 2.0
    assert frontier.recall_at(pts, nq=100)["us_100"] == 1.0


@pytest.mark.parametrize("alpha", [-1.0, 1.0])
def test_norm_bands_over_exact_indexes_are_exact(docs, alpha):
    x, xu, norms, qu = docs

    def build(u, factory):
        index = faiss.IndexFlatIP(u.shape[1])
        index.add(u)
        return index

    banded = frontier.Banded(x, build, lambda m: "Flat", n_bands=frontier.N_BANDS)
    got = banded.search(qu, alpha, frontier.K, start_depth=frontier.K)
    assert recall(got, exact_top(xu, norms, qu, alpha)) == 1.0


def test_the_full_grid_adds_what_the_lean_grid_cuts():
    """``--grid full`` (what ``--resume`` then measures where the JSON lacks it): efSearch 512 on
    the largest real set and every alpha on every index; the lean grid is unchanged by it."""
    lean = {c.name: c for c in frontier.configs("real-27k", 27_000, False)}
    full = {c.name: c for c in frontier.configs("real-27k", 27_000, False, "full")}
    assert "HNSW32 ef512" not in lean and set(full) == {*lean, "HNSW32 ef512"}
    for label in ("real-27k", "generated-100k"):
        lean = frontier.configs(label, 100_000 if label.startswith("gen") else 27_000, False)
        full = frontier.configs(label, 100_000 if label.startswith("gen") else 27_000, False, "full")
        assert all(c.alphas == frontier.ALPHAS for c in full)
        assert [c.name for c in full[: len(lean)]] == [c.name for c in lean]
        assert any(c.alphas != frontier.ALPHAS for c in lean) == label.startswith("gen")
    assert [c.name for c in frontier.configs(frontier.LABEL_1M, 10**6, False)] == [
        name for name, *_ in frontier.SCALE_1M
    ]
