"""Norm-aware re-ranking of any retriever's documents, and the ingestion helper it relies on.

Vector stores that normalise (FAISS with ``normalize_L2``, most HuggingFace set-ups) forget the
norm. Record it at ingestion with :func:`add_norm_metadata`, store the documents anywhere, and put
:class:`NormReweightCompressor` behind the retriever (``ContextualCompressionRetriever``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from langchain_core.callbacks import Callbacks
from langchain_core.documents import BaseDocumentCompressor, Document
from langchain_core.embeddings import Embeddings
from pydantic import ConfigDict

from normrank.errors import InvalidInputError, InvalidParameterError

__all__ = ["NORM_KEY", "SCORE_KEY", "NormReweightCompressor", "add_norm_metadata"]

#: Metadata key holding the raw embedding norm ‖d‖ written by :func:`add_norm_metadata`.
NORM_KEY = "normrank_norm"
#: Metadata key where :class:`NormReweightCompressor` writes cos·‖d‖^α.
SCORE_KEY = "normrank_score"


def add_norm_metadata(
    documents: Sequence[Document],
    embeddings: Embeddings | None = None,
    *,
    vectors: Any = None,
    key: str = NORM_KEY,
) -> list[Document]:
    """Copies of ``documents`` with the raw norm ‖d‖ of their embedding in ``metadata[key]``.

    Give either ``vectors`` (n, dim), the raw embeddings already computed, or ``embeddings``
    (a model returning raw vectors, e.g. ``NormRankEmbeddings``) to compute them from
    ``page_content``. Inputs are not modified.
    """
    docs = list(documents)
    if (vectors is None) == (embeddings is None):
        raise InvalidParameterError("give exactly one of embeddings or vectors")
    if vectors is None:
        vectors = embeddings.embed_documents([d.page_content for d in docs])
    arr = np.asarray(vectors, dtype=np.float64)
    if arr.ndim != 2 or arr.shape[0] != len(docs):
        raise InvalidInputError(f"expected ({len(docs)}, dim) vectors, got shape {arr.shape}")
    norms = np.linalg.norm(arr, axis=1)
    return [
        d.model_copy(update={"metadata": {**d.metadata, key: float(n)}})
        for d, n in zip(docs, norms, strict=True)
    ]


class NormReweightCompressor(BaseDocumentCompressor):
    """Re-score documents from any retriever by cos(q, d)·‖d‖^α and sort them.

    ``cos`` is recomputed with ``embeddings`` (query and ``page_content``; only the direction of
    these vectors is used, so a normalising model is fine here), ``‖d‖`` is read from
    ``metadata[norm_key]`` (written by :func:`add_norm_metadata`). Returned documents are copies
    carrying the score in ``metadata[score_key]``; ``top_n`` keeps the best ``top_n``.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    embeddings: Embeddings
    alpha: float
    top_n: int | None = None
    norm_key: str = NORM_KEY
    score_key: str = SCORE_KEY

    def scores(self, documents: Sequence[Document], query: str) -> np.ndarray:
        """cos(q, d)·‖d‖^α for each document, shape (n,), float64."""
        docs = list(documents)
        if not docs:
            return np.zeros(0)
        missing = [i for i, d in enumerate(docs) if self.norm_key not in d.metadata]
        if missing:
            raise InvalidInputError(
                f"{len(missing)} document(s) lack metadata[{self.norm_key!r}] (first at position "
                f"{missing[0]}): record raw norms at ingestion with "
                "langchain_normrank.add_norm_metadata(documents, embeddings)"
            )
        norms = np.asarray([float(d.metadata[self.norm_key]) for d in docs])
        if not np.all(np.isfinite(norms)) or np.any(norms <= 0):
            raise InvalidInputError(f"metadata[{self.norm_key!r}] must hold positive finite norms")
        q = np.asarray(self.embeddings.embed_query(query), dtype=np.float64)
        d = np.asarray(self.embeddings.embed_documents([x.page_content for x in docs]), dtype=np.float64)
        cos = (d @ q) / (np.linalg.norm(d, axis=1) * np.linalg.norm(q))
        return cos * norms**self.alpha

    def compress_documents(
        self, documents: Sequence[Document], query: str, callbacks: Callbacks | None = None
    ) -> Sequence[Document]:
        docs = list(documents)
        if self.top_n is not None and self.top_n < 1:
            raise InvalidParameterError(f"top_n must be positive, got {self.top_n}")
        scores = self.scores(docs, query)
        order = np.argsort(-scores, kind="stable")
        if self.top_n is not None:
            order = order[: self.top_n]
        return [
            docs[i].model_copy(update={"metadata": {**docs[i].metadata, self.score_key: float(scores[i])}})
            for i in order
        ]
