"""CLIP text towers (open_clip, Hugging Face) on small randomly initialised models built here.

No CLIP weights exist offline; a user's real checkpoint goes through the same loading code
(a saved folder / checkpoint file), so these tests build, save and reload tiny models.
"""

from __future__ import annotations

import json
import string
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.clip

torch = pytest.importorskip("torch")

from normrank.encoders import load_encoder  # noqa: E402

TEXTS = ["a photo of a cat", "dog", "the quick brown fox jumps over the lazy dog again and again"]


def _tiny_clip_tokenizer(folder: Path) -> None:
    """A byte-level BPE vocabulary with single characters only (no merges)."""
    chars = list(string.ascii_lowercase + string.digits + string.punctuation)
    vocab = ["<|startoftext|>", "<|endoftext|>"]
    vocab += chars + [c + "</w>" for c in chars]
    (folder / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(vocab)}))
    (folder / "merges.txt").write_text("#version: 0.2\n")


@pytest.fixture(scope="module")
def hf_clip_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    transformers = pytest.importorskip("transformers")
    folder = tmp_path_factory.mktemp("tiny-hf-clip")
    _tiny_clip_tokenizer(folder)
    tok = transformers.CLIPTokenizer(str(folder / "vocab.json"), str(folder / "merges.txt"))
    cfg = transformers.CLIPConfig(
        text_config={"vocab_size": len(tok), "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
                     "num_attention_heads": 2, "max_position_embeddings": 32, "eos_token_id": tok.eos_token_id,
                     "bos_token_id": tok.bos_token_id, "pad_token_id": tok.pad_token_id},
        vision_config={"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
                       "image_size": 32, "patch_size": 16},
        projection_dim=24,
    )  # fmt: skip
    torch.manual_seed(0)
    transformers.CLIPModel(cfg).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def _features(out):
    """get_text_features returns a tensor (transformers 4) or an output object (5)."""
    return out if isinstance(out, torch.Tensor) else out.pooler_output


def test_hf_clip_projected_and_nohead(hf_clip_dir: Path) -> None:
    from transformers import AutoTokenizer, CLIPModel

    enc = load_encoder(hf_clip_dir)  # auto: config.json model_type "clip"
    assert (enc.kind, enc.dim) == ("hf-clip", 24)
    emb = enc.encode(TEXTS, batch_size=2)
    model = CLIPModel.from_pretrained(hf_clip_dir).eval()
    tok = AutoTokenizer.from_pretrained(hf_clip_dir)
    nohead = load_encoder(hf_clip_dir, kind="hf-clip-nohead")
    by_prefix = load_encoder(f"hf-clip-nohead:{hf_clip_dir}")  # how the CLI's --model names a kind
    assert by_prefix.kind == "hf-clip-nohead"
    np.testing.assert_array_equal(by_prefix.encode(TEXTS), nohead.encode(TEXTS))
    with torch.no_grad():
        for i, t in enumerate(TEXTS):  # one at a time: no padding involved in the reference
            b = tok([t], return_tensors="pt", truncation=True, max_length=32)
            ref = _features(
                model.get_text_features(input_ids=b["input_ids"], attention_mask=b["attention_mask"])
            )
            np.testing.assert_allclose(emb[i], ref[0].numpy(), rtol=1e-4, atol=1e-5)
            pooled = model.text_model(**b).pooler_output[0].numpy()
            np.testing.assert_allclose(nohead.encode([t])[0], pooled, rtol=1e-4, atol=1e-5)
    assert nohead.kind == "hf-clip-nohead" and nohead.dim == 32
    assert np.all(np.abs(np.linalg.norm(emb, axis=1) - 1) > 1e-3)  # unnormalised
    t = enc.embed_tensor(TEXTS[:2])
    assert t.requires_grad


def _open_clip():
    try:
        import open_clip
    except (ImportError, RuntimeError) as e:  # torchvision built for another torch raises RuntimeError
        pytest.skip(
            f"open_clip cannot be imported here ({type(e).__name__}: {e}); needs a matching torchvision"
        )
    return open_clip


TINY_OPEN_CLIP = {
    "embed_dim": 16,
    "vision_cfg": {"image_size": 32, "layers": 1, "width": 32, "head_width": 16, "patch_size": 16},
    "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 2},
}


def test_open_clip_tiny_projected_nohead_and_checkpoint(tmp_path: Path) -> None:
    open_clip = _open_clip()
    torch.manual_seed(0)
    enc = load_encoder("normrank-tiny-clip", kind="open_clip", model_config=TINY_OPEN_CLIP)
    assert (enc.kind, enc.dim) == ("open_clip", 16)
    model, tok = enc.torch_module, open_clip.get_tokenizer("normrank-tiny-clip")
    emb = enc.encode(TEXTS, batch_size=2)
    with torch.no_grad():
        ref = model.encode_text(tok(TEXTS), normalize=False).numpy()
        # No-head reference written out: pooled final-LN token states at the EOT position.
        tokens = tok(TEXTS)
        x = model.token_embedding(tokens) + model.positional_embedding
        x = model.ln_final(model.transformer(x, attn_mask=model.attn_mask))
        pooled = x[torch.arange(len(TEXTS)), tokens.argmax(dim=-1)].numpy()
    np.testing.assert_allclose(emb, ref, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(pooled @ model.text_projection.detach().numpy(), ref, rtol=1e-4, atol=1e-5)
    assert np.all(np.abs(np.linalg.norm(emb, axis=1) - 1) > 1e-3)

    # A local checkpoint file goes through the same path as a released one.
    ckpt = tmp_path / "tiny.pt"
    torch.save(model.state_dict(), ckpt)
    again = load_encoder("normrank-tiny-clip", kind="open_clip", pretrained=str(ckpt))
    np.testing.assert_allclose(again.encode(TEXTS), emb, rtol=1e-5, atol=1e-6)
    nohead = load_encoder("normrank-tiny-clip", kind="open_clip-nohead", pretrained=str(ckpt))
    assert (nohead.kind, nohead.dim) == ("open_clip-nohead", 32)
    np.testing.assert_allclose(nohead.encode(TEXTS), pooled, rtol=1e-4, atol=1e-5)
    # The projection is restored after a no-head pass (the probe perturbs these parameters).
    assert nohead.torch_module.text_projection is not None
    assert nohead.embed_tensor(TEXTS[:1]).requires_grad
