"""The sweep's controls against an independent computation: numpy brute-force ranking, ranx's
per-query NDCG@10, scipy's paired t-test, the fold and permutation rules as documented."""

from __future__ import annotations

import numpy as np
import pytest

from normrank.corpus.beir import Dataset
from normrank.sweep import parse_alphas, sweep_embeddings
from normrank.sweep.grid import parse_grid

ranx = pytest.importorskip("ranx")
stats = pytest.importorskip("scipy.stats")


def folds_of(nq: int, folds: int, seed: int) -> np.ndarray:
    """The documented fold rule: a seeded permutation of the queries dealt round-robin."""
    perm = np.random.default_rng(seed).permutation(nq)
    fold = np.empty(nq, dtype=np.int64)
    fold[perm] = np.arange(nq) % folds
    return fold


def ranx_ndcg10(scores: np.ndarray, qids: list[str], doc_ids: list[str], qrels) -> np.ndarray:
    top = np.argsort(-scores, axis=1, kind="stable")[:, :10]
    run = ranx.Run({q: {doc_ids[j]: float(10 - r) for r, j in enumerate(top[i])} for i, q in enumerate(qids)})
    ranx.evaluate(qrels, run, "ndcg@10")
    return np.array([run.scores["ndcg@10"][q] for q in qids])


def cv_gain(pq: np.ndarray, grid: list[float], fold: np.ndarray, cos_pq: np.ndarray) -> tuple[float, float]:
    held = np.empty(pq.shape[1])
    for f in np.unique(fold):
        means = pq[:, fold != f].mean(axis=1)
        ok = [i for i in range(len(grid)) if means[i] >= means.max() - 1e-12]
        best = min(ok, key=lambda i: (abs(grid[i]), grid[i]))  # ties: nearest to cosine
        held[fold == f] = pq[best, fold == f]
    gain = 100 * (held.mean() - cos_pq.mean()) / cos_pq.mean()
    p = 1.0 if np.array_equal(held, cos_pq) else float(stats.ttest_rel(cos_pq, held).pvalue)
    return gain, p


def independent(
    ds: Dataset, q: np.ndarray, d: np.ndarray, lengths: np.ndarray, alphas, betas, k: int, seed=0
):
    qids, _ = ds.judged()
    qrels = ranx.Qrels({x: ds.qrels[x] for x in qids})
    norms = np.linalg.norm(d.astype(np.float64), axis=1)
    cos = (q / np.linalg.norm(q, axis=1, keepdims=True)) @ (d / norms[:, None]).T
    fold = folds_of(len(qids), 5, seed)

    def sweep(w: np.ndarray, grid) -> np.ndarray:
        return np.stack([ranx_ndcg10(cos * w**e, qids, ds.doc_ids, qrels) for e in grid])

    a, b = list(alphas), list(betas)
    norm_pq = sweep(norms, a)
    cos_pq = norm_pq[a.index(0.0)]
    slope, icpt = np.polyfit(np.log(lengths), np.log(norms), 1)
    resid = np.exp(np.log(norms) - (icpt + slope * np.log(lengths)))
    out = {
        "norm": cv_gain(norm_pq, a, fold, cos_pq),
        "length": cv_gain(sweep(lengths, b), b, fold, cos_pq),
        "residual": cv_gain(sweep(resid, a), a, fold, cos_pq),
        "slope": slope,
        "spearman": stats.spearmanr(norms, lengths).statistic,
    }
    null, band = [], []
    for j in range(k):  # the documented permutation rule
        perm = np.random.default_rng([seed, j]).permutation(len(norms))
        pq = sweep(norms[perm], a)
        null.append(cv_gain(pq, a, fold, cos_pq)[0])
        band.append(pq.mean(axis=1) / cos_pq.mean())  # each α's mean NDCG@10 relative to cosine
    out["null"] = np.array(null)
    out["band"] = {q: np.quantile(band, v, axis=0) for q, v in (("q05", 0.05), ("median", 0.5), ("max", 1.0))}
    out["perm_p"] = (1 + np.sum(out["null"] >= out["norm"][0] - 1e-9)) / (k + 1)
    return out


