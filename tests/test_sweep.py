"""The α-sweep: grids, metrics against ranx, exact ranking against numpy, CV, weights, outputs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import assert_same_topk
from hypothesis import given, settings
from hypothesis import strategies as st

from normrank.corpus.beir import Dataset
from normrank.corpus.embedding_cache import EmbeddingCache
from normrank.errors import InvalidInputError, InvalidParameterError
from normrank.search.flat import reweighted_topk
from normrank.sweep import (
    cross_validate,
    load_weights,
    parse_alphas,
    rank_all_alphas,
    sweep_embeddings,
)
from normrank.sweep.report import write_all

ranx = pytest.importorskip("ranx")


def test_default_grid_is_13_values_with_zero() -> None:
    g = parse_alphas()
    assert g == [-2 + 0.25 * i for i in range(13)]
    assert 0.0 in g


def test_grid_forms() -> None:
    assert parse_alphas("-1,0.5") == [-1.0, 0.0, 0.5]  # 0 is always added
    assert parse_alphas("0.5:1:0.25") == [0.0, 0.5, 0.75, 1.0]
    for bad in ("", "a:b:c", "1:0:0.1", "0:1:0", "nan"):
        with pytest.raises(InvalidParameterError):
            parse_alphas(bad)


@pytest.mark.parametrize("unsorted", [False, True])
@pytest.mark.parametrize("block_floats", [None, 600])  # one query block; blocks of 2 queries
def test_rank_all_alphas_is_exact(monkeypatch, unsorted: bool, block_floats: int | None) -> None:
    from normrank.sweep import rank

    if block_floats is not None:
        monkeypatch.setattr(rank, "SWEEP_BLOCK_FLOATS", block_floats)
    rng = np.random.default_rng(2)
    docs = rng.standard_normal((300, 16)) * rng.uniform(0.2, 3.0, (300, 1))
    q = rng.standard_normal((7, 16))
    alphas = [0.75, -2.0, 0.0, -0.5] if unsorted else [-2.0, -0.5, 0.0, 0.75]
    scores, pos, _ = rank_all_alphas(q, docs, None, alphas, 25)
    norms = np.linalg.norm(docs, axis=1)
    cos = (q / np.linalg.norm(q, axis=1, keepdims=True)) @ (docs / norms[:, None]).T
    for ai, a in enumerate(alphas):
        # float32 BLAS against float64 numpy: the same ranking up to scores within rounding
        # (ties in any order), every score within 2e-5 of numpy's
        assert_same_topk(cos * norms**a, np.arange(300), scores[ai], pos[ai], 25, tol=2e-5)


def test_cosine_product_threads_keep_rankings_within_rounding_and_are_restored(monkeypatch) -> None:
    """Small products run on fewer of FAISS's threads (rank._THREAD_WORK). The thread count is
    not bit-neutral on every BLAS kernel (OpenBLAS's Zen kernel blocks the sums per thread), so
    what must hold is: the two runs' scores within float32's rounding bound of a d-term dot product
    of unit rows (2 gamma_d, gamma_d = d u / (1 - d u), times w**alpha, plus the multiply's
    rounding), their rankings equal up to scores that close, each thread count reproducible to
    the bit, and the caller's thread setting back afterwards, also when the product raises."""
    import faiss

    from normrank.sweep import rank

    rng = np.random.default_rng(7)
    n, d, k = 2000, 48, 30
    docs = rng.standard_normal((n, d)) * rng.uniform(0.2, 3.0, (n, 1))
    q = rng.standard_normal((64, d))
    alphas = [-1.0, 0.0, 1.0]
    caller = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(2)  # two threads against one, whatever the environment set
    try:
        got = {}
        for work in (1, 1 << 62, 1 << 62):  # every thread; one thread; one thread again
            monkeypatch.setattr(rank, "_THREAD_WORK", work)
            got.setdefault(work, []).append(rank_all_alphas(q, docs, None, alphas, k)[:2])
            assert faiss.omp_get_max_threads() == 2
        with pytest.raises(RuntimeError), rank._product_threads(1):
            assert faiss.omp_get_max_threads() == 1
            raise RuntimeError("the block fails")
        assert faiss.omp_get_max_threads() == 2
    finally:
        faiss.omp_set_num_threads(caller)
    (one, again), (many,) = got[1 << 62], got[1]
    for a, b in zip(one, again, strict=True):  # the same calls in the same order: the same bits
        np.testing.assert_array_equal(a, b)
    u = 2.0**-24
    gamma = d * u / (1 - d * u)
    norms = np.linalg.norm(docs.astype(np.float32).astype(np.float64), axis=1)
    cos = (q / np.linalg.norm(q, axis=1, keepdims=True)) @ (docs / norms[:, None]).T
    exact = [cos * norms**alpha for alpha in alphas]
    for ai, alpha in enumerate(alphas):
        w = norms**alpha
        tol = (2 * gamma + 4 * u) * w  # per document
        (s1, p1), (s2, p2) = (one[0][ai], one[1][ai]), (many[0][ai], many[1][ai])
        # The r-th best of perturbed values moves by at most the largest perturbation.
        assert np.all(np.abs(s1.astype(np.float64) - s2) <= tol.max())
        for row in range(q.shape[0]):
            by_doc = dict(zip(p2[row].tolist(), s2[row].tolist(), strict=True))
            cut = min(s1[row, -1], s2[row, -1]) - 2 * tol.max()
            for doc, score in zip(p1[row].tolist(), s1[row].tolist(), strict=True):
                if doc in by_doc:
                    assert abs(score - by_doc[doc]) <= tol[doc], (alpha, row, doc)
                else:  # only a near-tie at the k-th place may enter one ranking and not the other
                    assert score >= cut, (alpha, row, doc)
            # Equal rankings up to near-ties: a rank holds different documents only where their
            # exact scores are as close as the two runs' rounding can bring them.
            for r in np.flatnonzero(p1[row] != p2[row]):
                assert abs(exact[ai][row, p1[row, r]] - exact[ai][row, p2[row, r]]) <= 3 * tol.max(), (
                    alpha,
                    row,
                )


@settings(max_examples=150, deadline=None)
@given(
    nq=st.integers(1, 5),
    n=st.integers(1, 260),
    k=st.integers(1, 40),
    n_weights=st.integers(1, 6),
    spread=st.floats(0.0, 2.0),
    tied=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_reweighted_topk_equals_brute_force_with_ties(
    nq: int, n: int, k: int, n_weights: int, spread: float, tied: bool, seed: int
) -> None:
    """The chained bound against numpy's stable sort of every re-weighted matrix: same ids, same
    scores, same order, including equal scores (kept by position) and rows shorter than k."""
    rng = np.random.default_rng(seed)
    scores = rng.standard_normal((nq, n)).astype(np.float32)
    weights = np.exp(np.sort(rng.normal(0, spread, (n_weights, 1)), axis=0) * rng.normal(0, 1, n))
    if tied:  # few distinct values: many equal scores at every rank
        scores = (np.round(scores * 2) / 2).astype(np.float32)
        weights = np.round(weights * 2) / 2 + 0.5
    weights = weights.astype(np.float32)
    first = int(rng.integers(0, n_weights))
    values, positions = reweighted_topk(scores, weights, k, first)
    kk = min(k, n)  # exact: one float32 multiply per score on both sides (no BLAS), then selection
    for i in range(n_weights):
        ref = scores * weights[i]
        want = np.argsort(-ref, axis=1, kind="stable")[:, :kk]
        np.testing.assert_array_equal(positions[i, :, :kk], want)
        np.testing.assert_array_equal(values[i, :, :kk], np.take_along_axis(ref, want, axis=1))
        assert np.all(positions[i, :, kk:] == -1) and np.all(np.isneginf(values[i, :, kk:]))


def test_rank_pads_when_fewer_docs_than_k() -> None:
    rng = np.random.default_rng(3)
    scores, pos, _ = rank_all_alphas(rng.standard_normal((2, 4)), rng.standard_normal((5, 4)), None, [0.0], 8)
    assert np.all(pos[0, :, 5:] == -1) and np.all(np.isneginf(scores[0, :, 5:]))


def test_zero_vector_rejected() -> None:
    with pytest.raises(InvalidInputError):
        rank_all_alphas(np.ones((1, 3)), np.zeros((2, 3)), None, [0.0], 1)


def test_cross_validation_picks_planted_alpha_and_is_seeded() -> None:
    alphas = [-1.0, 0.0, 0.5]
    rng = np.random.default_rng(4)
    pq = rng.random((3, 50)) * 0.1
    pq[2] += 0.5  # alpha = 0.5 is best on every query
    fa, fold, chosen = cross_validate(pq, alphas, 5, seed=7)
    assert fa == [0.5] * 5 and np.all(chosen == 2)
    assert np.bincount(fold).tolist() == [10] * 5
    assert np.array_equal(cross_validate(pq, alphas, 5, seed=7)[1], fold)
    # More folds than queries: leave-one-out.
    assert len(cross_validate(pq[:, :3], alphas, 10)[0]) == 3
    with pytest.raises(InvalidParameterError):
        cross_validate(pq, alphas, 1)


def test_cv_ties_prefer_cosine() -> None:
    fa, _, _ = cross_validate(np.ones((3, 10)), [-1.0, 0.0, 1.0], 2)
    assert fa == [0.0, 0.0]


def planted_dataset(
    seed: int = 5, nq: int = 60, n: int = 400, d: int = 24
) -> tuple[Dataset, np.ndarray, np.ndarray]:
    """Relevant documents point near their query but have SMALL norms; distractors sit a bit
    closer in angle with LARGE norms, so discounting the norm (alpha < 0) must help."""
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((nq, d))
    docs = rng.standard_normal((n, d))
    norms = rng.uniform(1.0, 2.0, n)
    qrels = {}
    for i in range(nq):
        rel, dis = 2 * i, 2 * i + 1
        docs[rel] = q[i] + 0.9 * rng.standard_normal(d)
        docs[dis] = q[i] + 0.6 * rng.standard_normal(d)
        norms[rel], norms[dis] = 0.5, 4.0
        qrels[f"q{i}"] = {f"d{rel}": 1}
    docs = docs / np.linalg.norm(docs, axis=1, keepdims=True) * norms[:, None]
    ds = Dataset(
        "planted", [f"d{j}" for j in range(n)], [""] * n, [""] * n,
        [f"q{i}" for i in range(nq)], [""] * nq, qrels,
    )  # fmt: skip
    return ds, q.astype(np.float32), docs.astype(np.float32)


def test_sweep_finds_negative_alpha_on_planted_signal(tmp_path: Path) -> None:
    ds, q, docs = planted_dataset()
    run = sweep_embeddings(
        ds, "toy", q, docs, alphas=parse_alphas(), metrics=["ndcg@10", "recall@100"], folds=5, ranx_check=True
    )
    assert run.best_alpha < 0 and run.gain_pct() > 5
    assert all(a < 0 for a in run.cv_alphas) and run.cv_gain_pct > 5
    assert 0 <= run.p_value < 0.05
    assert run.ranx_check["max_abs_diff_cosine"] < 1e-9
    # The scipy paired test on our per-query arrays is ranx's compare(stat_test="student").
    assert run.ranx_check["abs_diff_p_value"] < 1e-9 and run.p_value == pytest.approx(
        run.ranx_check["p_value_ranx"]
    )
    assert run.timing["cosine_eval"] > 0
    # The per-alpha mean equals an independent numpy ranking + ranx for one alpha.
    norms = np.linalg.norm(docs.astype(np.float64), axis=1)
    cos = (q / np.linalg.norm(q, axis=1, keepdims=True)) @ (docs / norms[:, None]).T
    ai = run.alphas.index(-1.0)
    top = np.argsort(-(cos * norms**-1.0), axis=1)[:, :10]
    ref_run = {f"q{i}": {f"d{j}": float(10 - r) for r, j in enumerate(top[i])} for i in range(len(q))}
    ref = ranx.evaluate(ranx.Qrels(ds.qrels), ranx.Run(ref_run), "ndcg@10")
    assert abs(run.mean("ndcg@10")[ai] - ref) < 1e-9

    write_all([run], tmp_path)
    data = json.loads((tmp_path / "sweep.json").read_text())
    (entry,) = data["runs"]
    for key, typ in [("dataset", str), ("model", str), ("n_docs", int), ("n_queries", int), ("alphas", list),
                     ("metrics", dict), ("best_alpha", float), ("cv", dict), ("norm_stats", dict)]:  # fmt: skip
        assert isinstance(entry[key], typ), key
    assert len(entry["metrics"]["ndcg@10"]) == len(entry["alphas"]) == 13
    assert (
        set(entry["cv"]) >= {"alphas", "ndcg@10", "gain_pct", "p_value"} and len(entry["cv"]["alphas"]) == 5
    )
    assert set(entry["norm_stats"]) == {"mean", "std", "cv"}
    assert (tmp_path / "sweep.png").stat().st_size > 1000
    assert "| planted | toy |" in (tmp_path / "sweep.md").read_text()
    lines = (tmp_path / "per_query.csv").read_text().splitlines()
    assert len(lines) == 1 + len(q) and lines[0].startswith("dataset,model,query_id")


def test_weights_equal_to_norms_reproduce_the_norm_sweep(tmp_path: Path) -> None:
    ds, q, docs = planted_dataset(nq=20)
    norms = np.linalg.norm(docs, axis=1)
    f = tmp_path / "w.npz"
    order = np.random.default_rng(0).permutation(len(ds.doc_ids))  # any order: aligned by id
    np.savez(f, doc_ids=np.array(ds.doc_ids)[order], heat=norms[order])
    name, w = load_weights(f"{f}:heat", ds.doc_ids)
    assert name == "heat"
    a = sweep_embeddings(ds, "m", q, docs, alphas=[-1.0, 0.0, 1.0], metrics=["ndcg@10"], folds=2)
    b = sweep_embeddings(
        ds, "m", q, docs, alphas=[-1.0, 0.0, 1.0], metrics=["ndcg@10"], folds=2, weights=w, weight_name=name
    )
    assert b.model == "m+heat"
    np.testing.assert_allclose(a.per_query["ndcg@10"], b.per_query["ndcg@10"])


def test_weights_validation(tmp_path: Path) -> None:
    ids = ["a", "b"]
    f = tmp_path / "w.npz"
    np.savez(f, doc_ids=np.array(["a"]), heat=np.array([1.0]))
    with pytest.raises(InvalidInputError, match="no 'heat' weight"):
        load_weights(f"{f}:heat", ids)
    np.savez(f, doc_ids=np.array(ids), heat=np.array([1.0, 0.0]))
    with pytest.raises(InvalidInputError, match="> 0"):
        load_weights(f"{f}:heat", ids)
    with pytest.raises(InvalidInputError, match="needs arrays"):
        load_weights(f"{f}:drift", ids)
    np.savez(f, doc_ids=np.array(ids, dtype=object), heat=np.array([1.0, 2.0]))
    with pytest.raises(ValueError):  # object arrays need pickle, which is refused
        load_weights(f"{f}:heat", ids)
    with pytest.raises(InvalidParameterError):
        load_weights("nokey", ids)


def test_embedding_cache_roundtrip_and_no_reencode(tmp_path: Path) -> None:
    cache = EmbeddingCache(tmp_path)
    calls = []

    class Fake:
        kind = "fake"

        def encode(self, texts, batch_size=64, show_progress=False):
            calls.append(len(texts))
            return np.arange(len(texts) * 3, dtype=np.float32).reshape(-1, 3) + 1

    def factory():
        return Fake()

    ids, texts = ["a", "b"], ["x", "y"]
    e1, hit1 = cache.get_or_encode("m", "ds", "corpus", ids, texts, factory, show_progress=False)
    e2, hit2 = cache.get_or_encode("m", "ds", "corpus", ids, texts, factory, show_progress=False)
    assert (hit1, hit2) == (False, True) and calls == [2]
    np.testing.assert_array_equal(e1, e2)
    (meta,) = cache.entries()
    assert meta["n"] == 2 and meta["dim"] == 3 and meta["model"] == "m"
    # Different ids (order or content) -> re-encoded, never a stale hit.
    cache.get_or_encode("m", "ds", "corpus", ["b", "a"], texts, factory, show_progress=False)
    assert calls == [2, 2]
    # Different fields or model -> a different entry.
    key = cache.key("m", "title+text", ids, texts)
    assert cache.key("m", "text", ids, texts) != key and cache.key("m2", "title+text", ids, texts) != key


def test_by_depth_buckets_heading_path_queries() -> None:
    ds, q, docs = planted_dataset(nq=40)
    # Re-key the queries as TREC CAR heading paths of depth 1..5.
    new_ids = [f"enwiki:Page{i}" + "/Sec" * (i % 5) for i in range(40)]
    ds.qrels = {new: ds.qrels[old] for old, new in zip(ds.query_ids, new_ids, strict=True)}
    ds.query_ids = new_ids
    run = sweep_embeddings(ds, "m", q, docs, alphas=[-1.0, 0.0], metrics=["ndcg@10"], folds=2, by_depth=True)
    assert set(run.by_depth) == {"d=1", "d=2", "d=3", "d=4+"}
    assert run.by_depth["d=4+"]["n_queries"] == 16 and run.by_depth["d=1"]["n_queries"] == 8
    nd = run.per_query["ndcg@10"]
    sel = [i for i, qid in enumerate(run.query_ids) if qid.count("/") == 1]
    np.testing.assert_allclose(run.by_depth["d=2"]["ndcg@10"], nd[:, sel].mean(axis=1))
    # Flat ids: no depth table, and the user is told why (not an empty table).
    ds2, q2, d2 = planted_dataset(nq=10)
    with pytest.warns(UserWarning, match="no query has a heading path"):
        flat = sweep_embeddings(
            ds2, "m", q2, d2, alphas=[0.0, 1.0], metrics=["ndcg@10"], folds=2, by_depth=True
        )
    assert flat.by_depth is None


@pytest.mark.parametrize("shape", [(1, 3), (511, 16), (513, 16), (2000, 40)])
def test_blockwise_float64_norms_equal_one_pass(shape: tuple[int, int]) -> None:
    from normrank.sweep.run import _norms64

    rng = np.random.default_rng(shape[0])
    x = (rng.standard_normal(shape) * rng.random((shape[0], 1)) * 5).astype(np.float32)
    assert np.array_equal(_norms64(x), np.linalg.norm(x.astype(np.float64), axis=1))
    assert np.array_equal(_norms64(x, rows=7), np.linalg.norm(x.astype(np.float64), axis=1))
