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

__all__ = ["ONNXEncoder"]


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
