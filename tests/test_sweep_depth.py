"""The depth sweep's honesty (issue 23): per-bucket oracle, CV gain and p, controls and the
permutation null, and the depth-gradient test, against an independent numpy computation on a
small synthetic collection whose norm signal grows with depth (fast, no model)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from normrank.corpus.beir import Dataset
from normrank.sweep import cross_validate, paired_t_p, sweep_embeddings
from normrank.sweep.depth import query_depths, rank_gradient
from normrank.sweep.null import permutations
from normrank.sweep.report import write_all

ALPHAS = [-1.0, -0.5, 0.0, 0.5]
K = 9


def depth_dataset(
    seed: int = 3, nq: int = 80, n: int = 400, d: int = 16
) -> tuple[Dataset, np.ndarray, np.ndarray]:
    """Queries of depth 1..4 (ids are heading paths); for deep queries the relevant document has a
    small norm and a distractor closer in angle a large one, so α < 0 helps them and not the
    shallow ones."""
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((nq, d))
    docs = rng.standard_normal((n, d))
    norms = rng.uniform(1.0, 2.0, n)
    qrels, qids = {}, []
    for i in range(nq):
        depth = 1 + i % 4
        qid = "/".join([f"Page {i}"] + [f"Sec {j}" for j in range(1, depth)])
        qids.append(qid)
        rel, dis = 2 * i, 2 * i + 1
        docs[rel] = q[i] + 0.8 * rng.standard_normal(d)
        docs[dis] = q[i] + (0.6 if depth >= 3 else 2.0) * rng.standard_normal(d)
        # shallow queries: norms at random, so α helps some and hurts others (the folds disagree)
        norms[rel], norms[dis] = (0.5, 4.0) if depth >= 3 else rng.uniform(1.0, 2.0, 2)
        qrels[qid] = {f"d{rel}": 1}
    docs = docs / np.linalg.norm(docs, axis=1, keepdims=True) * norms[:, None]
    ds = Dataset("depthy", [f"d{j}" for j in range(n)], [f"w{j} " * (1 + j % 7) for j in range(n)], [""] * n,
                 qids, [""] * nq, qrels)  # fmt: skip
    return ds, q.astype(np.float32), docs.astype(np.float32)


def ndcg10_numpy(q: np.ndarray, docs: np.ndarray, w: np.ndarray, alpha: float, rel: list[int]) -> np.ndarray:
    """Per-query NDCG@10 of cos * w**alpha by a full numpy ranking (one relevant document each)."""
    qn = q / np.linalg.norm(q, axis=1, keepdims=True)
    dn = docs / np.linalg.norm(docs, axis=1, keepdims=True)
    s = (qn @ dn.T).astype(np.float32) * (w.astype(np.float32) ** np.float32(alpha))[None, :]
    out = np.zeros(len(rel))
    for i, r in enumerate(rel):
        rank = int(np.sum(s[i] > s[i, r])) + 1  # no ties in continuous data
        out[i] = 1.0 / np.log2(rank + 1) if rank <= 10 else 0.0
    return out


@pytest.fixture(scope="module")
def run_and_data():
    ds, q, docs = depth_dataset()
    run = sweep_embeddings(ds, "toy", q, docs, alphas=ALPHAS, metrics=["ndcg@10"], folds=5, by_depth=True,
                           permutations=K, seed=0, length_unit="words")  # fmt: skip
    return run, ds, q, docs


def test_pinned_depth_fields_in_sweep_json(run_and_data, tmp_path: Path) -> None:
    run, *_ = run_and_data
    write_all([run], tmp_path)
    entry = json.loads((tmp_path / "sweep.json").read_text())["runs"][0]
    depth = entry["depth"]
    assert set(depth) == {"d=1", "d=2", "d=3", "d=4+", "gradient"}
    for b in ("d=1", "d=2", "d=3", "d=4+"):
        assert {"n_queries", "best_alpha", "gain_pct", "cv_gain_pct", "p_value"} <= set(depth[b])
        assert depth[b]["n_queries"] == 20
        assert {"length", "residual", "permutation"} <= set(depth[b])
    assert {"statistic", "p_value"} <= set(depth["gradient"])
    assert {"length", "residual", "shuffled_norms"} <= set(depth["gradient"]["controls"])
    assert "_null_ndcg" not in json.dumps(entry) and "_null_ndcg" not in run.controls["permutation"]
    assert (tmp_path / "depth.png").stat().st_size > 0
    assert "Table 3 layout" in (tmp_path / "sweep.md").read_text()


def test_bucket_values_equal_numpy(run_and_data) -> None:
    run, ds, q, docs = run_and_data
    rel = [ds.doc_ids.index(next(iter(ds.qrels[x]))) for x in run.query_ids]
    norms = np.linalg.norm(docs.astype(np.float64), axis=1)
    pq = np.stack([ndcg10_numpy(q, docs, norms, a, rel) for a in ALPHAS])
    np.testing.assert_allclose(pq, run.per_query["ndcg@10"], atol=1e-12)
    depths = np.array([1 + x.count("/") for x in run.query_ids])
    for b, sel in (("d=1", depths == 1), ("d=3", depths == 3), ("d=4+", depths >= 4)):
        e = run.by_depth[b]
        means = pq[:, sel].mean(axis=1)
        ties = [i for i in range(len(ALPHAS)) if means[i] >= means.max() - 1e-12]
        best = min(ties, key=lambda i: (abs(ALPHAS[i]), ALPHAS[i]))  # ties go to the α nearest cosine
        assert e["best_alpha"] == ALPHAS[best]
        assert e["gain_pct"] == pytest.approx(100 * (means[best] - means[2]) / means[2])
        # Within-bucket CV: α chosen on the other folds of the bucket's queries.
        fa, _fold, chosen = cross_validate(pq[:, sel], ALPHAS, 5, 0)
        held = pq[:, sel][chosen, np.arange(sel.sum())]
        assert e["cv_gain_pct"] == pytest.approx(100 * (held.mean() - means[2]) / means[2])
        assert e["p_value"] == pytest.approx(paired_t_p(pq[2, sel], held))
        assert e["cv_alphas"] == fa
        # The run's global CV α scored on the bucket.
        assert e["global_cv_gain_pct"] == pytest.approx(
            100 * (run.cv_per_query[sel].mean() - means[2]) / means[2]
        )
    # The planted signal: α < 0 helps the deep buckets, not the page-level one.
    assert run.by_depth["d=4+"]["best_alpha"] < 0 and run.by_depth["d=4+"]["cv_gain_pct"] > 5
    assert run.by_depth["d=4+"]["p_value"] < 0.05
    assert abs(run.by_depth["d=1"]["cv_gain_pct"]) < abs(run.by_depth["d=4+"]["cv_gain_pct"])


def test_bucket_permutation_null_equals_full_rankings(run_and_data) -> None:
    """Each shuffle ranked in full with numpy, then the bucket's CV: the same permutation p."""
    run, ds, q, docs = run_and_data
    rel = [ds.doc_ids.index(next(iter(ds.qrels[x]))) for x in run.query_ids]
    norms = np.linalg.norm(docs.astype(np.float64), axis=1)
    perms = permutations(len(norms), K, 0)
    depths = np.array([1 + x.count("/") for x in run.query_ids])
    sel = depths >= 4
    cos = run.per_query["ndcg@10"][2, sel]
    gains = []
    for j in range(K):
        pq = np.stack(
            [ndcg10_numpy(q[sel], docs, norms[perms[j]], a, list(np.array(rel)[sel])) for a in ALPHAS]
        )
        _, _, chosen = cross_validate(pq, ALPHAS, 5, 0)
        gains.append(100 * (pq[chosen, np.arange(sel.sum())].mean() - cos.mean()) / cos.mean())
    real = run.by_depth["d=4+"]["cv_gain_pct"]
    p = (1 + sum(g >= real - 1e-9 for g in gains)) / (K + 1)
    e = run.by_depth["d=4+"]["permutation"]
    assert e["p_value"] == pytest.approx(p) and e["k"] == K
    assert e["null_max_pct"] == pytest.approx(max(gains))


