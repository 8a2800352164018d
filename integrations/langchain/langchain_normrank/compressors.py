"""Norm-aware re-ranking of any retriever's documents, and the ingestion helpers it relies on.

Vector stores that normalise (FAISS with ``normalize_L2``, most HuggingFace set-ups) forget the
norm. Record it at ingestion with :func:`embed_with_norms` (or :func:`add_norm_metadata`),
store the documents anywhere, and put :class:`NormReweightCompressor` behind the retriever
(``ContextualCompressionRetriever``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from langchain_core.callbacks import Callbacks
from langchain_core.documents import BaseDocumentCompressor, Document
from langchain_core.embeddings import Embeddings
from pydantic import ConfigDict

from normrank import norm_weighted
from normrank.errors import InvalidInputError, InvalidParameterError
from normrank.store.checks import reranker_arguments

__all__ = ["NORM_KEY", "SCORE_KEY", "NormReweightCompressor", "add_norm_metadata", "embed_with_norms"]

#: Metadata key holding the raw embedding norm ‖d‖ written by :func:`add_norm_metadata`.
NORM_KEY = "normrank_norm"
#: Metadata key where :class:`NormReweightCompressor` writes cos·‖d‖^α.
SCORE_KEY = "normrank_score"


def _with_norms(docs: list[Document], vectors: Any, key: str) -> list[Document]:
    arr = np.asarray(vectors, dtype=np.float64)
    if arr.ndim != 2 or arr.shape[0] != len(docs):
        raise InvalidInputError(f"expected ({len(docs)}, dim) vectors, got shape {arr.shape}")
    norms = np.linalg.norm(arr, axis=1)
    if not np.all(np.isfinite(norms)) or np.any(norms <= 0):
        raise InvalidInputError("every vector needs a positive, finite norm")
    return [
        d.model_copy(update={"metadata": {**d.metadata, key: float(n)}})
        for d, n in zip(docs, norms, strict=True)
    ]


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
    ``page_content``. To put the documents in a store without encoding them a second time use
    :func:`embed_with_norms` and the store's ``from_embeddings``. Inputs are not modified.
    """
    docs = list(documents)
    if (vectors is None) == (embeddings is None):
        raise InvalidParameterError("give exactly one of embeddings or vectors")
    if vectors is None:
        vectors = embeddings.embed_documents([d.page_content for d in docs])
    return _with_norms(docs, vectors, key)


def embed_with_norms(
    documents: Sequence[Document], embeddings: Embeddings, *, key: str = NORM_KEY
) -> tuple[list[Document], list[list[float]]]:
    """Encode ``documents`` once: their copies with ‖d‖ in ``metadata[key]``, and the vectors.

    Ingestion then encodes the corpus once::

        docs, vectors = embed_with_norms(docs, emb)
        store = FAISS.from_embeddings(
            zip([d.page_content for d in docs], vectors), emb, metadatas=[d.metadata for d in docs]
        )
    """
    docs = list(documents)
    vectors = embeddings.embed_documents([d.page_content for d in docs])
    return _with_norms(docs, vectors, key), [list(map(float, v)) for v in vectors]


def _stored_vectors(store: Any, docs: list[Document]) -> dict[int, np.ndarray]:
    """Vectors the base store already holds for ``docs`` (by ``Document.id``), by position."""
    from langchain_normrank.vectorstores import NormRankVectorStore

    found: dict[int, np.ndarray] = {}
    if isinstance(store, NormRankVectorStore):
        for i, d in enumerate(docs):
            if d.id is not None and d.id in store._store:
                found[i] = store._store.vectors([d.id])[0]
        return found
    mapping = getattr(store, "index_to_docstore_id", None)
    index = getattr(store, "index", None)
    if mapping is None or index is None:
        raise InvalidParameterError(
            "vectorstore must be a NormRankVectorStore or a langchain_community FAISS store "
            f"(with index and index_to_docstore_id), got {type(store).__name__}"
        )
    position = {sid: pos for pos, sid in mapping.items()}
    for i, d in enumerate(docs):
        if d.id is not None and d.id in position:
            try:
                found[i] = np.asarray(index.reconstruct(int(position[d.id])), dtype=np.float64)
            except RuntimeError:  # an index that cannot give vectors back (IVF without a direct map)
                return {}  # every candidate is embedded instead: the same scores, more work
    return found


