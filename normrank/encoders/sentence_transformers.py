"""sentence-transformers models with every ``Normalize`` module removed.

``normalize_embeddings=False`` is not enough: many checkpoints (all-MiniLM-L6-v2 among them) put a
``Normalize`` module at the end of the pipeline, which makes every output unit length.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from normrank.encoders.base import TorchEncoder, quiet_loading
from normrank.errors import InvalidParameterError, NormrankError

__all__ = ["SentenceTransformerEncoder", "strip_normalize"]

log = logging.getLogger(__name__)

# Texts of varied length: their raw norms differ unless something normalises the output.
_NORM_CHECK_TEXTS = ["a", "The quick brown fox jumps over the lazy dog.", "protein folding in yeast cells"]


def strip_normalize(model: Any) -> int:
    """Delete every Normalize module from a SentenceTransformer in place; return how many."""
    keys = [k for k, m in model._modules.items() if type(m).__name__ == "Normalize"]
    for k in keys:
        del model._modules[k]
    return len(keys)


class SentenceTransformerEncoder(TorchEncoder):
    """A SentenceTransformer whose pipeline ends before any Normalize module."""

    kind = "sentence-transformers"

    def __init__(
        self,
        model: Any,
        name: str,
        *,
        device: str = "cpu",
        max_seq_length: int | None = None,
        check_norms: bool = True,
    ) -> None:
        self.name = name
        self.device = device
        removed = strip_normalize(model)
        if removed:
            log.info("%s: removed %d Normalize module(s) so embeddings keep their norm", name, removed)
        if max_seq_length is not None:
            if max_seq_length < 1:
                raise InvalidParameterError(f"max_seq_length must be >= 1, got {max_seq_length}")
            model.max_seq_length = max_seq_length
        model.eval()
        self.model = model
        self.torch_module = model
        # Renamed in sentence-transformers 6 (get_sentence_embedding_dimension -> get_embedding_dimension).
        get_dim = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
        dim = get_dim()
        if dim is None:
            dim = int(self.encode(_NORM_CHECK_TEXTS[:1]).shape[1])
        self.dim = int(dim)
        if check_norms:
            norms = np.linalg.norm(self.encode(_NORM_CHECK_TEXTS), axis=1)
            if np.allclose(norms, 1.0, atol=1e-4):
                raise NormrankError(
                    f"{name}: embeddings are unit length even with the Normalize modules removed; "
                    "this model exposes no norm signal to rank with"
                )

    @property
    def max_seq_length(self) -> int:
        return int(self.model.max_seq_length)

    def embed_tensor(self, texts: list[str]) -> Any:
        self.model.eval()
        # ``tokenize`` was renamed ``preprocess`` in sentence-transformers 6.
        prep = getattr(self.model, "preprocess", None) or self.model.tokenize
        features = prep(list(texts))
        features = {k: v.to(self.device) if hasattr(v, "to") else v for k, v in features.items()}
        return self.model(features)["sentence_embedding"]


def load_sentence_transformer(path_or_name: str, name: str, *, device: str = "cpu", **options: Any) -> Any:
    """Load a SentenceTransformer from a folder or hub name; ``options`` go to the encoder."""
    from normrank.encoders.resolve import require

    require("sentence_transformers", "'normrank[models]'")
    from sentence_transformers import SentenceTransformer

    local_only = options.pop("local_files_only", False)
    with quiet_loading():
        model = SentenceTransformer(str(path_or_name), device=device, local_files_only=local_only)
    return SentenceTransformerEncoder(model, name, device=device, **options)
