"""Issue 28 (drop-in, round two) and issue 25 items 4-5, from the user's side: each test is a
reproducer that failed on the previous code. The references are langchain_community's FAISS
and numpy."""

from __future__ import annotations

import asyncio
import warnings

import numpy as np
import pytest
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding, Embeddings
from langchain_normrank import MigrationWarning, NormRankVectorStore, UnstorableMetadataError

from normrank.errors import InvalidParameterError

faiss = pytest.importorskip("faiss")
community = pytest.importorskip("langchain_community.vectorstores")
FAISS = community.FAISS
InMemoryDocstore = pytest.importorskip("langchain_community.docstore.in_memory").InMemoryDocstore
pytestmark = pytest.mark.filterwarnings("ignore::normrank.unit_norms.UnitNormWarning")

N, DIM = 60, 10


class RawEmbeddings(Embeddings):
    """Fixed raw vectors (norms spread over ~0.3 .. 3) by text."""

    def __init__(self) -> None:
        rng = np.random.default_rng(28)
        vecs = rng.normal(size=(N, DIM)) * np.exp(rng.normal(0, 0.6, size=(N, 1)))
        self.table = {f"doc {i}": v.astype(np.float32) for i, v in enumerate(vecs)}
        self.table |= {f"query {j}": rng.normal(size=DIM).astype(np.float32) for j in range(4)}

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self.table[t].tolist() for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self.table[text].tolist()


@pytest.fixture()
def emb() -> RawEmbeddings:
    return RawEmbeddings()


@pytest.fixture()
def store(emb) -> NormRankVectorStore:
    texts = [f"doc {i}" for i in range(N)]
    metas = [{"group": i % 3} for i in range(N)]
    return NormRankVectorStore.from_texts(texts, emb, metas, [str(i) for i in range(N)], alpha=-0.5)


def cosines(emb: RawEmbeddings, query: str) -> dict[str, float]:
    q = np.asarray(emb.embed_query(query), np.float64)
    out = {}
    for i in range(N):
        d = emb.table[f"doc {i}"].astype(np.float64)
        out[str(i)] = float(d @ q / np.linalg.norm(d) / np.linalg.norm(q))
    return out


# ---------------------------------------------------------------------- 1: relevance with a filter
def test_relevance_scores_take_filter_fetch_k_and_alpha(store, emb):
    cos = cosines(emb, "query 0")
    for kwargs in (
        {"filter": {"group": 1}},
        {"fetch_k": 5},
        {"alpha": 0.5},
        {"filter": {"group": 2}, "alpha": 0.0},
    ):
        got = store.similarity_search_with_relevance_scores("query 0", k=4, **kwargs)
        assert len(got) == 4
        for doc, rel in got:
            assert rel == pytest.approx(min(1.0, max(0.0, cos[doc.id])), abs=1e-5)
            if "filter" in kwargs:
                assert doc.metadata["group"] == kwargs["filter"]["group"]


def test_score_threshold_retriever_with_a_filter(store, emb):
    cos = cosines(emb, "query 1")
    retriever = store.as_retriever(
        search_type="similarity_score_threshold",
        search_kwargs={"k": 10, "score_threshold": 0.2, "filter": {"group": 0}},
    )
    got = retriever.invoke("query 1")
    want = {i for i, c in cos.items() if c >= 0.2 and int(i) % 3 == 0}
    assert {d.id for d in got} <= want and got


# ---------------------------------------------------------------------- 2: async relevance = sync
def test_async_relevance_is_the_sync_cosine_at_alpha_not_zero(store):
    sync = store.similarity_search_with_relevance_scores("query 2", k=8)
    asyn = asyncio.run(store.asimilarity_search_with_relevance_scores("query 2", k=8))
    assert [(d.id, round(r, 6)) for d, r in asyn] == [(d.id, round(r, 6)) for d, r in sync]
    retriever = store.as_retriever(
        search_type="similarity_score_threshold", search_kwargs={"k": 20, "score_threshold": 0.1}
    )
    assert [d.id for d in retriever.invoke("query 2")] == [
        d.id for d in asyncio.run(retriever.ainvoke("query 2"))
    ]