def test_gradient_detects_a_planted_gradient_and_matches_scipy(run_and_data) -> None:
    scipy_stats = pytest.importorskip("scipy.stats")
    run, *_ = run_and_data
    depths = np.minimum(np.array([1 + x.count("/") for x in run.query_ids]), 4)
    gain = run.cv_per_query - run.per_query["ndcg@10"][2]
    g = run.depth_gradient
    assert g["statistic"] == pytest.approx(scipy_stats.spearmanr(depths, gain).statistic)
    assert g["statistic"] > 0.3 and g["p_value"] < 0.01
    # An independent permutation loop with scipy's ρ gives the same p (same shuffles).
    rng = np.random.default_rng(0)
    null = [scipy_stats.spearmanr(depths[rng.permutation(depths.size)], gain).statistic for _ in range(999)]
    assert g["p_value"] == pytest.approx(
        (1 + sum(abs(x) >= abs(g["statistic"]) - 1e-12 for x in null)) / 1000
    )
    assert 0 < g["controls"]["shuffled_norms"]["p_value"] <= 1


def test_gradient_p_is_two_sided(run_and_data) -> None:
    run, *_ = run_and_data
    depths = np.minimum(np.array([1 + x.count("/") for x in run.query_ids]), 4)
    gain = run.cv_per_query - run.per_query["ndcg@10"][2]
    up, down = rank_gradient(depths, gain), rank_gradient(depths, -gain)
    assert down["statistic"] == pytest.approx(-up["statistic"]) and down["p_value"] == up["p_value"] < 0.01


def test_no_gradient_on_labels_unrelated_to_gain() -> None:
    rng = np.random.default_rng(1)
    res = rank_gradient(rng.integers(1, 5, 300), rng.standard_normal(300), k=499, seed=2)
    assert res["p_value"] > 0.05
    assert rank_gradient(np.ones(10), np.arange(10.0)) == {"statistic": 0.0, "p_value": 1.0, "k": 999}


