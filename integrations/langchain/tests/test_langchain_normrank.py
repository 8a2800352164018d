"""NormRankVectorStore / NormRankRetriever / NormReweightCompressor against numpy brute force."""

from __future__ import annotations

import datetime
import json
import warnings

import numpy as np
import pytest
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_normrank import (
    NormRankVectorStore,
    NormReweightCompressor,
    UnitNormWarning,
    UnstorableMetadataError,
    add_norm_metadata,
    relevance_from_cosine,
)

from normrank.errors import CorruptIndexError, InvalidInputError, InvalidParameterError

N_DOCS, N_QUERIES, DIM = 300, 12, 16
ALPHAS = (-1.0, 0.0, 0.5)


class TableEmbeddings(Embeddings):
    """Deterministic fake: each known text maps to a fixed raw vector (norms vary)."""

    def __init__(self, table: dict[str, np.ndarray]) -> None:
        self.table = table

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self.table[t].tolist() for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self.table[text].tolist()


@pytest.fixture(scope="module")
def corpus() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1234)
    dirs = rng.normal(size=(N_DOCS, DIM))
    dirs /= np.linalg.norm(dirs, axis=1, keepdims=True)
    norms = np.exp(rng.normal(0.0, 0.6, size=N_DOCS))  # roughly 0.2 .. 6
    docs = (dirs * norms[:, None]).astype(np.float32)
    queries = rng.normal(size=(N_QUERIES, DIM)).astype(np.float32) * 3.0
    return {"docs": docs, "queries": queries}


@pytest.fixture(scope="module")
def emb(corpus) -> TableEmbeddings:
    table = {f"doc {i}": v for i, v in enumerate(corpus["docs"])}
    table.update({f"query {j}": v for j, v in enumerate(corpus["queries"])})
    return TableEmbeddings(table)


def texts() -> list[str]:
    return [f"doc {i}" for i in range(N_DOCS)]


def metas() -> list[dict]:
    return [{"i": i, "group": i % 10} for i in range(N_DOCS)]


def brute(corpus, j: int, alpha: float, k: int = 5, allowed=None) -> tuple[list[int], np.ndarray]:
    d = corpus["docs"].astype(np.float64)
    q = corpus["queries"][j].astype(np.float64)
    norms = np.linalg.norm(d, axis=1)
    s = (d @ q) / (norms * np.linalg.norm(q)) * norms**alpha
    if allowed is not None:
        s = np.where(allowed, s, -np.inf)
    order = np.argsort(-s, kind="stable")[:k]
    return order.tolist(), s[order]


def make_store(emb, alpha: float = 0.0) -> NormRankVectorStore:
    return NormRankVectorStore.from_texts(
        texts(), emb, metas(), ids=[str(i) for i in range(N_DOCS)], alpha=alpha
    )


@pytest.mark.parametrize("alpha", ALPHAS)
def test_top5_equals_numpy_bruteforce(corpus, emb, alpha):
    store = make_store(emb, alpha=alpha)
    for j in range(N_QUERIES):
        got = store.similarity_search_with_score(f"query {j}", k=5)
        want_ids, want_scores = brute(corpus, j, alpha)
        assert [int(d.id) for d, _ in got] == want_ids
        np.testing.assert_allclose([s for _, s in got], want_scores, rtol=1e-4, atol=1e-5)
        assert [d.metadata["i"] for d, _ in got] == want_ids


def test_alphas_change_the_ranking(corpus):
    # Guards the test above: with these norms the three alphas really give different top-5s.
    tops = {a: tuple(tuple(brute(corpus, j, a)[0]) for j in range(N_QUERIES)) for a in ALPHAS}
    assert len(set(tops.values())) == len(ALPHAS)


def test_constructor_alpha_is_the_default_and_calls_override(corpus, emb):
    store = make_store(emb, alpha=-1.0)
    for j in range(N_QUERIES):
        q = f"query {j}"
        default = [int(d.id) for d in store.similarity_search(q, k=5)]
        assert default == brute(corpus, j, -1.0)[0]
        assert [int(d.id) for d in store.similarity_search(q, k=5, alpha=0.5)] == brute(corpus, j, 0.5)[0]
        vec = corpus["queries"][j].tolist()
        assert [int(d.id) for d in store.similarity_search_by_vector(vec, k=5, alpha=0.0)] == brute(
            corpus, j, 0.0
        )[0]


