"""LangChain's FAISS documentation quickstart (docs.langchain.com, "FAISS" vector store
integration: initialise, add documents with uuids, delete, filtered search, search with score,
MMR retriever with a filter, save/load, merge), written against ``FAISS`` and run twice: with
langchain_community's FAISS, then with ``NormRankVectorStore`` in its place, nothing else
changed. The documents found must be the same; the scores are what differs (FAISS: squared L2
distance, lower is better; normrank: similarity, higher is better; on unit vectors
``cos = 1 - L2**2 / 2``).

Only the docs' ``db1.docstore._dict`` prints are left out: they read a FAISS internal.
"""

from __future__ import annotations

import warnings
from uuid import uuid4

import numpy as np
import pytest
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding, Embeddings

faiss = pytest.importorskip("faiss")
community = pytest.importorskip("langchain_community.vectorstores", reason="pip install langchain-community")
InMemoryDocstore = pytest.importorskip("langchain_community.docstore.in_memory").InMemoryDocstore


class UnitFake(Embeddings):
    """Deterministic unit vectors, so that FAISS's L2 order is the cosine order too."""

    def __init__(self) -> None:
        self.inner = DeterministicFakeEmbedding(size=32)

    def _unit(self, v: list[float]) -> list[float]:
        a = np.asarray(v, dtype=np.float64)
        return (a / np.linalg.norm(a)).tolist()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._unit(v) for v in self.inner.embed_documents(texts)]

    def embed_query(self, text: str) -> list[float]:
        return self._unit(self.inner.embed_query(text))


def quickstart(FAISS, embeddings, folder: str) -> list[tuple[str, float | None]]:
    """The documentation's steps, as a user copies them; returns (text, score) of every result."""
    out: list[tuple[str, float | None]] = []
    index = faiss.IndexFlatL2(len(embeddings.embed_query("hello world")))
    vector_store = FAISS(
        embedding_function=embeddings,
        index=index,
        docstore=InMemoryDocstore(),
        index_to_docstore_id={},
    )
    documents = [
        Document(page_content="Pancakes and eggs for breakfast this morning.", metadata={"source": "tweet"}),
        Document(
            page_content="Tomorrow: cloudy and overcast, a high of 62 degrees.", metadata={"source": "news"}
        ),
        Document(
            page_content="Building a new project with LangChain, come and see!", metadata={"source": "tweet"}
        ),
        Document(
            page_content="Robbers broke into the city bank and took $1 million.", metadata={"source": "news"}
        ),
        Document(page_content="What an amazing movie. I want to see it again.", metadata={"source": "tweet"}),
        Document(
            page_content="Is the new phone worth the price? Our review.", metadata={"source": "website"}
        ),
        Document(page_content="The ten best soccer players right now.", metadata={"source": "website"}),
        Document(page_content="LangGraph is great for stateful, agentic apps!", metadata={"source": "tweet"}),
        Document(
            page_content="Stocks fell 500 points today on recession fears.", metadata={"source": "news"}
        ),
        Document(page_content="I have a feeling I am about to be deleted :(", metadata={"source": "tweet"}),
    ]
    uuids = [str(uuid4()) for _ in range(len(documents))]
    vector_store.add_documents(documents=documents, ids=uuids)
    vector_store.delete(ids=[uuids[-1]])

    query = "LangChain provides abstractions to make working with LLMs easy"
    for res in vector_store.similarity_search(query, k=2, filter={"source": "tweet"}):
        out.append((res.page_content, None))
    for res in vector_store.similarity_search(query, k=2, filter={"source": {"$eq": "tweet"}}):
        out.append((res.page_content, None))
    for res, score in vector_store.similarity_search_with_score(
        "Will it be hot tomorrow?", k=1, filter={"source": "news"}
    ):
        out.append((res.page_content, float(score)))

    retriever = vector_store.as_retriever(search_type="mmr", search_kwargs={"k": 1})
    for res in retriever.invoke("Stealing from the bank is a crime", filter={"source": "news"}):
        out.append((res.page_content, None))

    vector_store.save_local(folder)
    new_vector_store = FAISS.load_local(folder, embeddings, allow_dangerous_deserialization=True)
    for res in new_vector_store.similarity_search("qux"):
        out.append((res.page_content, None))

    db1 = FAISS.from_texts(["foo"], embeddings)
    db2 = FAISS.from_texts(["bar"], embeddings)
    db1.merge_from(db2)
    for res in db1.similarity_search("bar", k=2):
        out.append((res.page_content, None))
    return out


def test_faiss_quickstart_runs_unchanged_with_normrank(tmp_path):
    from langchain_normrank import NormRankVectorStore, UnitNormWarning

    want = quickstart(community.FAISS, UnitFake(), str(tmp_path / "faiss"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnitNormWarning)  # unit vectors on purpose, see UnitFake
        got = quickstart(NormRankVectorStore, UnitFake(), str(tmp_path / "normrank"))
    assert [t for t, _ in got] == [t for t, _ in want]
    (faiss_l2,) = [s for _, s in want if s is not None]
    (similarity,) = [s for _, s in got if s is not None]
    assert similarity == pytest.approx(1.0 - faiss_l2 / 2.0, abs=1e-5)  # higher is better
    assert not list((tmp_path / "normrank").glob("*.pkl"))
