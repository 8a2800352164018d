"""Issue 28 (drop-in, round two), LlamaIndex side, from the user's side: misspelt retriever
arguments raise (``NormRankRetriever``), the index's docstore and ref_doc_info are filled as over
SimpleVectorStore (``store_nodes_override=True``, LlamaIndex's own argument), MMR
is SimpleVectorStore's (same picks, same scores at norm_alpha = 0). Each failed on the old code;
the reference is LlamaIndex's own SimpleVectorStore."""

from __future__ import annotations

import numpy as np
import pytest
from llama_index.core import StorageContext, VectorStoreIndex, load_index_from_storage
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.schema import Document, TextNode
from llama_index.core.vector_stores import SimpleVectorStore
from llama_index.core.vector_stores.types import (
    MetadataFilter,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryMode,
)
from llama_index.vector_stores.normrank import NormRankRetriever, NormRankVectorStore, UnknownArgumentError

from normrank.errors import InvalidParameterError

pytestmark = pytest.mark.filterwarnings("ignore")
N, DIM = 300, 16


class Table(BaseEmbedding):
    _table: dict = PrivateAttr()

    def __init__(self) -> None:
        super().__init__(model_name="table")
        rng = np.random.default_rng(928)
        x = rng.normal(size=(N, DIM)) * np.exp(rng.normal(0, 0.6, size=(N, 1)))
        self._table = {f"doc {i}": v.tolist() for i, v in enumerate(x)}
        self._table |= {f"query {j}": rng.normal(size=DIM).tolist() for j in range(6)}

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._table[query]

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._table[query]

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._table[text.splitlines()[-1]]


EMB = Table()


def documents() -> list[Document]:
    return [Document(id_=f"d{i}", text=f"doc {i}", metadata={"group": i % 4}) for i in range(N)]


def index_over(store, **kwargs) -> VectorStoreIndex:
    ctx = StorageContext.from_defaults(vector_store=store)
    return VectorStoreIndex.from_documents(documents(), storage_context=ctx, embed_model=EMB, **kwargs)


# ---------------------------------------------------------------------- 3: misspellings raise
@pytest.mark.parametrize(
    "kwargs, hint",
    [
        ({"nrom_alpha": -0.5}, "norm_alpha"),
        ({"norm_alhpa": -0.5}, "norm_alpha"),
        ({"similarity_topk": 3}, "similarity_top_k"),
        ({"filter": MetadataFilters(filters=[])}, "filters"),
        ({"mmr_treshold": 0.2}, "mmr_threshold"),
        ({"vector_store_kwarg": {"norm_alpha": 0.0}}, "vector_store_kwargs"),
    ],
)
def test_misspelt_retriever_arguments_raise(kwargs, hint):
    index = index_over(NormRankVectorStore(dim=DIM))
    with pytest.raises(UnknownArgumentError, match=hint):
        NormRankRetriever(index, **kwargs)


def test_query_engine_arguments_still_pass_and_norm_alpha_reaches_the_store():
    from llama_index.core.llms import MockLLM
    from llama_index.core.query_engine import RetrieverQueryEngine

    index = index_over(NormRankVectorStore(dim=DIM, norm_alpha=0.0))
    engine = index.as_query_engine(
        llm=MockLLM(), response_mode="compact", similarity_top_k=3, streaming=False
    )
    assert len(engine.query("query 0").source_nodes) == 3
    a = [
        n.node.ref_doc_id
        for n in NormRankRetriever(index, similarity_top_k=5, norm_alpha=-2.0).retrieve("query 1")
    ]
    b = [n.node.ref_doc_id for n in index.as_retriever(similarity_top_k=5).retrieve("query 1")]
    assert a != b  # the per-retriever alpha reached the search
    retriever = NormRankRetriever(index, similarity_top_k=5, norm_alpha=-2.0)
    engine = RetrieverQueryEngine.from_args(retriever, llm=MockLLM(), response_mode="compact")
    assert [n.node.ref_doc_id for n in engine.query("query 1").source_nodes] == a
    with pytest.raises(UnknownArgumentError, match="NormRankVectorStore"):
        NormRankRetriever(index_over(SimpleVectorStore()))  # over another store: as_retriever()


