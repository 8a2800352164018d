"""``NormRankEmbeddings``: LangChain ``Embeddings`` returning normrank encoders' *raw* vectors."""

from __future__ import annotations

from typing import Any

import numpy as np
from langchain_core.embeddings import Embeddings

from normrank.errors import MissingDependencyError

__all__ = ["NormRankEmbeddings"]


def load_normrank_encoder(name_or_path: str) -> Any:
    """``normrank.encoders.load_encoder(name_or_path)``, imported lazily (it pulls in torch)."""
    try:
        from normrank.encoders import load_encoder
    except ImportError as e:
        raise MissingDependencyError(
            "normrank's encoders need the model extras: pip install 'normrank[models]'"
        ) from e
    return load_encoder(name_or_path)


class NormRankEmbeddings(Embeddings):
    """Raw (unnormalised) embeddings from ``normrank.encoders`` for a norm-aware store.

    Args:
        model_name_or_path: anything ``normrank.encoders.load_encoder`` accepts.
        batch_size: encoder batch size.
        encoder: an already-loaded object with ``encode(texts, batch_size=...) -> (n, dim)``;
            when given, ``model_name_or_path`` is not loaded.

    The model is loaded at the first embed call, not at construction.
    """

    def __init__(
        self, model_name_or_path: str | None = None, *, batch_size: int = 64, encoder: Any = None
    ) -> None:
        if encoder is None and model_name_or_path is None:
            raise ValueError("give model_name_or_path or encoder")
        self.model_name_or_path = model_name_or_path
        self.batch_size = batch_size
        self._encoder = encoder

    @property
    def encoder(self) -> Any:
        if self._encoder is None:
            self._encoder = load_normrank_encoder(str(self.model_name_or_path))
        return self._encoder

    def _encode(self, texts: list[str]) -> list[list[float]]:
        if not texts:
            return []
        out = np.asarray(self.encoder.encode(list(texts), batch_size=self.batch_size), dtype=np.float32)
        return out.reshape(len(texts), -1).tolist()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self._encode(texts)

    def embed_query(self, text: str) -> list[float]:
        return self._encode([text])[0]