def test_retriever_search_kwargs_alpha(corpus, emb):
    store = make_store(emb, alpha=0.0)
    retriever = store.as_retriever(search_kwargs={"k": 4, "alpha": -0.75})
    for j in range(4):
        got = [int(d.id) for d in retriever.invoke(f"query {j}")]
        assert got == brute(corpus, j, -0.75, k=4)[0]
    # invoke kwargs beat search_kwargs
    assert [int(d.id) for d in retriever.invoke("query 0", k=2, alpha=0.5)] == brute(corpus, 0, 0.5, k=2)[0]


@pytest.mark.parametrize("alpha", ALPHAS)
def test_relevance_is_the_cosine_whatever_alpha(corpus, emb, alpha):
    store = make_store(emb, alpha=alpha)
    d = corpus["docs"].astype(np.float64)
    for j in range(N_QUERIES):
        q = corpus["queries"][j].astype(np.float64)
        cos = (d @ q) / (np.linalg.norm(d, axis=1) * np.linalg.norm(q))
        rel = store.similarity_search_with_relevance_scores(f"query {j}", k=10)
        assert [int(x.id) for x, _ in rel] == brute(corpus, j, alpha, k=10)[0]  # ranked by score
        want = np.clip(cos[[int(x.id) for x, _ in rel]], 0.0, 1.0)
        np.testing.assert_allclose([r for _, r in rel], want, rtol=1e-5, atol=1e-6)
        # a threshold keeps exactly the top-k documents whose cosine reaches it, at every alpha
        kept = store.similarity_search_with_relevance_scores(f"query {j}", k=10, score_threshold=0.3)
        assert [x.id for x, _ in kept] == [x.id for x, r in rel if r >= 0.3]
    assert relevance_from_cosine(-0.2) == 0.0 and relevance_from_cosine(0.4) == 0.4


def test_filters_apply_before_the_cut(corpus, emb):
    store = make_store(emb, alpha=-1.0)
    allowed_rare = np.arange(N_DOCS) % 50 == 0  # 6 documents, mostly far down the ranking
    allowed_group = np.arange(N_DOCS) % 10 == 3
    for j in range(N_QUERIES):
        q = f"query {j}"
        got = [d.metadata["i"] for d in store.similarity_search(q, k=5, filter=lambda m: m["i"] % 50 == 0)]
        assert got == brute(corpus, j, -1.0, allowed=allowed_rare)[0]
        got = [d.metadata["i"] for d in store.similarity_search(q, k=5, filter={"group": 3})]
        assert got == brute(corpus, j, -1.0, allowed=allowed_group)[0]
    # fewer matches than k: all of them, none invented
    assert len(store.similarity_search("query 0", k=50, filter=lambda m: m["i"] % 50 == 0)) == 6
    assert store.similarity_search("query 0", k=5, filter={"group": 99}) == []


def test_overwrite_delete_get(corpus, emb):
    store = make_store(emb)
    assert len(store) == N_DOCS
    # id "0" now holds doc 1's text and vector
    store.add_texts(["doc 1"], [{"i": 1, "group": 1, "v": 2}], ids=["0"])
    assert len(store) == N_DOCS and len(store.index) == N_DOCS
    (doc,) = store.get_by_ids(["0"])
    assert doc.page_content == "doc 1" and doc.metadata["v"] == 2
    hits = store.similarity_search_by_vector(corpus["docs"][1].tolist(), k=2)
    assert {d.id for d in hits} == {"0", "1"}
    store.delete(["0", "1", "missing"])
    assert store.get_by_ids(["0", "1", "2"]) == [store.get_by_ids(["2"])[0]]
    assert len(store.index) == N_DOCS - 2


def test_save_load_round_trip(tmp_path, corpus, emb):
    store = make_store(emb, alpha=-0.5)
    store.add_texts(["doc 5"], [{"nested": {"x": [1, 2.5, None]}, "s": "é"}], ids=["extra"])
    folder = tmp_path / "store"
    store.save_local(folder)
    store.save_local(folder)  # a second save replaces the first cleanly
    files = sorted(p.name for p in folder.iterdir())
    assert len(files) == 2 and "index.normrank.json" in files
    assert not list(folder.rglob("*.pkl")) and not list(folder.rglob("*.pickle"))
    loaded = NormRankVectorStore.load_local(folder, emb)
    assert loaded.alpha == -0.5 and len(loaded) == len(store)
    for j in range(N_QUERIES):
        a = store.similarity_search_with_score(f"query {j}", k=7)
        b = loaded.similarity_search_with_score(f"query {j}", k=7)
        assert [d for d, _ in a] == [d for d, _ in b]
        np.testing.assert_allclose([s for _, s in a], [s for _, s in b], rtol=1e-6)
    assert loaded.get_by_ids(["extra"])[0].metadata == {"nested": {"x": [1, 2.5, None]}, "s": "é"}
    # the loaded store keeps working: add after load gets fresh keys
    loaded.add_texts(["doc 7"], ids=["new"])
    assert loaded.similarity_search_by_vector(corpus["docs"][7].tolist(), k=3, alpha=0.0)[0].id in {
        "7",
        "new",
    }
    assert NormRankVectorStore.load_local(folder, emb, alpha=1.0).alpha == 1.0