def length_dataset(seed: int = 3, nq: int = 40, n: int = 300, dim: int = 16):
    """Relevant documents are long; a document's norm falls with its length (plus noise), so the
    norm's gain at alpha < 0 is mostly a length prior."""
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((nq, dim))
    lengths = rng.integers(3, 200, n).astype(np.float64)
    d = rng.standard_normal((n, dim))
    qrels = {}
    for i in range(nq):
        rel = rng.choice(n, 3, replace=False)
        lengths[rel] = rng.integers(120, 200, 3)
        d[rel] = q[i] + 1.3 * rng.standard_normal((3, dim))
        qrels[f"q{i}"] = {f"d{j}": int(g) for j, g in zip(rel, rng.integers(1, 3, 3), strict=True)}
    norms = np.exp(-0.3 * np.log(lengths) + 0.15 * rng.standard_normal(n)) * 5
    d = d / np.linalg.norm(d, axis=1, keepdims=True) * norms[:, None]
    texts = [" ".join(["w"] * int(m)) for m in lengths]
    ds = Dataset("lengthy", [f"d{j}" for j in range(n)], texts, [""] * n, [f"q{i}" for i in range(nq)],
                 [""] * nq, qrels)  # fmt: skip
    return ds, q.astype(np.float32), d.astype(np.float32), lengths


def test_controls_equal_an_independent_computation_on_a_synthetic_collection() -> None:
    ds, q, d, lengths = length_dataset()
    alphas, betas, k = parse_alphas("-1:1:0.5"), parse_grid("-0.4:0.4:0.1", "beta"), 9
    run = sweep_embeddings(ds, "toy", q, d, alphas=alphas, metrics=["ndcg@10"], betas=betas, permutations=k)
    ref = independent(ds, q, d, lengths, alphas, betas, k)
    c = run.controls
    assert c["length_unit"] == "words"
    assert run.cv_gain_pct == pytest.approx(ref["norm"][0], abs=1e-9)
    assert run.p_value == pytest.approx(ref["norm"][1], rel=1e-8)
    for name in ("length", "residual"):
        assert c[name]["cv"]["gain_pct"] == pytest.approx(ref[name][0], abs=1e-9), name
        assert c[name]["cv"]["p_value"] == pytest.approx(ref[name][1], rel=1e-8), name
    assert c["residual"]["fit"]["slope"] == pytest.approx(ref["slope"], rel=1e-9)
    assert c["spearman_norm_length"] == pytest.approx(ref["spearman"], abs=1e-12)
    np.testing.assert_allclose(c["permutation"]["null_cv_gain_pct"], ref["null"], atol=1e-9)
    assert c["permutation"]["p_value"] == pytest.approx(ref["perm_p"])
    for q_name, want in ref["band"].items():  # the shuffled band, α in grid order
        np.testing.assert_allclose(c["permutation"]["relative_curve"][q_name], want, atol=1e-9)
    # The planted story: a length prior at least as good as the norm, little left in the residual.
    assert ref["spearman"] < -0.5 and c["length"]["cv"]["gain_pct"] > 0, (ref, c["length"]["cv"])


@pytest.mark.parametrize("high_weight_docs", [0, 8, 256])
def test_null_is_exact_when_the_candidate_bound_fails(monkeypatch, high_weight_docs: int) -> None:
    """Norms spanning e^-3 .. e^3 and few high-weight documents scored beside the candidates:
    many rows need the full re-rank (the fallback), and the null still equals brute force."""
    from normrank.sweep import null

    monkeypatch.setattr(null, "HIGH_WEIGHT_DOCS", high_weight_docs)
    ds, q, d, lengths = length_dataset(seed=5, n=1200, nq=20)
    rng = np.random.default_rng(0)
    d = d / np.linalg.norm(d, axis=1, keepdims=True) * np.exp(rng.uniform(-3, 3, (len(d), 1)))
    alphas = parse_alphas("-2:1:1")
    run = sweep_embeddings(ds, "toy", q, d, alphas=alphas, metrics=["ndcg@10", "recall@100"], permutations=6)
    ref = independent(ds, q, d, lengths, alphas, parse_grid("0", "beta"), 6)
    if high_weight_docs < 256:
        assert run.controls["permutation"]["fallback_fraction"] > 0.05
    np.testing.assert_allclose(run.controls["permutation"]["null_cv_gain_pct"], ref["null"], atol=1e-9)


