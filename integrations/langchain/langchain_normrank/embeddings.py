"""``NormRankEmbeddings``: LangChain ``Embeddings`` returning normrank encoders' *raw* vectors."""

from __future__ import annotations

from typing import Any

from langchain_core.embeddings import Embeddings

from normrank.errors import InvalidParameterError
from normrank.store.keyed_store import encode_texts, load_normrank_encoder

__all__ = ["NormRankEmbeddings"]


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
            raise InvalidParameterError("give model_name_or_path or encoder")
        self.model_name_or_path = model_name_or_path
        self.batch_size = batch_size
        self._encoder = encoder

    @property
    def encoder(self) -> Any:
        if self._encoder is None:
            self._encoder = load_normrank_encoder(str(self.model_name_or_path))
        return self._encoder

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return encode_texts(self.encoder, texts, self.batch_size)

    def embed_query(self, text: str) -> list[float]:
        return encode_texts(self.encoder, [text], self.batch_size)[0]