def test_load_rejects_corrupt_folder(tmp_path, emb):
    store = make_store(emb)
    store.save_local(tmp_path / "s")
    path = tmp_path / "s" / "index.normrank.json"
    payload = json.loads(path.read_text())
    payload["index_dir"] = "../elsewhere"
    path.write_text(json.dumps(payload))
    with pytest.raises(CorruptIndexError):
        NormRankVectorStore.load_local(tmp_path / "s", emb)
    path.write_text("{not json")
    with pytest.raises(CorruptIndexError):
        NormRankVectorStore.load_local(tmp_path / "s", emb)
    with pytest.raises(CorruptIndexError):
        NormRankVectorStore.load_local(tmp_path / "nothing", emb)


@pytest.mark.parametrize(
    "bad", [object(), datetime.date(2024, 1, 2), (1, 2), {1: "x"}, float("nan"), {"s": {3, 4}}]
)
def test_add_refuses_metadata_json_cannot_hold(emb, bad):
    store = make_store(emb)
    with pytest.raises(UnstorableMetadataError):
        store.add_texts(["doc 0"], [{"bad": bad}], ids=["new"])
    assert len(store) == N_DOCS and store.get_by_ids(["new"]) == []  # nothing changed


def test_unit_norm_vectors_warn_once(corpus):
    unit = corpus["docs"] / np.linalg.norm(corpus["docs"], axis=1, keepdims=True)
    emb = TableEmbeddings({f"doc {i}": v for i, v in enumerate(unit)})
    store = NormRankVectorStore(emb, alpha=-1.0)
    with pytest.warns(UnitNormWarning, match="alpha has no effect"):
        store.add_texts(texts()[:10])
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnitNormWarning)
        store.add_texts(texts()[10:20])  # second time: silent


def test_raw_vectors_do_not_warn(emb):
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnitNormWarning)
        make_store(emb)


async def test_async_variants(corpus, emb):
    store = NormRankVectorStore(emb, alpha=0.5)
    ids = await store.aadd_texts(texts(), metas(), ids=[str(i) for i in range(N_DOCS)])
    assert len(ids) == N_DOCS
    got = await store.asimilarity_search("query 2", k=5, alpha=-1.0)
    assert [int(d.id) for d in got] == brute(corpus, 2, -1.0)[0]
    got = await store.asimilarity_search_with_score("query 2", k=5)
    assert [int(d.id) for d, _ in got] == brute(corpus, 2, 0.5)[0]
    got = await store.asimilarity_search("query 2", k=5, filter={"group": 4})
    assert all(d.metadata["group"] == 4 for d in got) and len(got) == 5
    rel = await store.asimilarity_search_with_relevance_scores("query 2", k=5)
    assert all(0 <= r <= 1 for _, r in rel)
    await store.adelete(["0"])
    assert await store.aget_by_ids(["0"]) == []
    mmr = await store.amax_marginal_relevance_search("query 2", k=3, fetch_k=10)
    assert len(mmr) == 3
    docs = await store.as_retriever(search_kwargs={"k": 3, "alpha": -1.0}).ainvoke("query 1")
    assert [int(d.id) for d in docs] == brute(corpus, 1, -1.0, k=3)[0]


def test_mmr_draws_from_the_norm_weighted_candidates(corpus, emb):
    store = make_store(emb, alpha=-1.0)
    fetch = {int(d.id) for d in store.similarity_search("query 3", k=12)}
    mmr = store.max_marginal_relevance_search("query 3", k=5, fetch_k=12, lambda_mult=0.3)
    assert len(mmr) == 5 and {int(d.id) for d in mmr} <= fetch
    assert int(mmr[0].id) == brute(corpus, 3, -1.0, k=1)[0][0]  # MMR starts from the best
    mmr = store.max_marginal_relevance_search("query 3", k=4, fetch_k=20, filter={"group": 2})
    assert all(d.metadata["group"] == 2 for d in mmr)


def test_from_documents_and_empty_store(emb):
    store = NormRankVectorStore(emb)
    assert store.similarity_search("query 0", k=3) == []
    docs = [Document(page_content=f"doc {i}", metadata={"i": i}, id=f"d{i}") for i in range(5)]
    store = NormRankVectorStore.from_documents(docs, emb, alpha=-1.0)
    assert store.alpha == -1.0 and sorted(d.id for d in store.get_by_ids(["d0", "d4"])) == ["d0", "d4"]


