"""langchain-tests' own suites: VectorStoreIntegrationTests and RetrieversIntegrationTests."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest

pytest.importorskip("langchain_tests", reason="pip install langchain-tests")

from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.vectorstores import VectorStore
from langchain_normrank import NormRankRetriever, NormRankVectorStore
from langchain_tests.integration_tests import (
    RetrieversIntegrationTests,
    VectorStoreIntegrationTests,
)


class TestNormRankVectorStoreStandard(VectorStoreIntegrationTests):
    @pytest.fixture()
    def vectorstore(self) -> Generator[VectorStore, None, None]:  # type: ignore[override]
        # The suite's expected orders are cosine orders, i.e. alpha = 0 (the default).
        store = NormRankVectorStore(self.get_embeddings())
        try:
            yield store
        finally:
            store.delete()


class TestNormRankRetrieverStandard(RetrieversIntegrationTests):
    @property
    def retriever_constructor(self) -> type[NormRankRetriever]:
        return NormRankRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        store = NormRankVectorStore(DeterministicFakeEmbedding(size=16), alpha=-0.5)
        store.add_texts([f"document number {i}" for i in range(10)], [{"i": i} for i in range(10)])
        return {"vectorstore": store, "k": 4}

    @property
    def retriever_query_example(self) -> str:
        return "document number 3"
