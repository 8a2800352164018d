"""The one mode decision (normrank.search.plan): a search's options become one plan whose method
says what runs, every step and ``SearchStats.path`` read it, and ``max_depth`` caps the depth of
every method."""

from __future__ import annotations

import ast
from pathlib import Path

import faiss
import numpy as np
import pytest

from normrank import NormIndex
from normrank.search import ann
from normrank.search.plan import METHODS, SearchOptions, plan_search

REPO = Path(__file__).resolve().parents[1]
D = 16
N = 2000


@pytest.fixture(scope="module")
def vectors():
    rng = np.random.default_rng(11)
    x = (rng.standard_normal((N, D)) * rng.lognormal(0, 0.5, (N, 1))).astype(np.float32)
    return x, rng.standard_normal((5, D)).astype(np.float32)


def _index(x: np.ndarray, factory: str, **options) -> NormIndex:
    idx = NormIndex(D, factory=factory, **options)
    if "IVF" in factory:
        idx.train(x)
    idx.add(x)
    return idx


@pytest.mark.parametrize("breadth", [{"efSearch": 64}, {"nprobe": 4, "nlist": 16}, {}])
@pytest.mark.parametrize(("method", "alpha"), [("adaptive", 0.5), ("adaptive", 0.0), ("overfetch", -1.0)])
def test_max_depth_caps_every_method(breadth, method, alpha):
    for k, max_depth in [(10, 12), (10, 3), (1, 1), (40, 100)]:
        options = SearchOptions(k, alpha, 10, method=method, max_depth=max_depth, breadth=breadth)
        plan = plan_search(options, 10**5)
        assert plan.method in METHODS and plan.k == k
        assert k <= plan.depth <= max(k, max_depth), (options, plan)
        assert plan.trust <= plan.depth


@pytest.mark.parametrize("factory", ["HNSW16", "IVF16,Flat"])
def test_overfetch_fetches_no_deeper_than_max_depth(vectors, factory, monkeypatch):
    """``ann="overfetch"`` used to return before ``max_depth`` applied: k * k_factor = 100 was
    fetched with max_depth 25. Single query and batch, through FAISS itself."""
    x, q = vectors
    idx = _index(x, factory, ann="overfetch", k_factor=10, max_depth=25)
    asked = []
    real = ann.search_raw
    monkeypatch.setattr(
        ann, "search_raw", lambda index, qs, depth, p=None: asked.append(depth) or real(index, qs, depth, p)
    )
    for queries in (q[0], q):
        _, ids, stats = idx.search(queries, 10, alpha=0.5, return_stats=True)
        assert (stats.path, stats.depth) == ("overfetch", 25)
        assert asked and max(asked) == 25
        assert (ids >= 0).all()
        asked.clear()
    idx.max_depth = None
    idx.search(q, 10, alpha=0.5)
    assert max(asked) == 100  # the cap, not the method, made the difference


@pytest.mark.parametrize("factory", ["Flat", "HNSW16", "IVF16,Flat"])
def test_stats_path_is_the_plan_method(vectors, factory):
    x, q = vectors
    for method, alpha, want in [
        ("adaptive", 0.5, "scan"),
        ("adaptive", 0.0, "cosine"),
        ("overfetch", 0.5, "overfetch"),
        ("overfetch", 0.0, "overfetch"),
    ]:
        idx = _index(x, factory, ann=method)
        if "IVF" in factory:
            faiss.extract_index_ivf(idx.faiss_index).nprobe = 4
        expected = "flat" if factory == "Flat" else want
        for queries in (q[0], q):
            assert idx.search(queries, 5, alpha=alpha, return_stats=True)[2].path == expected


def _positional_params(node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    args = node.args.posonlyargs + node.args.args
    return [a.arg for a in args if a.arg not in ("self", "cls")]


def _long_positional_lists(files: list[Path], *, calls: bool) -> tuple[list[str], list[str]]:
    """``(long, splat)``: definitions with more than five positional parameters (and, with
    ``calls``, calls passing more than five values by position), and calls that splat a list."""
    long, splat = [], []
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and len(_positional_params(node)) > 5:
                long.append(f"{path.name}:{node.lineno} {node.name}")
            if not isinstance(node, ast.Call):
                continue
            if calls and len(node.args) > 5:
                long.append(f"{path.name}:{node.lineno} {ast.unparse(node.func)}(...)")
            starred = any(isinstance(a, ast.Starred) for a in node.args)
            if starred and ast.unparse(node.func) != "self._add":  # (that one: a (ranks, scores) pair)
                splat.append(f"{path.name}:{node.lineno} {ast.unparse(node.func)}")
    return long, splat


def test_the_search_path_passes_no_long_positional_lists():
    """At most five values by position through the search path (options, plans and the state a
    search reads travel as objects; anything else by keyword), and no argument list splatted."""
    files = [*sorted((REPO / "normrank" / "search").glob("*.py")), REPO / "normrank/index/norm_index.py"]
    long, splat = _long_positional_lists(files, calls=False)
    assert not long and not splat, (long, splat)


def test_the_backends_pass_no_long_positional_lists():
    """The same rule in every backend (FAISS aside: Qdrant, Qdrant Edge, PostgreSQL), for the
    calls too: a query block, a plan or a table handle by position, the rest by keyword."""
    long, splat = _long_positional_lists(sorted((REPO / "normrank" / "backends").glob("*.py")), calls=True)
    assert not long and not splat, (long, splat)
