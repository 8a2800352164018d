"""``NormRankEmbedding``: a LlamaIndex ``BaseEmbedding`` returning normrank encoders' raw vectors."""

from __future__ import annotations

from typing import Any

from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import Field, PrivateAttr

from normrank.store.checks import reject_unknown
from normrank.store.keyed_store import encode_texts, load_normrank_encoder

__all__ = ["NormRankEmbedding"]


class NormRankEmbedding(BaseEmbedding):
    """Raw (unnormalised) embeddings from ``normrank.encoders`` for norm-aware ranking.

    ``model_name`` is anything ``normrank.encoders.load_encoder`` accepts; the model is loaded at
    the first call. ``encoder=`` takes an already-loaded object with
    ``encode(texts, batch_size=...) -> (n, dim)`` instead.
    """

    encode_batch_size: int = Field(default=64, description="batch size passed to the encoder")
    _encoder: Any = PrivateAttr(default=None)

    def __init__(self, model_name: str = "unknown", *, encoder: Any = None, **kwargs: Any) -> None:
        fields = type(self).model_fields  # pydantic would drop an unknown (misspelt) field silently
        reject_unknown({k: v for k, v in kwargs.items() if k not in fields}, fields, "NormRankEmbedding()")
        super().__init__(model_name=model_name, **kwargs)
        self._encoder = encoder

    @classmethod
    def class_name(cls) -> str:
        return "NormRankEmbedding"

    @property
    def encoder(self) -> Any:
        if self._encoder is None:
            self._encoder = load_normrank_encoder(self.model_name)
        return self._encoder

    def _get_query_embedding(self, query: str) -> list[float]:
        return encode_texts(self.encoder, [query], self.encode_batch_size)[0]

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._get_query_embedding(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return encode_texts(self.encoder, [text], self.encode_batch_size)[0]

    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        return encode_texts(self.encoder, texts, self.encode_batch_size)