def test_controls_json_and_report(tmp_path) -> None:
    from normrank.sweep.report import write_all

    ds, q, d, _ = length_dataset()
    run = sweep_embeddings(ds, "toy", q, d, alphas=[-1.0, 0.0, 1.0], metrics=["ndcg@10"], permutations=4)
    write_all([run], tmp_path)
    import json

    (entry,) = json.loads((tmp_path / "sweep.json").read_text())["runs"]
    assert {
        "dataset",
        "model",
        "n_docs",
        "n_queries",
        "alphas",
        "metrics",
        "best_alpha",
        "cv",
        "norm_stats",
    } <= set(entry)
    c = entry["controls"]
    assert set(c) >= {"length", "residual", "permutation", "spearman_norm_length", "length_unit"}
    assert c["permutation"]["k"] == 4 and len(c["permutation"]["null_cv_gain_pct"]) == 4
    md = (tmp_path / "sweep.md").read_text()
    assert "Is it the norm, or the length, or chance?" in md and "| lengthy | toy |" in md
    # Controls off: the pinned entry without them, and no control timing.
    bare = sweep_embeddings(ds, "toy", q, d, alphas=[-1.0, 0.0], metrics=["ndcg@10"], controls=False)
    assert bare.controls is None and "controls" not in bare.to_dict()


def test_lengths_are_the_tokenizers_counts_and_words_without_tokenizers(tmp_path, monkeypatch) -> None:
    """Token counts (whole text, no special tokens) equal the tokenizer's own, from the cache on
    the second call; without the ``tokenizers`` package the unit is words, not an import error."""
    import importlib.util

    from normrank.settings import CACHE_ENV
    from normrank.sweep.lengths import document_lengths, tokenizer_file

    tok = tokenizer_file("all-MiniLM-L6-v2")
    if tok is None or importlib.util.find_spec("tokenizers") is None:
        pytest.skip("the offline MiniLM tokenizer is not available here")
    from tokenizers import Tokenizer

    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    texts = ["Norms encode specificity.", "a " * 700, "x"]
    ref = Tokenizer.from_file(str(tok))
    ref.no_truncation()
    ref.no_padding()
    want = [max(1, len(ref.encode(t, add_special_tokens=False).ids)) for t in texts]
    for _ in range(2):  # computed, then read back from the cache
        got, unit = document_lengths("all-MiniLM-L6-v2", texts)
        assert unit == "tokens" and got.tolist() == want
    assert list((tmp_path / "lengths").glob("*.npy"))
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "tokenizers" else real(name, *a)
    )
    got, unit = document_lengths("all-MiniLM-L6-v2", texts)
    assert unit == "words" and got.tolist() == [3, 700, 1]


def test_a_cosine_only_grid_runs_with_its_controls(tmp_path) -> None:
    """``--alphas 0`` (the anchor check's grid): nothing to choose, so the norm's CV gain is 0
    and every shuffle's too (the permutation null has no α ≠ 0 to rank; it raised before)."""
    from normrank.sweep.report import write_all

    ds, q, d, _ = length_dataset()
    run = sweep_embeddings(ds, "toy", q, d, alphas=[0.0], metrics=["ndcg@10"], permutations=4)
    assert run.cv_gain_pct == 0.0
    assert run.controls["permutation"]["null_cv_gain_pct"] == [0.0] * 4
    cosine = sweep_embeddings(ds, "toy", q, d, alphas=[-1.0, 0.0], metrics=["ndcg@10"], controls=False)
    assert run.mean("ndcg@10")[run.i0] == cosine.mean("ndcg@10")[cosine.i0]
    write_all([run], tmp_path)
    assert (tmp_path / "sweep.md").stat().st_size > 0