# ---------------------------------------------------------------------- 4: the missing async methods
def test_missing_async_methods_match_the_sync_ones(store, emb):
    q = emb.embed_query("query 3")
    pairs = list(zip(["doc 1", "doc 2"], emb.embed_documents(["doc 1", "doc 2"]), strict=True))
    made = asyncio.run(NormRankVectorStore.afrom_embeddings(pairs, emb, None, ["a", "b"]))
    assert [d.id for d in made.similarity_search("doc 1", k=2)] == ["a", "b"]
    sync = store.similarity_search_with_score_by_vector(q, 5, {"group": 1}, 10)
    assert asyncio.run(store.asimilarity_search_with_score_by_vector(q, 5, {"group": 1}, 10)) == sync
    sync = store.max_marginal_relevance_search_with_score_by_vector(q, k=4, fetch_k=12, lambda_mult=0.3)
    assert (
        asyncio.run(
            store.amax_marginal_relevance_search_with_score_by_vector(q, k=4, fetch_k=12, lambda_mult=0.3)
        )
        == sync
    )


# ---------------------------------------------------------------------- 5: FAISS's call forms
def test_positional_constructor_and_callable_embedding_function(emb):
    texts = [f"doc {i}" for i in range(N)]
    ours = NormRankVectorStore(emb, faiss.IndexFlatL2(DIM), InMemoryDocstore(), {})
    ours.add_texts(texts)
    assert len(ours) == N and ours.distance_strategy == "COSINE"
    bare = NormRankVectorStore(embedding_function=emb.embed_query, index=faiss.IndexFlatL2(DIM),
                               docstore=InMemoryDocstore(), index_to_docstore_id={})  # fmt: skip
    bare.add_texts(texts)
    assert bare.embeddings is None and bare.embedding_function == emb.embed_query  # as FAISS
    assert [d.page_content for d in bare.similarity_search("query 0", k=3)] == [
        d.page_content for d in ours.similarity_search("query 0", k=3)
    ]
    hnsw = NormRankVectorStore(emb, faiss.IndexHNSWFlat(DIM, 16), InMemoryDocstore(), {})
    assert hnsw.factory == "HNSW16"
    made = NormRankVectorStore.from_texts(texts, emb, docstore=InMemoryDocstore(), index_to_docstore_id={})
    assert len(made) == N
    with pytest.raises(InvalidParameterError, match="from_faiss"):
        NormRankVectorStore.from_texts(
            texts, emb, docstore=InMemoryDocstore({"x": Document(page_content="x")})
        )


def test_positional_arguments_of_async_and_mmr(store, emb):
    ids = asyncio.run(store.aadd_texts(["doc 1"], [{"group": 9}], ["new"]))
    assert ids == ["new"] and store.get_by_ids(["new"])[0].metadata == {"group": 9}
    made = asyncio.run(
        NormRankVectorStore.afrom_texts(["doc 1", "doc 2"], emb, [{"g": 1}, {"g": 2}], ["x", "y"])
    )
    assert sorted(made.get_by_ids(["x", "y"]), key=lambda d: d.id)[1].metadata == {"g": 2}
    hits = asyncio.run(store.asimilarity_search("query 0", 3, {"group": 2}))
    assert len(hits) == 3 and all(d.metadata["group"] == 2 for d in hits)
    mmr = store.max_marginal_relevance_search("query 0", 3, 12, 0.5, {"group": 1})
    assert len(mmr) == 3 and all(d.metadata["group"] == 1 for d in mmr)


def test_load_local_takes_faiss_constructor_options(store, emb, tmp_path):
    store.save_local(tmp_path)
    loaded = NormRankVectorStore.load_local(
        tmp_path,
        emb,
        relevance_score_fn=lambda s: 0.25,
        distance_strategy="COSINE",
        normalize_L2=False,
        io_flags=0,
    )
    assert {r for _, r in loaded.similarity_search_with_relevance_scores("query 0", k=3)} == {0.25}
    with pytest.raises(InvalidParameterError, match="inner product"):
        NormRankVectorStore.load_local(tmp_path, emb, distance_strategy="MAX_INNER_PRODUCT")