# ---------------------------------------------------------------------- 8: docstore and ref_doc_info
def test_docstore_and_ref_doc_info_are_filled_as_over_simple(tmp_path):
    ours = index_over(NormRankVectorStore(dim=DIM), store_nodes_override=True)  # LlamaIndex's argument
    simple = index_over(SimpleVectorStore())
    assert len(ours.docstore.docs) == len(simple.docstore.docs) == N
    assert sorted(ours.ref_doc_info) == sorted(simple.ref_doc_info) == sorted(f"d{i}" for i in range(N))
    changed = [
        Document(id_="d3", text="doc 7", metadata={"group": 0}),
        Document(id_="d1", text="doc 1", metadata={"group": 1}),
    ]
    assert ours.refresh_ref_docs(changed) == simple.refresh_ref_docs(changed) == [True, False]
    ours.delete_ref_doc("d5", delete_from_docstore=True)
    assert "d5" not in ours.ref_doc_info and len(ours.vector_store) == N - 1
    ours.storage_context.persist(str(tmp_path))
    ctx = StorageContext.from_defaults(
        persist_dir=str(tmp_path), vector_store=NormRankVectorStore.from_persist_dir(str(tmp_path))
    )
    again = load_index_from_storage(ctx, embed_model=EMB, store_nodes_override=True)
    assert sorted(again.ref_doc_info) == sorted(ours.ref_doc_info)
    assert [n.node.ref_doc_id for n in again.as_retriever(similarity_top_k=4).retrieve("query 2")] == [
        n.node.ref_doc_id for n in ours.as_retriever(similarity_top_k=4).retrieve("query 2")
    ]


def test_nodes_in_the_store_alone_by_default():
    # LlamaIndex's default for a store that keeps text (as PGVectorStore): nothing patched
    index = index_over(NormRankVectorStore(dim=DIM))
    assert not index.docstore.docs
    with pytest.raises(NotImplementedError):
        _ = index.ref_doc_info
    assert len(index.as_retriever(similarity_top_k=3).retrieve("query 0")) == 3


# ---------------------------------------------------------------------- 9: MMR is SimpleVectorStore's
@pytest.mark.parametrize("threshold", [None, 0.0, 0.3, 0.7, 1.0])
@pytest.mark.parametrize("k", [1, 4, 10])
def test_mmr_equals_simple_vector_store(threshold, k):
    ours, simple = index_over(NormRankVectorStore(dim=DIM)), index_over(SimpleVectorStore())
    extra = {} if threshold is None else {"vector_store_kwargs": {"mmr_threshold": threshold}}
    for j in range(3):
        got = []
        for idx in (ours, simple):
            retriever = idx.as_retriever(similarity_top_k=k, vector_store_query_mode="mmr", **extra)
            got.append([(n.node.ref_doc_id, round(n.score, 5)) for n in retriever.retrieve(f"query {j}")])
        assert got[0] == got[1]


def test_mmr_with_filters_equals_simple_vector_store():
    filters = MetadataFilters(filters=[MetadataFilter(key="group", value=2)])
    ours, simple = NormRankVectorStore(dim=DIM), SimpleVectorStore()
    nodes = [
        TextNode(id_=f"n{i}", text=f"doc {i}", metadata={"group": i % 4}, embedding=EMB._table[f"doc {i}"])
        for i in range(N)
    ]
    ours.add(nodes)
    simple.add(nodes)
    q = VectorStoreQuery(
        query_embedding=EMB._table["query 3"],
        similarity_top_k=6,
        mode=VectorStoreQueryMode.MMR,
        filters=filters,
    )
    a, b = ours.query(q, mmr_threshold=0.4), simple.query(q, mmr_threshold=0.4)
    assert a.ids == b.ids
    assert a.similarities == pytest.approx(b.similarities, abs=1e-6)


def test_mmr_threshold_out_of_range_is_refused():
    index = index_over(NormRankVectorStore(dim=DIM))
    with pytest.raises(InvalidParameterError, match="mmr_threshold"):
        NormRankRetriever(index, vector_store_query_mode="mmr", mmr_threshold=1.5).retrieve("query 0")
    with pytest.raises(InvalidParameterError, match="mmr_threshold"):
        kwargs = {"mmr_threshold": 1.5}
        index.as_retriever(vector_store_query_mode="mmr", vector_store_kwargs=kwargs).retrieve("query 0")


def test_to_dict_round_trip_keeps_every_node():
    store = NormRankVectorStore(dim=DIM, norm_alpha=-0.5)
    nodes = [TextNode(id_=f"n{i}", text=f"doc {i}", embedding=EMB._table[f"doc {i}"]) for i in range(20)]
    store.add(nodes)
    back = NormRankVectorStore.from_json(store.to_json())
    q = VectorStoreQuery(query_embedding=EMB._table["query 0"], similarity_top_k=5)
    assert back.query(q).ids == store.query(q).ids and back.norm_alpha == -0.5
    assert back.get("n3") == pytest.approx(EMB._table["doc 3"], rel=1e-6)
