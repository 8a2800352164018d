"""A user's own index behind the LlamaIndex NormRankVectorStore: the numpy backend of
docs/backends.md handed over with ``from_index``, used as any store (add, filtered query, MMR,
delete by document, persist and reload, VectorStoreIndex), ranking as numpy brute force and as
the FAISS-backed store; what does not conform is refused naming what is missing."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from llama_index.core import MockEmbedding, StorageContext, VectorStoreIndex
from llama_index.core.schema import NodeRelationship, QueryBundle, RelatedNodeInfo, TextNode
from llama_index.core.vector_stores.types import (
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryMode,
)
from llama_index.vector_stores.normrank import NormRankVectorStore

from normrank import IndexBackend, NonConformingIndexError
from normrank.errors import CorruptIndexError, InvalidParameterError
from normrank.store.keyed_store import StoreNotFoundError

REPO = Path(__file__).resolve().parents[3]
DIM, N = 16, 60


def docs_backend() -> type:
    """``BruteForceIndex`` as docs/backends.md defines it (its first python block, run)."""
    text = (REPO / "docs" / "backends.md").read_text(encoding="utf-8")
    code = re.search(r"^```python\n(.*?)^```", text, re.S | re.M).group(1)
    namespace: dict[str, Any] = {"__name__": "docs_backends"}
    exec(compile(code, "docs/backends.md", "exec"), namespace)
    return namespace["BruteForceIndex"]


BruteForceIndex = docs_backend()


@pytest.fixture(scope="module")
def data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(12)
    x = rng.normal(size=(N, DIM)) * rng.lognormal(0.0, 0.5, size=(N, 1))
    return x.astype(np.float32), rng.normal(size=(4, DIM)).astype(np.float32)


def nodes(x: np.ndarray) -> list[TextNode]:
    return [
        TextNode(
            id_=f"n{i}",
            text=f"text {i}",
            embedding=x[i].tolist(),
            metadata={"group": i % 3},
            relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id=f"doc{i % 5}")},
        )
        for i in range(len(x))
    ]


def numpy_top(x: np.ndarray, q: np.ndarray, alive: list[int], alpha: float, k: int) -> list[str]:
    xs = x[alive].astype(np.float64)
    norms = np.linalg.norm(xs, axis=1)
    s = xs @ q.astype(np.float64) / norms / np.linalg.norm(q) * norms**alpha
    return [f"n{alive[j]}" for j in np.argsort(-s, kind="stable")[:k]]


GROUP_1 = MetadataFilters(filters=[MetadataFilter(key="group", value=1, operator=FilterOperator.EQ)])


@pytest.mark.parametrize("alpha", [-1.0, 0.0, 1.0])
def test_the_docs_backend_ranks_as_numpy_and_as_the_faiss_store(data, alpha):
    x, queries = data
    store = NormRankVectorStore.from_index(BruteForceIndex(DIM), norm_alpha=alpha)
    peer = NormRankVectorStore(norm_alpha=alpha)
    store.add(nodes(x))
    peer.add(nodes(x))
    assert isinstance(store.client, IndexBackend) and store.dim == DIM
    for q in queries:
        plain = store.query(VectorStoreQuery(query_embedding=q.tolist(), similarity_top_k=5))
        assert plain.ids == numpy_top(x, q, list(range(N)), alpha, 5)
        got = store.query(VectorStoreQuery(query_embedding=q.tolist(), similarity_top_k=4, filters=GROUP_1))
        assert got.ids == numpy_top(x, q, [i for i in range(N) if i % 3 == 1], alpha, 4)
        want = peer.query(VectorStoreQuery(query_embedding=q.tolist(), similarity_top_k=4, filters=GROUP_1))
        np.testing.assert_allclose(got.similarities, want.similarities, rtol=1e-5)
        mmr = VectorStoreQuery(query_embedding=q.tolist(), similarity_top_k=4, mode=VectorStoreQueryMode.MMR)
        assert store.query(mmr).ids == peer.query(mmr).ids


def test_delete_persist_and_reload_with_the_index(data, tmp_path):
    x, queries = data
    store = NormRankVectorStore.from_index(BruteForceIndex(DIM), norm_alpha=-0.5)
    store.add(nodes(x))
    store.delete("doc0")  # every node of that document
    alive = [i for i in range(N) if i % 5 != 0]
    assert len(store) == len(alive) == len(store.client)
    q = queries[0].tolist()
    assert store.query(VectorStoreQuery(query_embedding=q, similarity_top_k=6)).ids == numpy_top(
        x, queries[0], alive, -0.5, 6
    )
    store.persist(str(tmp_path / "default__vector_store.json"))
    with pytest.raises(StoreNotFoundError, match=r"BruteForceIndex.*from_persist_dir\(\.\.\., index=\)"):
        NormRankVectorStore.from_persist_dir(str(tmp_path))
    with pytest.raises(CorruptIndexError, match="different ids"):  # an empty one: a restart lost them
        NormRankVectorStore.from_persist_dir(str(tmp_path), index=BruteForceIndex(DIM))
    again = NormRankVectorStore.from_persist_dir(str(tmp_path), index=store.client)
    assert again.norm_alpha == -0.5 and len(again) == len(alive)
    query = VectorStoreQuery(query_embedding=q, similarity_top_k=5, filters=GROUP_1)
    assert again.query(query).ids == store.query(query).ids


def test_a_vector_store_index_over_the_docs_backend(data):
    x, queries = data
    store = NormRankVectorStore.from_index(BruteForceIndex(DIM))
    ctx = StorageContext.from_defaults(vector_store=store)
    # the nodes carry their embeddings and the query brings its own: the model is never called
    index = VectorStoreIndex(nodes(x), storage_context=ctx, embed_model=MockEmbedding(embed_dim=DIM))
    retriever = index.as_retriever(similarity_top_k=3, vector_store_kwargs={"norm_alpha": 1.0})
    got = retriever.retrieve(QueryBundle(query_str="q", embedding=queries[1].tolist()))
    assert [n.node.node_id for n in got] == numpy_top(x, queries[1], list(range(N)), 1.0, 3)


class HalfDone:
    dim = DIM

    def __len__(self) -> int:
        return 0

    def add(self, x, ids):
        pass


def test_an_index_that_does_not_conform_is_refused_naming_what_is_missing():
    with pytest.raises(NonConformingIndexError, match="missing ids, remove, search, norm_of, reconstruct"):
        NormRankVectorStore.from_index(HalfDone())
    full = BruteForceIndex(DIM)
    full.add(np.ones((1, DIM)), ids=[0])
    with pytest.raises(InvalidParameterError, match="from_persist_dir"):
        NormRankVectorStore.from_index(full)
    assert NormRankVectorStore.from_index(BruteForceIndex(DIM, alpha=0.75)).norm_alpha == 0.75


def test_a_factory_needing_training_names_from_index_over_a_trained_norm_index(tmp_path):
    """The check the LangChain store now shares (issue 46, defect 10): refused when made, with
    the way that works; and that way persists the trained NormIndex in the folder."""
    from normrank import NormIndex

    with pytest.raises(InvalidParameterError, match=r"NormRankVectorStore\.from_index\(index\)"):
        NormRankVectorStore(dim=DIM, factory="IVF4,Flat")
    rng = np.random.default_rng(3)
    x = (rng.normal(size=(40, DIM)) * rng.lognormal(size=(40, 1))).astype(np.float32)
    index = NormIndex(DIM, factory="IVF4,Flat", nprobe=4)
    index.train(x)
    store = NormRankVectorStore.from_index(index, norm_alpha=-0.5)
    store.add([TextNode(id_=f"n{i}", text=f"n{i}", embedding=v.tolist()) for i, v in enumerate(x)])
    store.persist(str(tmp_path / "store.json"))
    again = NormRankVectorStore.from_persist_path(str(tmp_path / "store.json"))
    query = VectorStoreQuery(query_embedding=x[7].tolist(), similarity_top_k=3)
    assert isinstance(again.client, NormIndex) and again.query(query).ids == store.query(query).ids