# ---------------------------------------------------------------------- 6: docstore edits take effect
def test_docstore_metadata_edits_take_effect(store, tmp_path):
    doc = store.docstore.search("4")
    doc.metadata["group"] = 99  # FAISS users edit in place, then filter on it
    assert [d.id for d in store.similarity_search("query 0", k=5, filter={"group": 99})] == ["4"]
    store.docstore._dict["5"].metadata["group"] = 99
    assert {d.id for d in store.similarity_search("query 0", k=5, filter={"group": 99})} == {"4", "5"}
    doc.page_content = "edited"
    doc.metadata = {"group": 98}
    assert store.get_by_ids(["4"])[0] == Document(id="4", page_content="edited", metadata={"group": 98})
    with pytest.raises(UnstorableMetadataError):
        doc.metadata = {"when": (1, 2)}
    with pytest.raises(InvalidParameterError):
        doc.id = "other"
    store.docstore.search("6").metadata["when"] = {1, 2}  # in place: caught at the save
    with pytest.raises(UnstorableMetadataError, match="'6'"):
        store.save_local(tmp_path / "s")
    assert not (tmp_path / "s" / "index.normrank.json").exists()


# ---------------------------------------------------------------------- 7: FAISS's tie rule
@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_ties_come_in_insertion_order_as_in_faiss(k):
    emb = DeterministicFakeEmbedding(size=16)
    texts, ids = ["foo", "foo", "bar", "foo", "foo", "baz"], ["1", "2", "3", "4", "5", "6"]
    ours = NormRankVectorStore.from_texts(texts, emb, ids=ids)
    theirs = FAISS.from_texts(texts, emb, ids=ids)
    assert [d.id for d in ours.similarity_search("foo", k=k)] == [
        d.id for d in theirs.similarity_search("foo", k=k)
    ]
    assert [d.id for d in ours.similarity_search("foo", k=4)] == ["1", "2", "4", "5"]
    metas = [{"g": i % 2} for i in range(6)]
    ours = NormRankVectorStore.from_texts(texts, emb, metas, ids)
    assert [d.id for d in ours.similarity_search("foo", k=2, filter={"g": 1})] == ["2", "4"]


def test_ties_across_many_documents_keep_insertion_order():
    emb = DeterministicFakeEmbedding(size=8)
    texts = ["same"] * 300 + ["other"] * 5
    store = NormRankVectorStore.from_texts(texts, emb, ids=[str(i) for i in range(305)])
    assert [d.id for d in store.similarity_search("same", k=7)] == [str(i) for i in range(7)]


# ---------------------------------------------------------------------- 10: thresholds above 1
def test_score_threshold_above_one_warns(store):
    from langchain_normrank.vectorstores import ScoreThresholdWarning

    with pytest.warns(ScoreThresholdWarning, match="1 - t / 2"):
        assert store.similarity_search_with_score("query 0", score_threshold=1.2, alpha=0.0) == []
    with pytest.warns(ScoreThresholdWarning):
        store.similarity_search_with_relevance_scores("query 0", score_threshold=1.5)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ScoreThresholdWarning)
        store.similarity_search_with_score("query 0", score_threshold=0.3, alpha=0.0)
        store.similarity_search_with_score("query 0", score_threshold=1.2, alpha=1.0)  # s may exceed 1


# ---------------------------------------------------------------------- issue 25 item 4: int ids
def test_int_ids_are_the_same_ids_on_every_path(emb):
    texts = ["doc 1", "doc 2", "doc 3"]
    ours = NormRankVectorStore.from_texts(texts, emb, ids=[1, 2, 3])
    theirs = FAISS.from_texts(texts, emb, ids=[1, 2, 3])
    assert [d.id for d in ours.get_by_ids([2])] == [d.id for d in theirs.get_by_ids([2])] == ["2"]
    assert ours.delete(ids=[1]) is True and theirs.delete(ids=[1]) is True
    assert sorted(ours.index_to_docstore_id.values()) == ["2", "3"]
    assert asyncio.run(ours.aget_by_ids([3]))[0].page_content == "doc 3"
    assert ours.docstore.search(3).page_content == "doc 3"
    with pytest.raises(Exception, match="ids"):
        ours.add_texts(["doc 1"], ids=[1.5])
    with pytest.raises(Exception, match="ids"):
        ours.delete(ids="2")  # one string is not a list of ids


