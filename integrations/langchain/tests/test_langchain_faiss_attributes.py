"""FAISS's attributes that its documentation reads (``db.docstore._dict``, ``docstore.search``,
``index_to_docstore_id``, ``embedding_function``), read the same way from both stores."""

from __future__ import annotations

import pytest
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_normrank import NormRankVectorStore

from normrank.errors import InvalidParameterError

community = pytest.importorskip("langchain_community.vectorstores", reason="pip install langchain-community")


def merge_snippet(FAISS, emb) -> tuple[dict, dict, list[str], object]:
    """LangChain's FAISS docs, 'Merging': print db1.docstore._dict before and after merge_from."""
    db1 = FAISS.from_texts(["foo"], emb, ids=["a"])
    db2 = FAISS.from_texts(["bar"], emb, ids=["b"])
    before = {k: d.page_content for k, d in db1.docstore._dict.items()}
    db1.merge_from(db2)
    after = {k: d.page_content for k, d in db1.docstore._dict.items()}
    found = [db1.docstore.search("b").page_content, db1.docstore.search("zz")]
    return before, after, found + list(db1.index_to_docstore_id.values()), db1.embedding_function


def test_docstore_and_map_read_as_in_faiss():
    emb = DeterministicFakeEmbedding(size=16)
    ours = merge_snippet(NormRankVectorStore, emb)
    theirs = merge_snippet(community.FAISS, emb)
    assert ours == theirs
    assert ours[1] == {"a": "foo", "b": "bar"}
    assert ours[3] is emb


def test_docstore_view_follows_the_store_and_refuses_writes():
    store = NormRankVectorStore.from_texts(
        ["x", "y", "z"], DeterministicFakeEmbedding(size=8), ids=["1", "2", "3"]
    )
    docstore = store.docstore
    store.delete(ids=["2"])
    assert list(docstore._dict) == ["1", "3"]
    assert dict(store.index_to_docstore_id) == {0: "1", 1: "3"}
    with pytest.raises(InvalidParameterError, match="add_documents"):
        docstore.add({"4": None})
    with pytest.raises(TypeError):
        docstore._dict["4"] = None  # read-only mapping, the store is unchanged
    assert len(store.get_by_ids(["1", "2", "3", "4"])) == 2
