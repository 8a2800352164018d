"""normrank.sweep.metrics (one registry, equal to ranx), the paired t-test (equal to scipy and
ranx) and the pooled calibration measures (equal to scikit-learn's definitions written out)."""

from __future__ import annotations

import importlib
import sys

import numpy as np
import pytest

from normrank.errors import InvalidParameterError, MissingDependencyError
from normrank.sweep import selection
from normrank.sweep.calibration import auroc, best_threshold
from normrank.sweep.metrics import METRICS, QrelsMatrix, metrics_help, parse_metrics, per_query_metric
from normrank.sweep.selection import cross_validate, cv_choose_many, median, paired_t_p, quantile

metrics_module = importlib.import_module("normrank.sweep.metrics")
ranx = pytest.importorskip("ranx")
stats = pytest.importorskip("scipy.stats")


def test_the_ranx_check_without_ranx_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ranx", None)  # `import ranx` raises ImportError
    with pytest.raises(MissingDependencyError, match=r"normrank\[bench\]"):
        selection.import_ranx()


def test_metric_parsing() -> None:
    assert parse_metrics("ndcg@10, recall@100,ndcg@10") == ["ndcg@10", "recall@100"]
    for bad in ("ndcg", "foo@10", "ndcg@0", ""):
        with pytest.raises(InvalidParameterError):
            parse_metrics(bad)


def random_case(rng: np.random.Generator, nq: int = 40, n: int = 60, k: int = 20):
    doc_ids = [f"d{i}" for i in range(n)]
    qrels = []
    for _ in range(nq):
        judged = {
            f"d{j}": int(rng.integers(0, 4)) for j in rng.choice(n, int(rng.integers(0, 6)), replace=False)
        }
        if rng.random() < 0.3:
            judged["not-in-corpus"] = 2  # relevant but unretrievable: still counts for recall / IDCG
        qrels.append(judged)
    pos = np.stack([rng.permutation(n)[:k] for _ in range(nq)])
    pos[0, k - 3 :] = -1  # a short ranking (FAISS padding)
    return doc_ids, qrels, pos