# ---------------------------------------------------------------------- issue 25 item 5: compressed
@pytest.mark.parametrize("factory", ["IVF4,PQ5x4", "PQ5x4", "SQ8", "IVF4,SQ8", "PCA8,Flat"])
def test_from_faiss_on_compressed_codes_re_embeds_with_a_warning(factory, emb):
    texts = [f"doc {i}" for i in range(N)]
    vecs = np.asarray(emb.embed_documents(texts), np.float32)
    index = faiss.index_factory(DIM, factory)
    index.train(np.concatenate([vecs] * 5))
    old = FAISS(emb, index, InMemoryDocstore(), {})
    old.add_texts(texts, ids=[str(i) for i in range(N)])
    with pytest.warns(MigrationWarning, match="compressed codes"):
        new = NormRankVectorStore.from_faiss(old, alpha=-0.5)
    norms = new.index.norm_of(np.arange(N))
    assert norms == pytest.approx(np.linalg.norm(vecs, axis=1), rel=1e-5)  # the raw norms, not decoded ones


def test_from_faiss_on_raw_vectors_copies_them_silently(emb):
    texts = [f"doc {i}" for i in range(N)]
    old = FAISS.from_texts(texts, emb)
    with warnings.catch_warnings():
        warnings.simplefilter("error", MigrationWarning)
        new = NormRankVectorStore.from_faiss(old)
    assert len(new) == N


def test_add_embeddings_takes_pgvector_keywords_and_names_a_wrong_form():
    """PGVector's add_embeddings(texts=, embeddings=) beside FAISS's pairs (issue 38); texts
    without vectors raise a typed error instead of unpacking a string."""
    from normrank.errors import InvalidInputError

    emb = DeterministicFakeEmbedding(size=8)
    store = NormRankVectorStore(emb)
    vectors = emb.embed_documents(["a", "b"])
    assert store.add_embeddings(texts=["a", "b"], embeddings=vectors, ids=["x", "y"]) == ["x", "y"]
    assert store.add_embeddings([("c", vectors[0])], ids=["z"]) == ["z"]
    assert [d.page_content for d in store.get_by_ids(["x", "y", "z"])] == ["a", "b", "c"]
    with pytest.raises(InvalidInputError, match="pairs"):
        store.add_embeddings(["a", "b"])
    with pytest.raises(InvalidInputError, match="one length"):
        store.add_embeddings(texts=["a"], embeddings=vectors)


def test_pgvector_operators_in_memory_match_their_python_meaning():
    """$ne $between $like $ilike $exists and $not over a list, in memory, against a brute-force
    reading of each operator (issue 38); an ordering across kinds raises whatever the query."""
    from langchain_normrank.filters import FilterTypeError

    metas = [
        {"t": "Intro_1", "y": 1999, "n": None},
        {"t": "intro 2", "y": 2004.5},
        {"t": "ROME", "y": 2010, "n": 1},
        {"t": "a%b", "y": 2000},
        {"y": 1990},
    ]
    store = NormRankVectorStore.from_texts(
        [f"doc {i}" for i in range(5)], DeterministicFakeEmbedding(size=8), metas
    )
    cases = [
        ({"t": {"$ne": "ROME"}}, lambda m: m.get("t") != "ROME"),
        ({"y": {"$between": [1999, 2004.5]}}, lambda m: 1999 <= m["y"] <= 2004.5),
        ({"t": {"$like": "Intro\\_%"}}, lambda m: m.get("t") == "Intro_1"),
        ({"t": {"$like": "a\\%b"}}, lambda m: m.get("t") == "a%b"),
        ({"t": {"$ilike": "intro%"}}, lambda m: str(m.get("t", "")).lower().startswith("intro")),
        ({"n": {"$exists": True}}, lambda m: "n" in m),
        ({"t": {"$exists": False}}, lambda m: "t" not in m),
        (
            {"$not": [{"y": {"$lt": 2000}}, {"t": "ROME"}]},
            lambda m: not (m["y"] < 2000 or m.get("t") == "ROME"),
        ),
    ]
    for f, want in cases:
        got = {d.metadata["y"] for d in store.similarity_search("q", k=5, filter=f)}
        assert got == {m["y"] for m in metas if want(m)}, f
    for f in ({"t": {"$gt": 3}}, {"y": {"$like": "19%"}}, {"$or": [{"y": 1}, {"y": {"$gte": "2000"}}]}):
        for q in ("q", "another query"):
            with pytest.raises(FilterTypeError, match=r"filter on '[ty]'"):
                store.similarity_search(q, k=1, filter=f)
    with pytest.raises(InvalidParameterError, match="between"):
        store.similarity_search("q", filter={"y": {"$between": [1]}})
    with pytest.raises(InvalidParameterError, match="exists"):
        store.similarity_search("q", filter={"y": {"$exists": 1}})