@pytest.mark.parametrize("bad", [{"k": 0}, {"k": 2.5}, {"alpha": float("nan")}, {"alpha": "x"}])
def test_bad_parameters_raise_typed_errors(emb, bad):
    store = make_store(emb)
    with pytest.raises(InvalidParameterError):
        store.similarity_search("query 0", **{"k": 3, **bad})


@pytest.mark.parametrize("alpha", ALPHAS)
def test_compressor_reranks_like_bruteforce(corpus, emb, alpha):
    # candidates as any retriever would return them (here: arbitrary 40 documents, shuffled)
    rng = np.random.default_rng(7)
    pick = rng.choice(N_DOCS, size=40, replace=False)
    docs = [Document(page_content=f"doc {i}", metadata={"i": int(i)}) for i in pick]
    docs = add_norm_metadata(docs, emb)
    assert all("normrank_norm" not in d.metadata for d in [Document(page_content="doc 0")])
    comp = NormReweightCompressor(embeddings=emb, alpha=alpha, top_n=5)
    allowed = np.isin(np.arange(N_DOCS), pick)
    for j in range(N_QUERIES):
        out = comp.compress_documents(docs, f"query {j}")
        want_ids, want_scores = brute(corpus, j, alpha, allowed=allowed)
        assert [d.metadata["i"] for d in out] == want_ids
        np.testing.assert_allclose([d.metadata["normrank_score"] for d in out], want_scores, rtol=1e-5)


def test_compressor_uses_the_stored_norm_not_the_embedding(corpus, emb):
    # The compressor's embeddings may be normalising: the norm must come from metadata.
    unit = {t: v / np.linalg.norm(v) for t, v in emb.table.items()}
    docs = add_norm_metadata([Document(page_content=f"doc {i}") for i in range(N_DOCS)], emb)
    comp = NormReweightCompressor(embeddings=TableEmbeddings(unit), alpha=-1.0, top_n=5)
    out = comp.compress_documents(docs, "query 0")
    assert [int(d.page_content.split()[1]) for d in out] == brute(corpus, 0, -1.0)[0]
    with pytest.raises(InvalidInputError, match="add_norm_metadata"):
        comp.compress_documents([Document(page_content="doc 0")], "query 0")


def test_compression_retriever_over_a_normrank_store_needs_no_norm_metadata(corpus, emb):
    """ContextualCompressionRetriever(NormReweightCompressor(vectorstore=store), store.as_retriever()):
    the store holds the raw vectors, so the norms come from it (documents added with plain
    from_texts carry no normrank_norm metadata); the query is embedded by a normalising model."""
    ccr_module = pytest.importorskip("langchain_classic.retrievers")
    store = make_store(emb)
    unit = TableEmbeddings({t: v / np.linalg.norm(v) for t, v in emb.table.items()})
    comp = NormReweightCompressor(embeddings=unit, alpha=-1.0, top_n=5, vectorstore=store)
    retriever = ccr_module.ContextualCompressionRetriever(
        base_compressor=comp, base_retriever=store.as_retriever(search_kwargs={"k": 40})
    )
    for j in range(N_QUERIES):
        candidates = [d.metadata["i"] for d in store.similarity_search(f"query {j}", k=40)]
        out = retriever.invoke(f"query {j}")
        want_ids, want_scores = brute(corpus, j, -1.0, allowed=np.isin(np.arange(N_DOCS), candidates))
        assert [d.metadata["i"] for d in out] == want_ids
        np.testing.assert_allclose([d.metadata["normrank_score"] for d in out], want_scores, rtol=1e-5)


def test_embeddings_wrapper_returns_raw_vectors(corpus):
    from langchain_normrank import NormRankEmbeddings

    class FakeEncoder:
        def __init__(self) -> None:
            self.calls = []

        def encode(self, texts, batch_size=64):
            self.calls.append(batch_size)
            return np.stack([corpus["docs"][int(t.split()[1])] for t in texts])

    fake = FakeEncoder()
    emb = NormRankEmbeddings(encoder=fake, batch_size=7)
    np.testing.assert_allclose(emb.embed_documents(["doc 3", "doc 4"]), corpus["docs"][[3, 4]], rtol=1e-6)
    np.testing.assert_allclose(emb.embed_query("doc 5"), corpus["docs"][5], rtol=1e-6)
    assert fake.calls == [7, 7] and emb.embed_documents([]) == []
    lazy = NormRankEmbeddings("no-such-model-anywhere")  # constructing loads nothing
    assert lazy._encoder is None