@pytest.mark.parametrize("dense", [True, False])  # relevance from the dense table / the sorted keys
@pytest.mark.parametrize("metric", ["ndcg@10", "ndcg@3", "recall@20", "mrr@10", "precision@5", "hit_rate@10"])
def test_vectorised_metrics_equal_ranx(metric: str, dense: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if not dense:
        monkeypatch.setattr(metrics_module, "_DENSE_RELEVANCE", 0)
    rng = np.random.default_rng(1)
    doc_ids, qrels, pos = random_case(rng)
    got = per_query_metric(metric, pos[None], QrelsMatrix(qrels, {d: i for i, d in enumerate(doc_ids)}))[0]
    qids = [f"q{i}" for i in range(len(qrels))]
    qd = {q: j for q, j in zip(qids, qrels, strict=True) if any(v > 0 for v in j.values())}
    run = {
        q: {doc_ids[p]: float(pos.shape[1] - r) for r, p in enumerate(pos[i]) if p >= 0}
        for i, q in enumerate(qids)
        if q in qd
    }
    ref_run = ranx.Run(run)
    ranx.evaluate(ranx.Qrels(qd), ref_run, metric, make_comparable=True)
    keep = [i for i, q in enumerate(qids) if q in qd]
    ref = [ref_run.scores[metric][qids[i]] for i in keep]
    np.testing.assert_allclose(got[keep], ref, atol=1e-12)
    # Queries without any relevant document score 0 (ranx drops them; they never reach the sweep).
    assert np.all(got[[i for i in range(len(qids)) if i not in keep]] == 0)


@pytest.mark.parametrize("scale", [1, 100, 1.5])  # grades of one byte; beyond 255; fractional
@pytest.mark.parametrize("dense", [True, False])
def test_relevance_equals_the_qrels_lookup(
    dense: bool, scale: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each retrieved position's grade against a dict lookup, over several rankings at once, with
    -1 pads in the first and the last query (the dense table sends them to its zero column)."""
    if not dense:
        monkeypatch.setattr(metrics_module, "_DENSE_RELEVANCE", 0)
    rng = np.random.default_rng(4)
    doc_ids, qrels, pos = random_case(rng)
    qrels = [{d: g * scale for d, g in judged.items()} for judged in qrels]
    pos = np.stack([pos, np.roll(pos, 1, axis=0), pos[:, ::-1]])  # (3, nq, k)
    pos[:, -1, :2] = -1
    pos[1, 0, :] = -1
    got = QrelsMatrix(qrels, {d: i for i, d in enumerate(doc_ids)}).relevance(pos)
    want = np.zeros(pos.shape)
    for (a, q, r), p in np.ndenumerate(pos):
        g = qrels[q].get(doc_ids[p], 0) if p >= 0 else 0
        want[a, q, r] = g if g >= 1 else 0
    np.testing.assert_array_equal(got, want)
    assert got.dtype == np.float64


def test_registry_builds_the_error_and_the_help() -> None:
    with pytest.raises(InvalidParameterError) as e:
        parse_metrics("bogus@3")
    assert all(name in str(e.value) for name in METRICS)
    assert all(name in metrics_help() for name in METRICS)
    with pytest.raises(InvalidParameterError):
        per_query_metric("bogus@3", np.zeros((1, 1, 3), dtype=np.int64), QrelsMatrix([{}], {"a": 0}))


def test_cli_help_lists_the_registry() -> None:
    from typer.testing import CliRunner

    from normrank.cli import app

    out = CliRunner().invoke(app, ["sweep", "--help"], env={"COLUMNS": "200"}).output
    assert all(name in out for name in METRICS)


@pytest.mark.parametrize("n", [2, 3, 7, 40, 300])
def test_paired_t_p_equals_scipy(n: int) -> None:
    rng = np.random.default_rng(n)
    for shift in (0.0, 0.02, 0.2, 2.0):
        a, b = rng.random(n), rng.random(n) + shift
        assert paired_t_p(a, b) == pytest.approx(stats.ttest_rel(a, b).pvalue, rel=1e-9, abs=1e-300)
    assert paired_t_p(a, a) == 1.0
    assert paired_t_p(a, a + 0.1) < 1e-10  # every query moved by the same amount


def test_paired_t_p_ignores_summation_order_noise() -> None:
    # The same rankings scored by two NDCG implementations differ in the last bits; that is no
    # evidence of a difference (a real rank change moves NDCG@10 by > 1e-4).
    rng = np.random.default_rng(5)
    a = rng.random(300)
    noisy = a + rng.choice([-1, 0, 1], size=300) * np.spacing(a)
    assert paired_t_p(a, noisy) == 1.0
    real = noisy.copy()
    real[:40] += rng.random(40) * 0.1  # forty queries really changed, the rest only by rounding
    assert paired_t_p(a, real) == pytest.approx(
        stats.ttest_rel(a, np.where(np.arange(300) < 40, real, a)).pvalue, rel=1e-9
    )


@pytest.mark.parametrize("chunk", [selection._CV_CHUNK, 1, 450])  # one block; one sweep; two per block
def test_cv_choose_many_equals_cross_validate(monkeypatch, chunk: int) -> None:
    monkeypatch.setattr(selection, "_CV_CHUNK", chunk)
    rng = np.random.default_rng(0)
    alphas = [-1.0, -0.5, 0.0, 0.5]
    pq = np.round(rng.random((6, 4, 50)), 1)  # rounded: many ties, the tie rule matters
    _, fold, _ = cross_validate(pq[0], alphas, 5, seed=3)
    for f in range(5):  # alpha = +0.5 ties -0.5 on every union of folds, yet differs per query
        sel = np.flatnonzero(fold == f)
        pq[:, 3, sel] = pq[:, 1, rng.permutation(sel)]
        pq[:, 1, sel] += 0.5  # and both are the best, so the tie is what decides
        pq[:, 3, sel] += 0.5
    got = cv_choose_many(pq, alphas, fold)
    for b in range(6):
        _, _, chosen = cross_validate(pq[b], alphas, 5, seed=3)
        np.testing.assert_array_equal(got[b], pq[b][chosen, np.arange(50)])


def test_quantile_and_median_are_numpys_bits() -> None:
    rng = np.random.default_rng(5)
    for n in [*range(1, 25), 99, 100, 1000]:
        x = rng.standard_normal((n, 3)) * 10 ** rng.uniform(-3, 3)
        x[: n // 2] = np.round(x[: n // 2], 1)  # ties
        for q in (0.0, 0.05, 0.25, 0.5, 0.9, 0.95, 1.0, rng.uniform()):
            np.testing.assert_array_equal(quantile(x, q), np.quantile(x, q, axis=0))
            assert quantile(x[:, 0], q) == np.quantile(x[:, 0], q)
        assert median(x[:, 1]) == np.median(x[:, 1])


def test_auroc_and_threshold_against_definitions() -> None:
    rng = np.random.default_rng(1)
    s = np.round(rng.random(400), 2)  # ties
    y = rng.random(400) < 0.3 + 0.4 * s
    pos, neg = s[y], s[~y]
    pairs = (pos[:, None] > neg[None]).mean() + 0.5 * (pos[:, None] == neg[None]).mean()
    assert auroc(s, y) == pytest.approx(pairs, rel=1e-12)
    best = best_threshold(s, y)
    f1s = []
    for t in np.unique(s):
        keep = s >= t
        p, r = y[keep].mean(), y[keep].sum() / y.sum()
        f1s.append((2 * p * r / (p + r) if p + r else 0.0, p))
    f1, p = max(f1s)
    assert best["f1"] == pytest.approx(f1) and best["precision"] == pytest.approx(p)


def test_calibration_per_fold_against_brute_force() -> None:
    """cos's held-out AUROC = the mean over folds of the pairwise definition on that fold's pairs
    (top-100 cosine candidates); with γ = 0 only, every form equals cosine."""
    from normrank.sweep.calibration import calibration

    rng = np.random.default_rng(4)
    nq, n = 24, 150
    q, d = rng.standard_normal((nq, 6)), rng.standard_normal((n, 6)) * rng.uniform(0.5, 2, (n, 1))
    qrels = [{f"d{j}": 1 for j in rng.choice(n, 5, replace=False)} for _ in range(nq)]
    qm = QrelsMatrix(qrels, {f"d{j}": j for j in range(n)})
    _, fold, _ = cross_validate(np.zeros((1, nq)), [0.0], 4, seed=1)
    got = calibration(q, d, qm, fold, [0.0])
    cos = (q / np.linalg.norm(q, axis=1, keepdims=True)) @ (d / np.linalg.norm(d, axis=1, keepdims=True)).T
    top = np.argsort(-cos, axis=1, kind="stable")[:, :100]
    rel = np.array([[f"d{j}" in qrels[i] for j in top[i]] for i in range(nq)])
    s = np.take_along_axis(cos, top, 1)
    want = []
    for f in range(4):
        ss, yy = s[fold == f].ravel(), rel[fold == f].ravel()
        pos, neg = ss[yy], ss[~yy]
        want.append((pos[:, None] > neg[None]).mean() + 0.5 * (pos[:, None] == neg[None]).mean())
    assert got["cos"]["auroc"] == pytest.approx(np.mean(want), rel=1e-6)
    for form in ("query", "symmetric"):
        assert got[form]["auroc"] == pytest.approx(got["cos"]["auroc"], rel=1e-12)
        assert got[form]["threshold_precision"] == pytest.approx(got["cos"]["threshold_precision"])
