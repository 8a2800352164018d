"""The async side of :class:`~langchain_normrank.NormRankVectorStore`, with FAISS's signatures.

Every method runs its sync twin in LangChain's executor, so results, scores and relevance are
the sync side's by construction (LangChain's default async methods would compute relevance from
the norm-weighted score, and take fewer positional arguments than FAISS's).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.runnables.config import run_in_executor

__all__ = ["AsyncFaissMethods"]

Pairs = list[tuple[Document, float]]


class AsyncFaissMethods:
    """Mixin: FAISS's async methods, each ``await``-ing its sync twin in an executor thread."""

    async def aadd_texts(
        self,
        texts: Iterable[str],
        metadatas: list[dict] | None = None,
        ids: list[str] | None = None,
        **kwargs: Any,
    ) -> list[str]:
        return await run_in_executor(None, self.add_texts, texts, metadatas, ids, **kwargs)

    @classmethod
    async def afrom_texts(
        cls,
        texts: list[str],
        embedding: Embeddings,
        metadatas: list[dict] | None = None,
        ids: list[str] | None = None,
        **kwargs: Any,
    ) -> Any:
        return await run_in_executor(None, cls.from_texts, texts, embedding, metadatas, ids, **kwargs)

    @classmethod
    async def afrom_embeddings(
        cls,
        text_embeddings: Iterable[tuple[str, list[float]]],
        embedding: Embeddings,
        metadatas: list[dict] | None = None,
        ids: list[str] | None = None,
        **kwargs: Any,
    ) -> Any:
        pairs = list(text_embeddings)  # a one-shot iterator is read here, not in the thread
        return await run_in_executor(None, cls.from_embeddings, pairs, embedding, metadatas, ids, **kwargs)

    async def asimilarity_search_with_score_by_vector(
        self, embedding: list[float], k: int = 4, filter: Any = None, fetch_k: int = 20, **kwargs: Any
    ) -> Pairs:
        return await run_in_executor(
            None, self.similarity_search_with_score_by_vector, embedding, k, filter, fetch_k, **kwargs
        )

    async def asimilarity_search_with_score(
        self, query: str, k: int = 4, filter: Any = None, fetch_k: int = 20, **kwargs: Any
    ) -> Pairs:
        return await run_in_executor(
            None, self.similarity_search_with_score, query, k, filter, fetch_k, **kwargs
        )

    async def asimilarity_search_by_vector(
        self, embedding: list[float], k: int = 4, filter: Any = None, fetch_k: int = 20, **kwargs: Any
    ) -> list[Document]:
        return await run_in_executor(
            None, self.similarity_search_by_vector, embedding, k, filter, fetch_k, **kwargs
        )

    async def asimilarity_search(
        self, query: str, k: int = 4, filter: Any = None, fetch_k: int = 20, **kwargs: Any
    ) -> list[Document]:
        return await run_in_executor(None, self.similarity_search, query, k, filter, fetch_k, **kwargs)

    async def _asimilarity_search_with_relevance_scores(self, query: str, k: int = 4, **kwargs: Any) -> Pairs:
        # the sync relevance (the cosine), not LangChain's default (relevance of the weighted score)
        return await run_in_executor(None, self._similarity_search_with_relevance_scores, query, k, **kwargs)

    async def amax_marginal_relevance_search_with_score_by_vector(
        self,
        embedding: list[float],
        *,
        k: int = 4,
        fetch_k: int = 20,
        lambda_mult: float = 0.5,
        filter: Any = None,
        **kwargs: Any,
    ) -> Pairs:
        return await run_in_executor(
            None,
            self.max_marginal_relevance_search_with_score_by_vector,
            embedding,
            k=k,
            fetch_k=fetch_k,
            lambda_mult=lambda_mult,
            filter=filter,
            **kwargs,
        )

    async def amax_marginal_relevance_search_by_vector(
        self,
        embedding: list[float],
        k: int = 4,
        fetch_k: int = 20,
        lambda_mult: float = 0.5,
        filter: Any = None,
        **kwargs: Any,
    ) -> list[Document]:
        return await run_in_executor(
            None,
            self.max_marginal_relevance_search_by_vector,
            embedding,
            k,
            fetch_k,
            lambda_mult,
            filter,
            **kwargs,
        )

    async def amax_marginal_relevance_search(
        self,
        query: str,
        k: int = 4,
        fetch_k: int = 20,
        lambda_mult: float = 0.5,
        filter: Any = None,
        **kwargs: Any,
    ) -> list[Document]:
        return await run_in_executor(
            None, self.max_marginal_relevance_search, query, k, fetch_k, lambda_mult, filter, **kwargs
        )
