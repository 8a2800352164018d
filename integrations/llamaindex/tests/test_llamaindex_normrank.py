"""llama_index.vector_stores.normrank against numpy brute force and LlamaIndex's own index."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
from llama_index.core import StorageContext, VectorStoreIndex
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.schema import NodeRelationship, QueryBundle, RelatedNodeInfo, TextNode
from llama_index.core.vector_stores.types import (
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryMode,
)
from llama_index.vector_stores.normrank import (
    NormMetadataTransform,
    NormRankEmbedding,
    NormRankVectorStore,
    NormReweightPostprocessor,
    UnitNormWarning,
    add_norm_metadata,
)

from normrank.errors import CorruptIndexError, InvalidInputError, InvalidParameterError

N_DOCS, N_QUERIES, DIM = 300, 12, 16
ALPHAS = (-1.0, 0.0, 0.5)


class TableEmbedding(BaseEmbedding):
    """Deterministic raw-vector embedding: the last line of the text names a fixed vector."""

    _table: dict = PrivateAttr()

    def __init__(self, table: dict[str, np.ndarray]) -> None:
        super().__init__(model_name="table")
        self._table = table

    def _vec(self, text: str) -> list[float]:
        return self._table[text.strip().splitlines()[-1]].tolist()

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._vec(query)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._vec(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._vec(text)


@pytest.fixture(scope="module")
def corpus() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(4321)
    dirs = rng.normal(size=(N_DOCS, DIM))
    dirs /= np.linalg.norm(dirs, axis=1, keepdims=True)
    norms = np.exp(rng.normal(0.0, 0.6, size=N_DOCS))
    return {
        "docs": (dirs * norms[:, None]).astype(np.float32),
        "queries": (rng.normal(size=(N_QUERIES, DIM)) * 3.0).astype(np.float32),
    }


@pytest.fixture(scope="module")
def emb(corpus) -> TableEmbedding:
    table = {f"doc {i}": v for i, v in enumerate(corpus["docs"])}
    table.update({f"query {j}": v for j, v in enumerate(corpus["queries"])})
    return TableEmbedding(table)


def make_nodes(corpus, with_embedding: bool = True) -> list[TextNode]:
    nodes = []
    for i in range(N_DOCS):
        node = TextNode(
            text=f"doc {i}",
            id_=f"n{i}",
            metadata={"i": i, "group": i % 10, "tag": "even" if i % 2 == 0 else "odd"},
            embedding=corpus["docs"][i].tolist() if with_embedding else None,
        )
        node.relationships[NodeRelationship.SOURCE] = RelatedNodeInfo(node_id=f"doc{i // 3}")
        nodes.append(node)
    return nodes


def brute(corpus, j: int, alpha: float, k: int = 5, allowed=None) -> tuple[list[int], np.ndarray]:
    d = corpus["docs"].astype(np.float64)
    q = corpus["queries"][j].astype(np.float64)
    norms = np.linalg.norm(d, axis=1)
    s = (d @ q) / (norms * np.linalg.norm(q)) * norms**alpha
    if allowed is not None:
        s = np.where(allowed, s, -np.inf)
    order = np.argsort(-s, kind="stable")[:k]
    order = order[np.isfinite(s[order])]
    return order.tolist(), s[order]


def filled(corpus, norm_alpha: float = 0.0) -> NormRankVectorStore:
    store = NormRankVectorStore(dim=DIM, norm_alpha=norm_alpha)
    store.add(make_nodes(corpus))
    return store


def q(corpus, j: int, k: int = 5, **kw) -> VectorStoreQuery:
    return VectorStoreQuery(query_embedding=corpus["queries"][j].tolist(), similarity_top_k=k, **kw)


def ints(ids) -> list[int]:
    return [int(x[1:]) for x in ids]


@pytest.mark.parametrize("alpha", ALPHAS)
def test_top5_equals_numpy_bruteforce(corpus, alpha):
    store = filled(corpus, norm_alpha=alpha)
    for j in range(N_QUERIES):
        res = store.query(q(corpus, j))
        want_ids, want_scores = brute(corpus, j, alpha)
        assert ints(res.ids) == want_ids
        assert [n.metadata["i"] for n in res.nodes] == want_ids
        np.testing.assert_allclose(res.similarities, want_scores, rtol=1e-4, atol=1e-5)


def test_alphas_change_the_ranking(corpus):
    tops = {a: tuple(tuple(brute(corpus, j, a)[0]) for j in range(N_QUERIES)) for a in ALPHAS}
    assert len(set(tops.values())) == len(ALPHAS)


def test_constructor_norm_alpha_is_default_and_query_overrides(corpus):
    store = filled(corpus, norm_alpha=-1.0)
    for j in range(N_QUERIES):
        assert ints(store.query(q(corpus, j)).ids) == brute(corpus, j, -1.0)[0]
        assert ints(store.query(q(corpus, j), norm_alpha=0.5).ids) == brute(corpus, j, 0.5)[0]
    with pytest.raises(TypeError, match="norm_alpha"):
        store.query(q(corpus, 0), alpha=0.5)  # LlamaIndex's alpha is hybrid weighting: refused
    with pytest.raises(InvalidParameterError):
        NormRankVectorStore(dim=DIM, norm_alpha=float("inf"))


@pytest.mark.parametrize("alpha", ALPHAS)
def test_vector_store_index_retriever(corpus, emb, alpha):
    store = NormRankVectorStore(dim=DIM, norm_alpha=alpha)
    ctx = StorageContext.from_defaults(vector_store=store)
    VectorStoreIndex(make_nodes(corpus, with_embedding=False), storage_context=ctx, embed_model=emb)
    assert len(store) == N_DOCS
    index = VectorStoreIndex.from_vector_store(store, embed_model=emb)
    retriever = index.as_retriever(similarity_top_k=5)
    for j in range(N_QUERIES):
        got = retriever.retrieve(f"query {j}")
        want_ids, want_scores = brute(corpus, j, alpha)
        assert [n.node.metadata["i"] for n in got] == want_ids
        assert [n.node.get_content() for n in got] == [f"doc {i}" for i in want_ids]
        np.testing.assert_allclose([n.score for n in got], want_scores, rtol=1e-4, atol=1e-5)
    other = index.as_retriever(similarity_top_k=3, vector_store_kwargs={"norm_alpha": -0.75})
    assert [n.node.metadata["i"] for n in other.retrieve("query 1")] == brute(corpus, 1, -0.75, k=3)[0]


def test_get_delete_clear(corpus):
    store = filled(corpus)
    assert [n.node_id for n in store.get_nodes(["n5", "nope", "n2"])] == ["n5", "n2"]
    (n5,) = store.get_nodes(["n5"])
    assert n5.get_content() == "doc 5" and n5.metadata["group"] == 5 and n5.ref_doc_id == "doc1"
    store.delete("doc1")  # nodes n3, n4, n5
    assert len(store) == N_DOCS - 3 and store.get_nodes(["n3", "n4", "n5"]) == []
    assert len(store.client) == N_DOCS - 3
    store.delete_nodes(["n6", "n7"])
    store.delete_nodes(filters=MetadataFilters(filters=[MetadataFilter(key="group", value=9)]))
    left = {n.node_id for n in store.get_nodes()}
    assert "n6" not in left and "n8" in left and not any(int(i[1:]) % 10 == 9 for i in left)
    # a deleted node never comes back from a query
    res = store.query(q(corpus, 0, k=N_DOCS))
    assert set(res.ids) == left
    # overwrite an id: new text, new vector, same count
    node = TextNode(text="doc 1", id_="n0", embedding=corpus["docs"][1].tolist(), metadata={"v": 2})
    before = len(store)
    store.add([node])
    assert len(store) == before and store.get_nodes(["n0"])[0].metadata == {"v": 2}
    store.clear()
    assert len(store) == 0 and store.query(q(corpus, 0)).ids == []


def _f(key, value, op=FilterOperator.EQ) -> MetadataFilter:
    return MetadataFilter(key=key, value=value, operator=op)


FILTER_CASES = {
    "eq": (MetadataFilters(filters=[_f("group", 3)]), lambda i: i % 10 == 3),
    "ne": (MetadataFilters(filters=[_f("tag", "even", FilterOperator.NE)]), lambda i: i % 2 == 1),
    "gt": (MetadataFilters(filters=[_f("i", 280, FilterOperator.GT)]), lambda i: i > 280),
    "lt": (MetadataFilters(filters=[_f("i", 12, FilterOperator.LT)]), lambda i: i < 12),
    "in": (
        MetadataFilters(filters=[_f("i", [7, 70, 170, 270, 299], FilterOperator.IN)]),
        lambda i: i in {7, 70, 170, 270, 299},
    ),
    "and": (
        MetadataFilters(
            filters=[_f("group", 2), _f("i", 150, FilterOperator.LT)], condition=FilterCondition.AND
        ),
        lambda i: i % 10 == 2 and i < 150,
    ),
    "or": (
        MetadataFilters(filters=[_f("i", 3), _f("i", 250, FilterOperator.GT)], condition=FilterCondition.OR),
        lambda i: i == 3 or i > 250,
    ),
    "nested": (
        MetadataFilters(
            filters=[
                _f("tag", "odd"),
                MetadataFilters(
                    filters=[_f("i", 20, FilterOperator.LT), _f("i", 280, FilterOperator.GT)],
                    condition=FilterCondition.OR,
                ),
            ]
        ),
        lambda i: i % 2 == 1 and (i < 20 or i > 280),
    ),
}


@pytest.mark.parametrize("case", sorted(FILTER_CASES))
def test_filters_apply_before_the_cut(corpus, case):
    filters, keep = FILTER_CASES[case]
    allowed = np.array([keep(i) for i in range(N_DOCS)])
    store = filled(corpus, norm_alpha=-1.0)
    for j in range(0, N_QUERIES, 3):
        res = store.query(q(corpus, j, filters=filters))
        assert ints(res.ids) == brute(corpus, j, -1.0, allowed=allowed)[0]
    assert (
        sorted(n.metadata["i"] for n in store.get_nodes(filters=filters)) == np.flatnonzero(allowed).tolist()
    )


def test_node_ids_and_doc_ids_restrict_the_query(corpus):
    store = filled(corpus, norm_alpha=0.5)
    res = store.query(q(corpus, 0, k=10, node_ids=["n1", "n200", "n299"]))
    assert ints(res.ids) == brute(corpus, 0, 0.5, k=10, allowed=np.isin(np.arange(N_DOCS), [1, 200, 299]))[0]
    res = store.query(q(corpus, 0, k=10, doc_ids=["doc0", "doc50"]))
    assert sorted(ints(res.ids)) == [0, 1, 2, 150, 151, 152]


def test_persist_round_trip(tmp_path, corpus, emb):
    store = filled(corpus, norm_alpha=-0.5)
    path = tmp_path / "p" / "default__vector_store.json"
    store.persist(str(path))
    store.persist(str(path))  # the second persist replaces the first's index directory
    # the data, its index folder, and the stub SimpleVectorStore would read
    assert sorted(p.name[:30] for p in path.parent.iterdir()) == [
        "default__normrank_store.json", "default__normrank_store.json.i", "default__vector_store.json",
    ]  # fmt: skip
    assert not list(tmp_path.rglob("*.pkl"))
    loaded = NormRankVectorStore.from_persist_path(str(path))
    assert loaded.norm_alpha == -0.5 and loaded.dim == DIM and len(loaded) == N_DOCS
    for j in range(N_QUERIES):
        a, b = store.query(q(corpus, j)), loaded.query(q(corpus, j))
        assert a.ids == b.ids
        np.testing.assert_allclose(a.similarities, b.similarities, rtol=1e-6)
        assert [n.get_content() for n in a.nodes] == [n.get_content() for n in b.nodes]
    loaded.delete("doc0")  # still mutable after loading
    assert len(loaded) == N_DOCS - 3
    # through StorageContext.persist / from_persist_dir, as LlamaIndex users do it
    ctx = StorageContext.from_defaults(vector_store=filled(corpus, norm_alpha=-1.0))
    ctx.persist(persist_dir=str(tmp_path / "storage"))
    again = NormRankVectorStore.from_persist_dir(str(tmp_path / "storage"))
    index = VectorStoreIndex.from_vector_store(again, embed_model=emb)
    got = [n.node.metadata["i"] for n in index.as_retriever(similarity_top_k=5).retrieve("query 4")]
    assert got == brute(corpus, 4, -1.0)[0]


def test_persist_rejects_corruption(tmp_path, corpus):
    path = tmp_path / "vs.json"
    filled(corpus).persist(str(path))
    payload = json.loads(path.read_text())
    payload["index_dir"] = "/etc"
    path.write_text(json.dumps(payload))
    with pytest.raises(CorruptIndexError):
        NormRankVectorStore.from_persist_path(str(path))
    path.write_text("[1, 2")
    with pytest.raises(CorruptIndexError):
        NormRankVectorStore.from_persist_path(str(path))


def test_unit_norm_vectors_warn_once(corpus):
    nodes = make_nodes(corpus)
    for n in nodes:
        v = np.asarray(n.embedding)
        n.embedding = (v / np.linalg.norm(v)).tolist()
    store = NormRankVectorStore(dim=DIM, norm_alpha=-1.0)
    with pytest.warns(UnitNormWarning, match="norm_alpha has no effect"):
        store.add(nodes[:10])
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnitNormWarning)
        store.add(nodes[10:20])
        filled(corpus)  # raw vectors: silent


def llamaindex_mmr(corpus, j: int, alpha: float, k: int, lam: float) -> tuple[list[int], list[float]]:
    """LlamaIndex's get_top_k_mmr_embeddings loop in plain Python, relevance cos * ||d||**alpha:
    the first pick scores lam * s, each next lam * s - (1 - lam) * cos(d, the latest pick)."""
    d = corpus["docs"].astype(np.float64)
    s = brute(corpus, j, alpha, k=len(d))
    rel = np.empty(len(d))
    rel[s[0]] = s[1]
    unit = d / np.linalg.norm(d, axis=1, keepdims=True)
    best = max(range(len(d)), key=lambda i: (rel[i] * lam, -i))
    picks, scores, score = [], [], rel[best] * lam
    while len(picks) < k:
        picks.append(best)
        scores.append(score)
        score, nxt = -np.inf, None
        for i in range(len(d)):
            if i not in picks and lam * rel[i] - (1 - lam) * unit[i] @ unit[best] > score:
                score, nxt = lam * rel[i] - (1 - lam) * unit[i] @ unit[best], i
        best = nxt
    return picks, scores


def test_mmr_mode(corpus):
    store = filled(corpus, norm_alpha=-1.0)
    res = store.query(q(corpus, 2, k=4, mode=VectorStoreQueryMode.MMR), mmr_threshold=0.3)
    assert len(res.ids) == 4 and len(set(res.ids)) == 4
    assert ints(res.ids)[0] == brute(corpus, 2, -1.0, k=1)[0][0]
    picks, scores = llamaindex_mmr(corpus, 2, -1.0, 4, 0.3)
    assert ints(res.ids) == picks
    assert res.similarities == pytest.approx(scores, abs=1e-5)
    with pytest.raises(InvalidParameterError):
        store.query(q(corpus, 2, mode=VectorStoreQueryMode.SVM))


async def test_async_query(corpus):
    store = filled(corpus, norm_alpha=0.5)
    res = await store.aquery(q(corpus, 5))
    assert ints(res.ids) == brute(corpus, 5, 0.5)[0]


@pytest.mark.parametrize("alpha", ALPHAS)
def test_postprocessor_on_another_store_matches_bruteforce(corpus, emb, alpha):
    # Any retriever: LlamaIndex's default SimpleVectorStore, whose scores are cosines.
    nodes = add_norm_metadata(make_nodes(corpus))
    assert "normrank_norm" in nodes[0].excluded_embed_metadata_keys
    index = VectorStoreIndex(nodes, embed_model=emb)
    retriever = index.as_retriever(similarity_top_k=40)
    post = NormReweightPostprocessor(norm_alpha=alpha, top_n=5, embed_model=emb)
    for j in range(N_QUERIES):
        cands = retriever.retrieve(f"query {j}")
        allowed = np.isin(np.arange(N_DOCS), [n.node.metadata["i"] for n in cands])
        want_ids, want_scores = brute(corpus, j, alpha, allowed=allowed)
        out = post.postprocess_nodes(cands, query_bundle=QueryBundle(f"query {j}"))
        assert [n.node.metadata["i"] for n in out] == want_ids
        np.testing.assert_allclose([n.score for n in out], want_scores, rtol=1e-4, atol=1e-5)


def test_postprocessor_never_takes_retriever_scores_for_cosines(corpus, emb):
    # QueryFusionRetriever's reciprocal-rank scores (~0.016) are not cosines: without an
    # embedding model (or embeddings on the nodes and the query) the postprocessor refuses.
    from llama_index.core.llms import MockLLM
    from llama_index.core.retrievers import QueryFusionRetriever
    from llama_index.core.schema import NodeWithScore

    index = VectorStoreIndex(add_norm_metadata(make_nodes(corpus)), embed_model=emb)
    fusion = QueryFusionRetriever(
        [index.as_retriever(similarity_top_k=20)], mode="reciprocal_rerank", num_queries=1,
        similarity_top_k=20, use_async=False, llm=MockLLM(),
    )  # fmt: skip
    cands = fusion.retrieve("query 3")
    assert max(n.score for n in cands) < 0.05  # reciprocal-rank scores
    with pytest.raises(InvalidInputError, match="embed_model"):
        NormReweightPostprocessor(norm_alpha=-1.0).postprocess_nodes(cands, query_str="query 3")
    out = NormReweightPostprocessor(norm_alpha=-1.0, top_n=5, embed_model=emb).postprocess_nodes(
        cands, query_str="query 3"
    )
    allowed = np.isin(np.arange(N_DOCS), [n.node.metadata["i"] for n in cands])
    assert [n.node.metadata["i"] for n in out] == brute(corpus, 3, -1.0, allowed=allowed)[0]
    # nodes and query that carry their embeddings need no model
    with_vecs = [NodeWithScore(node=n, score=0.0) for n in add_norm_metadata(make_nodes(corpus))[:50]]
    qb = QueryBundle("query 3", embedding=emb.get_query_embedding("query 3"))
    out = NormReweightPostprocessor(norm_alpha=-1.0, top_n=5).postprocess_nodes(with_vecs, query_bundle=qb)
    allowed = np.arange(N_DOCS) < 50
    assert [n.node.metadata["i"] for n in out] == brute(corpus, 3, -1.0, allowed=allowed)[0]


def test_postprocessor_needs_norms(corpus):
    post = NormReweightPostprocessor(norm_alpha=-1.0)
    from llama_index.core.schema import NodeWithScore

    with pytest.raises(InvalidInputError, match="add_norm_metadata"):
        post.postprocess_nodes([NodeWithScore(node=TextNode(text="x"), score=0.3)], query_str="q")
    with pytest.raises(InvalidInputError):
        add_norm_metadata([TextNode(text="no embedding")])


def test_ingestion_pipeline_with_raw_embedding_wrapper(corpus):
    from llama_index.core.ingestion import IngestionPipeline

    class FakeEncoder:
        def encode(self, texts, batch_size=64):
            return np.stack([corpus["docs"][int(t.strip().splitlines()[-1].split()[1])] for t in texts])

    embed = NormRankEmbedding(model_name="fake", encoder=FakeEncoder())
    pipeline = IngestionPipeline(transformations=[embed, NormMetadataTransform()])
    nodes = pipeline.run(nodes=make_nodes(corpus, with_embedding=False)[:20])
    norms = np.linalg.norm(corpus["docs"][:20], axis=1)
    np.testing.assert_allclose([n.metadata["normrank_norm"] for n in nodes], norms, rtol=1e-6)
    np.testing.assert_allclose(nodes[3].embedding, corpus["docs"][3], rtol=1e-6)  # raw, not normalised


def test_embedding_wrapper_loads_lazily():
    embed = NormRankEmbedding(model_name="no-such-model-anywhere")  # nothing loaded yet
    with pytest.raises(Exception) as info:  # the encoder loader's own error, or MissingDependencyError
        embed.get_query_embedding("x")
    assert not isinstance(info.value, AssertionError)
