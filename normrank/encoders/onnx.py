"""ONNX text encoders (onnxruntime): mean-pooled token states, raw.

The graph must take ``input_ids`` and ``attention_mask`` (int64) and return the token states
``(batch, seq, d)`` (a HF export's ``last_hidden_state``); they are mean-pooled over the mask as
sentence-transformers' Pooling does.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from normrank.encoders.base import Encoder, _progress, check_texts, quiet_loading
from normrank.errors import InvalidInputError, MissingDependencyError

__all__ = ["ONNXEncoder", "ONNXTextEncoder", "strip_l2_normalize"]


class ONNXEncoder(Encoder):
    """Mean-pooled ONNX transformer; no torch, so no ``torch_module`` (a probe cannot use it)."""

    kind = "onnx"

    def __init__(
        self, model_path: str | Path, tokenizer: str | Path, name: str, *, max_seq_length: int = 256
    ) -> None:
        try:
            import onnxruntime as ort
            from transformers import AutoTokenizer
        except ImportError as e:
            raise MissingDependencyError("pip install onnxruntime transformers") from e
        opts = ort.SessionOptions()
        self.session = ort.InferenceSession(str(model_path), opts, providers=["CPUExecutionProvider"])
        with quiet_loading():
            self.tokenizer = AutoTokenizer.from_pretrained(str(tokenizer))
        self.name = name
        self.max_seq_length = int(max_seq_length)
        names = {i.name for i in self.session.get_inputs()}
        if not {"input_ids", "attention_mask"} <= names:
            raise InvalidInputError(
                f"{model_path}: ONNX inputs {sorted(names)} lack input_ids/attention_mask"
            )
        self._has_type_ids = "token_type_ids" in names
        outs = self.session.get_outputs()
        token_outs = [o.name for o in outs if len(o.shape) == 3]
        if not token_outs:
            raise InvalidInputError(f"{model_path}: no (batch, seq, d) token-state output to pool")
        preferred = [n for n in token_outs if n in ("last_hidden_state", "token_embeddings")]
        self._out = (preferred or token_outs)[0]
        self.dim = int(self._pool(["a"]).shape[1])

    def _pool(self, texts: list[str]) -> np.ndarray:
        b = self.tokenizer(
            texts, padding=True, truncation=True, max_length=self.max_seq_length, return_tensors="np"
        )
        feed = {
            "input_ids": b["input_ids"].astype(np.int64),
            "attention_mask": b["attention_mask"].astype(np.int64),
        }
        if self._has_type_ids:
            feed["token_type_ids"] = np.zeros_like(feed["input_ids"])
        (tok,) = self.session.run([self._out], feed)
        mask = feed["attention_mask"][..., None].astype(np.float32)
        return (tok * mask).sum(axis=1) / np.maximum(mask.sum(axis=1), 1e-9)

    def encode(self, texts: Sequence[str], batch_size: int = 64, show_progress: bool = False) -> np.ndarray:
        texts = check_texts(texts)
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        order = np.argsort([-len(t) for t in texts], kind="stable")
        with _progress(len(texts), f"encoding ({self.name})", show_progress) as bar:
            for start in range(0, len(texts), batch_size):
                idx = order[start : start + batch_size]
                out[idx] = self._pool([texts[i] for i in idx])
                bar(len(idx))
        return out


# -- graphs that read the text themselves (a tokenizer op inside), e.g. USE --------------------

_NORM_STEPS = {"Max", "Clip", "Add", "Sqrt", "Reciprocal", "Identity", "Cast", "Unsqueeze", "Reshape"}


def _squared_sum_source(name: str, producers: dict) -> tuple[str | None, set[str]]:
    """If ``name`` is computed from sum(x**2) (through Max/Sqrt/Reciprocal/...), return (x, ops seen)."""
    seen: set[str] = set()
    node = producers.get(name)
    while node is not None and node.op_type in _NORM_STEPS:
        seen.add(node.op_type)
        node = producers.get(node.input[0])
    if node is None:
        return None, seen
    seen.add(node.op_type)
    if node.op_type in ("ReduceSumSquare", "ReduceL2"):
        return node.input[0], seen
    if node.op_type == "ReduceSum":
        sq = producers.get(node.input[0])
        if sq is not None and sq.op_type == "Mul" and sq.input[0] == sq.input[1]:
            return sq.input[0], seen
        if sq is not None and sq.op_type == "Pow":
            return sq.input[0], seen  # x ** 2 (the exponent is a constant in every export seen)
    return None, seen


def _l2_normalized_input(name: str, producers: dict) -> str | None:
    """``x`` when tensor ``name`` is ``x / ||x||`` (Mul by 1/sqrt(sum x²), Div by the norm, or
    LpNormalization p=2); otherwise None."""
    node = producers.get(name)
    if node is None:
        return None
    if node.op_type == "LpNormalization":
        p = next((a.i for a in node.attribute if a.name == "p"), 2)
        return node.input[0] if p == 2 else None
    if node.op_type == "Mul":
        for x, scale in ((node.input[0], node.input[1]), (node.input[1], node.input[0])):
            src, ops = _squared_sum_source(scale, producers)
            if src == x and "Reciprocal" in ops and ("Sqrt" in ops or "ReduceL2" in ops):
                return x
    if node.op_type == "Div":
        src, ops = _squared_sum_source(node.input[1], producers)
        if src == node.input[0] and ("Sqrt" in ops or "ReduceL2" in ops):
            return node.input[0]
    return None


def strip_l2_normalize(graph: object, output: str) -> tuple[str, int]:
    """Walk back from ``output`` through every trailing L2 normalisation of an ONNX graph.

    Returns ``(raw tensor name, how many were passed)``; the graph itself is not changed.
    """
    producers = {o: n for n in graph.node for o in n.output}
    removed = 0
    while (x := _l2_normalized_input(output, producers)) is not None:
        output, removed = x, removed + 1
    return output, removed


class ONNXTextEncoder(Encoder):
    """An ONNX graph that takes a batch of strings (its tokenizer is inside, e.g. USE's
    SentencePiece op from onnxruntime-extensions) and returns one embedding per string.

    Trailing L2 normalisations are cut off: the encoder reads the tensor that enters the first
    of them, so the norm survives.
    """

    kind = "onnx-text"

    def __init__(self, model_path: str | Path, name: str) -> None:
        try:
            import onnx
            import onnxruntime as ort
        except ImportError as e:
            raise MissingDependencyError("pip install onnx onnxruntime") from e
        model = onnx.load(str(model_path))
        out = model.graph.output[0].name
        self.raw_output, self.removed_normalizations = strip_l2_normalize(model.graph, out)
        if self.raw_output != out:
            model.graph.output.append(
                onnx.helper.make_tensor_value_info(self.raw_output, onnx.TensorProto.FLOAT, None)
            )
        opts = ort.SessionOptions()
        if any(n.domain == "ai.onnx.contrib" for n in model.graph.node):
            try:
                import onnxruntime_extensions
            except ImportError as e:
                raise MissingDependencyError(
                    f"{model_path} uses onnxruntime-extensions ops (its tokenizer): "
                    "pip install onnxruntime-extensions"
                ) from e
            opts.register_custom_ops_library(onnxruntime_extensions.get_library_path())
        self.session = ort.InferenceSession(
            model.SerializeToString(), opts, providers=["CPUExecutionProvider"]
        )
        inputs = self.session.get_inputs()
        if len(inputs) != 1 or inputs[0].type != "tensor(string)":
            raise InvalidInputError(
                f"{model_path}: expected one string input, got {[(i.name, i.type) for i in inputs]}"
            )
        self._input = inputs[0].name
        self.name = name
        self.dim = int(self._run(["a"]).shape[1])

    def _run(self, texts: list[str]) -> np.ndarray:
        (emb,) = self.session.run([self.raw_output], {self._input: np.array(texts, dtype=object)})
        return np.asarray(emb, dtype=np.float32)

    def encode(self, texts: Sequence[str], batch_size: int = 64, show_progress: bool = False) -> np.ndarray:
        """Each text on its own: such graphs pad a batch to its longest text and the padding
        leaks into the others' embeddings (USE: up to 1.2 in one coordinate), so a text's
        embedding would depend on its batch. ``batch_size`` only paces the progress bar."""
        texts = check_texts(texts)
        if batch_size < 1:
            raise InvalidInputError(f"batch_size must be >= 1, got {batch_size}")
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        with _progress(len(texts), f"encoding ({self.name})", show_progress) as bar:
            for i, t in enumerate(texts):
                out[i] = self._run([t])[0]
                if (i + 1) % batch_size == 0 or i + 1 == len(texts):
                    bar((i % batch_size) + 1)
        return out
