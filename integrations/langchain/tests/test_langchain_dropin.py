"""FAISS users' code, run against NormRankVectorStore: what LangChain's FAISS accepts either works
the same or is refused with a typed error; nothing is silently ignored. The reference for
filters and ranking is langchain_community's FAISS itself."""

from __future__ import annotations

import numpy as np
import pytest
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_normrank import (
    FaissSaveError,
    MigrationWarning,
    NormRankVectorStore,
    NormReweightCompressor,
    StoreNotFoundError,
    UnknownArgumentError,
    embed_with_norms,
)

from normrank.errors import InvalidParameterError

N, DIM = 240, 12


class CountingEmbeddings(Embeddings):
    """Fixed raw vectors by text; counts how many texts were embedded."""

    def __init__(self, table: dict[str, np.ndarray]) -> None:
        self.table = table
        self.embedded = 0

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.embedded += len(texts)
        return [self.table[t].tolist() for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self.table[text].tolist()


@pytest.fixture(scope="module")
def vecs() -> np.ndarray:
    rng = np.random.default_rng(11)
    return (rng.normal(size=(N, DIM)) * np.exp(rng.normal(0, 0.6, size=(N, 1)))).astype(np.float32)


@pytest.fixture()
def emb(vecs) -> CountingEmbeddings:
    table = {f"doc {i}": v for i, v in enumerate(vecs)}
    rng = np.random.default_rng(12)
    table.update({f"query {j}": rng.normal(size=DIM).astype(np.float32) for j in range(6)})
    return CountingEmbeddings(table)


def texts() -> list[str]:
    return [f"doc {i}" for i in range(N)]


def metas() -> list[dict]:
    return [{"i": i, "group": i % 7, "tag": "ab"[i % 2]} for i in range(N)]


def ids() -> list[str]:
    return [str(i) for i in range(N)]


@pytest.fixture()
def store(emb) -> NormRankVectorStore:
    return NormRankVectorStore.from_texts(texts(), emb, metas(), ids())


# ---------------------------------------------------------------------- nothing silently ignored
def test_issue_snippets_unknown_and_foreign_arguments(emb):
    with pytest.raises(TypeError, match="alpha"):
        NormRankVectorStore.from_texts(texts(), emb, norm_alpha=-0.5)
    with pytest.raises(InvalidParameterError, match="norms"):
        NormRankVectorStore.from_texts(texts(), emb, alpha=-0.5, normalize_L2=True)
    store = NormRankVectorStore.from_texts(texts(), emb, alpha=-0.5, distance_strategy="COSINE")
    assert store.alpha == -0.5
    with pytest.raises(TypeError, match="'alpha'"):
        NormRankVectorStore.from_texts(texts(), emb, aplha=-0.5)
    with pytest.raises(TypeError):
        store.add_texts(["doc 0"], bogus=1)
    with pytest.raises(TypeError):
        store.delete(["0"], bogus=1)
    with pytest.raises(TypeError, match="'fetch_k'"):
        store.similarity_search("query 0", fetch_kk=3)
    with pytest.raises(TypeError):
        store.as_retriever(search_kwargs={"k": 2, "bogus": 1})
    with pytest.raises(TypeError):
        store.max_marginal_relevance_search("query 0", score_threshold=0.2)
    assert len(store) == N  # the refused calls changed nothing
    assert issubclass(UnknownArgumentError, TypeError)


def test_distance_strategies_other_than_ours_are_refused_with_why(emb):
    ds = pytest.importorskip("langchain_community.vectorstores.utils").DistanceStrategy
    NormRankVectorStore(emb, distance_strategy=ds.COSINE)
    for strategy, why in [
        (ds.MAX_INNER_PRODUCT, "alpha=1.0"),
        (ds.EUCLIDEAN_DISTANCE, "cosine"),
        (ds.JACCARD, "no equivalent"),
    ]:
        with pytest.raises(InvalidParameterError, match=why):
            NormRankVectorStore.from_texts(texts(), emb, distance_strategy=strategy)


def test_alpha_one_ranks_by_inner_product(store, vecs, emb):
    q = np.asarray(emb.embed_query("query 1"), dtype=np.float64)
    want = np.argsort(-(vecs.astype(np.float64) @ q), kind="stable")[:8]
    assert [int(d.id) for d in store.similarity_search("query 1", k=8, alpha=1.0)] == want.tolist()


# ---------------------------------------------------------------------- FAISS's dict filters
FILTERS = [
    {"group": 3},
    {"group": [1, 2]},
    {"group": {"$in": [1, 2]}},
    {"group": {"$nin": [1, 2, 3]}},
    {"group": {"$eq": 4}},
    {"group": {"$neq": 4}},
    {"i": {"$gte": 100, "$lt": 130}},
    {"i": {"$gt": 200}},
    {"i": {"$lte": 9}},
    {"group": 2, "tag": "a"},
    {"$or": [{"group": 1}, {"i": {"$lte": 10}}]},
    {"$and": [{"group": {"$neq": 3}}, {"i": {"$gt": 50}}, {"tag": ["b"]}]},
    {"$not": {"group": {"$in": [0, 1, 2, 3, 4]}}},
    {"missing": None},
]


@pytest.fixture()
def faiss_store(emb):
    faiss_mod = pytest.importorskip("langchain_community.vectorstores")
    # normalize_L2 + L2: FAISS ranks by cosine, which is NormRankVectorStore at alpha = 0
    return faiss_mod.FAISS.from_texts(texts(), emb, metas(), ids=ids(), normalize_L2=True)


@pytest.mark.parametrize("spec", FILTERS, ids=[str(f) for f in FILTERS])
def test_dict_filters_match_langchain_faiss(store, faiss_store, spec):
    for j in range(3):
        want = [d.id for d in faiss_store.similarity_search(f"query {j}", k=6, filter=spec, fetch_k=N)]
        got = [d.id for d in store.similarity_search(f"query {j}", k=6, filter=spec)]
        assert got == want and got  # every filter above matches something
        got = [d.id for d in store.similarity_search(f"query {j}", k=6, filter=spec, fetch_k=2)]
        assert got == want  # fetch_k only sets where the exact widening starts


@pytest.mark.parametrize(
    "spec",
    [
        {"group": {"$like": 3}},
        {"$nor": [{"group": 1}]},
        {"$eq": 3},
        {"$and": [{"group": 1}], "tag": "a"},  # FAISS would ignore "tag"
        {"group": {"$in": 3}},
        {"$or": {"group": 1}},
    ],
    ids=str,
)
def test_bad_filters_are_refused_not_matched_empty(store, spec):
    with pytest.raises(InvalidParameterError):
        store.similarity_search("query 0", k=3, filter=spec)


def test_comparison_with_a_missing_field_does_not_match(emb):
    store = NormRankVectorStore.from_texts(["doc 0", "doc 1"], emb, [{"year": 2001}, {}])
    assert [d.metadata for d in store.similarity_search("query 0", k=5, filter={"year": {"$gt": 2000}})] == [
        {"year": 2001}
    ]


# ---------------------------------------------------------------------- FAISS calls, unchanged
def test_save_local_index_name_and_load_local_pickle_flag(store, emb, tmp_path):
    store.save_local(str(tmp_path), index_name="papers")
    assert (tmp_path / "papers.normrank.json").is_file() and not list(tmp_path.glob("*.pkl"))
    again = NormRankVectorStore.load_local(
        str(tmp_path), emb, index_name="papers", allow_dangerous_deserialization=True
    )
    assert [d.id for d in again.similarity_search("query 2", k=5)] == [
        d.id for d in store.similarity_search("query 2", k=5)
    ]
    with pytest.raises(StoreNotFoundError):
        NormRankVectorStore.load_local(str(tmp_path), emb)  # index_name "index" was never saved
    with pytest.raises(FileNotFoundError):
        NormRankVectorStore.load_local(str(tmp_path / "no such folder"), emb)


def test_retriever_k_and_fetch_k_for_filtered_and_mmr_search(store, faiss_store):
    r = store.as_retriever(search_kwargs={"k": 2, "fetch_k": 10, "filter": {"group": 5}})
    want = [d.id for d in faiss_store.similarity_search("query 3", k=2, filter={"group": 5}, fetch_k=N)]
    assert [d.id for d in r.invoke("query 3")] == want
    mmr = store.as_retriever(search_type="mmr", search_kwargs={"k": 2, "fetch_k": 10, "filter": {"group": 5}})
    pool = {d.id for d in store.similarity_search("query 3", k=10, filter={"group": 5})}
    got = mmr.invoke("query 3")
    assert len(got) == 2 and {d.id for d in got} <= pool and got[0].id == want[0]
    small = store.max_marginal_relevance_search("query 3", k=3, fetch_k=3, lambda_mult=0.0)
    assert {d.id for d in small} == {d.id for d in store.similarity_search("query 3", k=3)}


def test_from_embeddings_does_not_embed_again(emb, vecs):
    store = NormRankVectorStore.from_embeddings(zip(texts(), vecs.tolist(), strict=True), emb, metas())
    assert emb.embedded == 0 and len(store) == N
    store.add_embeddings([("doc 0", vecs[0].tolist())], ids=["x"])
    assert emb.embedded == 0 and store.get_by_ids(["x"])[0].page_content == "doc 0"


def test_score_threshold_keeps_similarities_at_least(store):
    pairs = store.similarity_search_with_score("query 0", k=20, score_threshold=0.1)
    assert pairs and all(s >= 0.1 for _, s in pairs)
    everything = store.similarity_search_with_score("query 0", k=20)
    assert [d.id for d, _ in pairs] == [d.id for d, s in everything if s >= 0.1]


# ---------------------------------------------------------------------- migration (fakes; real data: test_langchain_migration.py)
def test_migrate_from_a_faiss_object_and_folder(emb, vecs, tmp_path):
    faiss_mod = pytest.importorskip("langchain_community.vectorstores")
    old = faiss_mod.FAISS.from_texts(texts(), emb, metas(), ids=ids())  # raw vectors, L2
    emb.embedded = 0
    new = NormRankVectorStore.from_faiss(old, alpha=-1.0)
    assert emb.embedded == 0  # raw vectors are copied, not re-embedded
    assert new.get_by_ids(["7"])[0].metadata == metas()[7]
    np.testing.assert_allclose(
        new.index.norm_of([new._store._key_of["7"]]), [np.linalg.norm(vecs[7])], rtol=1e-5
    )
    old.save_local(str(tmp_path))
    # normrank never unpickles: a FAISS folder is refused, with or without the flag, naming the
    # two lines that migrate it in the user's own code
    for flag in (False, True):
        with pytest.raises(FaissSaveError, match="from_faiss"):
            NormRankVectorStore.load_local(str(tmp_path), emb, allow_dangerous_deserialization=flag)
    mine = faiss_mod.FAISS.load_local(str(tmp_path), emb, allow_dangerous_deserialization=True)
    loaded = NormRankVectorStore.from_faiss(mine, alpha=-1.0)
    assert [d.id for d in loaded.similarity_search("query 4", k=10)] == [
        d.id for d in new.similarity_search("query 4", k=10)
    ]
    loaded.save_local(str(tmp_path))  # now a normrank store too: loads without the flag
    assert len(NormRankVectorStore.load_local(str(tmp_path), emb)) == N


def test_migrating_unit_vectors_says_the_norms_are_gone_and_reembeds(emb):
    faiss_mod = pytest.importorskip("langchain_community.vectorstores")
    old = faiss_mod.FAISS.from_texts(texts(), emb, metas(), ids=ids(), normalize_L2=True)
    emb.embedded = 0
    with pytest.warns(MigrationWarning, match="norms are gone"):
        new = NormRankVectorStore.from_faiss(old, alpha=-1.0)
    assert emb.embedded == N  # re-embedded exactly once, only because the norms were gone
    assert len(new) == N


# ---------------------------------------------------------------------- reranking without re-embedding
def test_compressor_reads_vectors_from_the_base_store(emb, vecs):
    faiss_mod = pytest.importorskip("langchain_community.vectorstores")
    docs, vectors = embed_with_norms(
        [Document(page_content=t, metadata=m) for t, m in zip(texts(), metas(), strict=True)], emb
    )
    assert emb.embedded == N  # ingestion encodes once ...
    base = faiss_mod.FAISS.from_embeddings(
        zip([d.page_content for d in docs], vectors, strict=True), emb, [d.metadata for d in docs], ids=ids()
    )
    assert emb.embedded == N  # ... and the store does not encode again
    cands = base.similarity_search("query 5", k=40)
    comp = NormReweightCompressor(embeddings=emb, alpha=-1.0, top_n=5, vectorstore=base)
    out = comp.compress_documents(cands, "query 5")
    assert emb.embedded == N  # the candidates' vectors came from FAISS
    pos = np.array([int(d.id) for d in cands])
    x = vecs[pos].astype(np.float64)
    q = np.asarray(emb.embed_query("query 5"), dtype=np.float64)
    s = (x @ q) / (np.linalg.norm(x, axis=1) * np.linalg.norm(q)) * np.linalg.norm(x, axis=1) ** -1.0
    assert [int(d.id) for d in out] == pos[np.argsort(-s, kind="stable")[:5]].tolist()
    with pytest.raises(TypeError):
        NormReweightCompressor(embeddings=emb, alpha=-1.0, topn=5)
    with pytest.raises(InvalidParameterError):
        NormReweightCompressor(embeddings=emb, alpha=-40.0)


# ---------------------------------------------------------------------- tampered store files
def _deep(levels: int) -> dict:
    out: dict = {}
    cur = out
    for _ in range(levels):
        cur["x"] = {}
        cur = cur["x"]
    return out


TAMPERS = {
    "alpha 1e308": lambda p: p.update(alpha=1e308),
    "alpha -17": lambda p: p.update(alpha=-17),
    "index_dir missing": lambda p: p.pop("index_dir"),
    "next_key 0": lambda p: p.update(next_key=0),
    "next_key 2**70": lambda p: p.update(next_key=2**70),
    "metadata 700 deep": lambda p: p["records"][0]["record"].update(metadata=_deep(700)),
    "text not a string": lambda p: p["records"][0]["record"].update(text=3),
    "extra record field": lambda p: p["records"][0]["record"].update(vector=[1, 2]),
}


@pytest.mark.parametrize("case", sorted(TAMPERS))
def test_tampered_store_file_is_refused_at_load(store, emb, tmp_path, case):
    import json

    from normrank.errors import CorruptIndexError

    store.save_local(tmp_path)
    path = tmp_path / "index.normrank.json"
    payload = json.loads(path.read_text())
    TAMPERS[case](payload)
    path.write_text(json.dumps(payload))
    with pytest.raises(CorruptIndexError):
        NormRankVectorStore.load_local(tmp_path, emb)


def test_migrate_an_ivf_faiss_store(emb, vecs):
    import faiss

    faiss_mod = pytest.importorskip("langchain_community.vectorstores")
    docstore = pytest.importorskip("langchain_community.docstore.in_memory").InMemoryDocstore
    quantizer = faiss.IndexFlatL2(DIM)
    ivf = faiss.IndexIVFFlat(quantizer, DIM, 4)
    ivf.train(vecs)
    old = faiss_mod.FAISS(embedding_function=emb, index=ivf, docstore=docstore(), index_to_docstore_id={})
    old.add_texts(texts(), metas(), ids=ids())
    new = NormRankVectorStore.from_faiss(old, alpha=-1.0)  # exact search over the IVF's vectors
    x = vecs.astype(np.float64)
    q = np.asarray(emb.embed_query("query 2"), dtype=np.float64)
    s = (x @ q) / (np.linalg.norm(x, axis=1) * np.linalg.norm(q)) / np.linalg.norm(x, axis=1)
    want = [str(i) for i in np.argsort(-s, kind="stable")[:5]]
    assert [d.id for d in new.similarity_search("query 2", k=5)] == want
    # the compressor cannot read single vectors from this IVF (no direct map): it embeds instead
    docs = [
        d.model_copy(
            update={"metadata": {**d.metadata, "normrank_norm": float(np.linalg.norm(vecs[int(d.id)]))}}
        )
        for d in old.similarity_search("query 2", k=30)
    ]
    emb.embedded = 0
    out = NormReweightCompressor(embeddings=emb, alpha=-1.0, top_n=3, vectorstore=old).compress_documents(
        docs, "query 2"
    )
    assert emb.embedded == len(docs)
    pool = np.array([int(d.id) for d in docs])
    assert [int(d.id) for d in out] == pool[np.argsort(-s[pool], kind="stable")[:3]].tolist()


def test_retriever_refuses_unknown_arguments(store):
    from langchain_normrank import NormRankRetriever

    with pytest.raises(TypeError, match="'alpha'"):
        NormRankRetriever(vectorstore=store, aplha=-1.0)
    with pytest.raises(TypeError, match="'lambda_mult'"):
        store.as_retriever(search_type="mmr", search_kwargs={"lambda": 0.2})
    with pytest.raises(TypeError):
        store.as_retriever(search_type="mmr", search_kwargs={"score_threshold": 0.2})
    r = NormRankRetriever(vectorstore=store, k=3, alpha=-1.0, search_kwargs={"fetch_k": 50})
    assert len(r.invoke("query 0")) == 3


def test_pickle_bytes_round_trip_is_refused_with_the_calls_that_work(store, emb):
    # FAISS users write `FAISS.deserialize_from_bytes(db.serialize_to_bytes(), emb)`: both are
    # pickles there, so both are refused here with a message naming save_local / from_faiss.
    from normrank.errors import NormrankError

    with pytest.raises(NotImplementedError, match="save_local") as err:
        store.serialize_to_bytes()
    assert isinstance(err.value, NormrankError)
    with pytest.raises(NotImplementedError, match="from_faiss"):
        NormRankVectorStore.deserialize_from_bytes(b"\x80\x04", emb, allow_dangerous_deserialization=True)