def _holds_raw_vectors(store: Any) -> bool:
    from langchain_normrank.vectorstores import NormRankVectorStore

    return isinstance(store, NormRankVectorStore)


class NormReweightCompressor(BaseDocumentCompressor):
    """Re-score documents from any retriever by cos(q, d)·‖d‖^α (:func:`normrank.norm_weighted`)
    and sort them.

    ``‖d‖`` is read from ``metadata[norm_key]`` (written by :func:`add_norm_metadata`), or, for
    documents a NormRankVectorStore ``vectorstore`` holds, from its raw vectors. ``cos``
    needs the document vectors' directions: with ``vectorstore`` (the FAISS store or
    NormRankVectorStore the retriever searches) they are read from it by ``Document.id`` and
    only the query is embedded; documents it does not hold, or every document when no
    ``vectorstore`` is given, are embedded with ``embeddings`` (a normalising model is fine
    here: only directions are used). Returned documents are copies carrying the score in
    ``metadata[score_key]``; ``top_n`` keeps the best ``top_n``.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    embeddings: Embeddings
    alpha: float
    top_n: int | None = None
    vectorstore: Any = None
    norm_key: str = NORM_KEY
    score_key: str = SCORE_KEY

    def __init__(self, **data: Any) -> None:
        super().__init__(
            **reranker_arguments(data, type(self).model_fields, "alpha", "NormReweightCompressor()")
        )

    def scores(self, documents: Sequence[Document], query: str) -> np.ndarray:
        """cos(q, d)·‖d‖^α for each document, shape (n,), float32."""
        docs = list(documents)
        if not docs:
            return np.zeros(0, np.float32)
        have = {} if self.vectorstore is None else _stored_vectors(self.vectorstore, docs)
        # A NormRankVectorStore's vectors are raw, so their length is ||d||; FAISS's may be unit.
        raw = have if _holds_raw_vectors(self.vectorstore) else {}
        missing = [i for i, d in enumerate(docs) if self.norm_key not in d.metadata and i not in raw]
        if missing:
            raise InvalidInputError(
                f"{len(missing)} document(s) lack metadata[{self.norm_key!r}] (first at position "
                f"{missing[0]}): record raw norms at ingestion with "
                "langchain_normrank.embed_with_norms(documents, embeddings) or add_norm_metadata"
            )
        norms = np.asarray(
            [
                float(d.metadata[self.norm_key])
                if self.norm_key in d.metadata
                else float(np.linalg.norm(raw[i]))
                for i, d in enumerate(docs)
            ]
        )
        if not np.all(np.isfinite(norms)) or np.any(norms <= 0):
            raise InvalidInputError(f"metadata[{self.norm_key!r}] must hold positive finite norms")
        q = np.asarray(self.embeddings.embed_query(query), dtype=np.float64)
        todo = [i for i in range(len(docs)) if i not in have]
        if todo:
            fresh = self.embeddings.embed_documents([docs[i].page_content for i in todo])
            have.update(zip(todo, np.asarray(fresh, dtype=np.float64), strict=True))
        d = np.stack([have[i] for i in range(len(docs))]).astype(np.float64)
        cos = (d @ q) / (np.linalg.norm(d, axis=1) * np.linalg.norm(q))
        return norm_weighted(cos, norms, self.alpha)

    def compress_documents(
        self, documents: Sequence[Document], query: str, callbacks: Callbacks | None = None
    ) -> Sequence[Document]:
        docs = list(documents)
        scores = self.scores(docs, query)
        order = np.argsort(-scores, kind="stable")
        if self.top_n is not None:
            order = order[: self.top_n]
        return [
            docs[i].model_copy(update={"metadata": {**docs[i].metadata, self.score_key: float(scores[i])}})
            for i in order
        ]