def test_depth_read_from_metadata(tmp_path: Path) -> None:
    """queries.jsonl's metadata.depth wins over the id (flat ids, depth only in metadata)."""
    (tmp_path / "queries.jsonl").write_text(
        "\n".join(
            json.dumps({"_id": f"q{i}", "text": "", "metadata": {"depth": 1 + i % 3}}) for i in range(6)
        )
    )
    ds = Dataset("m", [], [], [], [f"q{i}" for i in range(6)], [""] * 6, {}, source=str(tmp_path))
    assert query_depths(ds, ["q0", "q1", "q2", "q5", "other/x"]).tolist() == [1, 2, 3, 3, 2]


def test_bucket_cv_and_null_on_noisy_per_query_values() -> None:
    """A hand-made run whose per-query values are noise, so the α chosen differs between folds:
    the bucket's CV and its shuffled-norm null must use the bucket's own folds (seeded)."""
    from normrank.sweep.depth import depth_table
    from normrank.sweep.result import SweepRun

    rng = np.random.default_rng(7)
    nq, alphas, k = 60, [-1.0, -0.5, 0.0, 0.5], 15
    qids = ["/".join([f"P{i}"] + ["S"] * (i % 3)) for i in range(nq)]
    pq = rng.uniform(0, 1, (len(alphas), nq))
    null = rng.uniform(0, 1, (k, len(alphas), nq))
    fa, fold, chosen = cross_validate(pq, alphas, 5, 0)
    run = SweepRun("noise", "m", 10, alphas, qids, {"ndcg@10": pq}, fa, fold, pq[chosen, np.arange(nq)], 1.0,
                   {}, controls={"permutation": {"_null_ndcg": null, "_null_cols": np.arange(4), "seed": 0},
                                 "length": {}, "residual": {}})  # fmt: skip
    ds = Dataset("noise", [], [], [], qids, [""] * nq, {q: {} for q in qids})
    table = depth_table(ds, run, folds=5, seed=0)
    sel = np.array([q.count("/") == 2 for q in qids])
    fa_b, _, ch_b = cross_validate(pq[:, sel], alphas, 5, 0)
    assert len(set(fa_b)) > 1  # the folds disagree, so a wrong fold assignment shows
    e = table["d=3"]
    base = pq[2, sel].mean()
    assert e["cv_alphas"] == fa_b
    assert e["cv_gain_pct"] == pytest.approx(
        100 * (pq[:, sel][ch_b, np.arange(sel.sum())].mean() - base) / base
    )
    gains = []
    for j in range(k):
        _, _, cj = cross_validate(null[j][:, sel], alphas, 5, 0)
        gains.append(100 * (null[j][:, sel][cj, np.arange(sel.sum())].mean() - base) / base)
    assert e["permutation"]["null_max_pct"] == pytest.approx(max(gains))
    assert e["permutation"]["p_value"] == pytest.approx(
        (1 + sum(g >= e["cv_gain_pct"] - 1e-9 for g in gains)) / (k + 1)
    )


def test_gradient_survives_needs_all_three_tests() -> None:
    from normrank.sweep.depth import gradient_survives

    def g(p=0.001, res=(0.2, 0.001), sh=0.001, rho=0.3):
        return {"statistic": rho, "p_value": p,
                "controls": {"residual": {"statistic": res[0], "p_value": res[1]}, "shuffled_norms": {"p_value": sh}}}  # fmt: skip

    assert gradient_survives(g()) is True
    assert gradient_survives(g(p=0.2)) is False  # not significant
    assert gradient_survives(g(sh=0.3)) is False  # shuffled norms do as well
    assert gradient_survives(g(res=(0.2, 0.3))) is False  # the residual norm does not show it
    assert gradient_survives(g(res=(-0.2, 0.001))) is False  # the residual norm shows the opposite
    assert gradient_survives(g(), level=0.0005) is False
    assert gradient_survives({"statistic": 0.3, "p_value": 0.001}) is None  # no controls: not judged
    assert gradient_survives(None) is None


def test_gradient_verdict_in_sweep_json_and_report(run_and_data, tmp_path: Path) -> None:
    from normrank.sweep.depth import gradient_survives
    from normrank.sweep.depth_report import depth_markdown, depth_sections

    run, *_ = run_and_data
    g = run.depth_gradient
    # K = 9 shuffles cannot give a permutation p under 0.05, so even the planted gradient is not
    # judged to survive: the verdict is the rule applied, not the ρ alone.
    assert g["controls"]["shuffled_norms"]["p_value"] >= 0.1
    assert g["survives_controls"] is gradient_survives(g) is False
    write_all([run], tmp_path)
    saved = json.loads((tmp_path / "sweep.json").read_text())["runs"][0]["depth"]["gradient"]
    assert saved["survives_controls"] is False
    md = depth_sections([run])
    assert "| survives the controls |" in md and "| no |" in md
    assert "Survive the controls: 0 of 1 runs" in md
    full = depth_markdown([run], skipped={"docs:all-mpnet-base-v2": "not encoded"})
    assert "**Not swept** (no row below): docs × all-mpnet-base-v2 (not encoded)." in full
    assert "Not swept" not in depth_markdown([run])
